package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// Frame preconditions: expect_seq (docs/architecture.md, "expect_seq: where each
// precondition is checked").
//
// A frame's expect_seq is the highest seq its client had seen. Each frame method
// reads it from ctx (control.WithExpect, set by every path that hands a client frame
// in) and checks it where the check cannot be overtaken by the event it guards
// against:
//
//   - set_policy: a compare-and-append. The log after expect_seq is read up to the tip
//     and the policy/updated put at exactly tip+1 (sessionlog.AppendInAtStamped): the put
//     succeeds only if nothing was logged after what was read.
//   - approve, deny: the request's seq is fixed once logged, and the verdict is already
//     a compare-and-append (resolveVerdict).
//   - cancel: the turn the client saw is found in the log, and the cancel is written
//     on the state item conditional on that turn still being the recorded one; the
//     runner only ever stops the turn a cancel names (cancelled).
//   - inject: checked when the frame is served, and again by the runner when it drains
//     the inject, against the log it alone appends turn/start and turn/end to while it
//     holds the lease. An inject found stale there is dropped, logging nothing, and its
//     connection is answered stale through Config.Answer.

// Answerer sends an error frame to a client connection that stays open: the runner
// answers a frame it refused after the frame's handler had queued it (an inject whose
// expect_seq a turn overtook). Package delivery implements it (Deliverer.Answer).
type Answerer interface {
	Answer(ctx context.Context, agentID, connID string, f protocol.Error) error
}

// expectPage is how many events one read of the log after an expect_seq takes.
const expectPage = 100

// isTurnEdge reports a turn/start or a turn/end: what an inject's or a cancel's
// expect_seq guards against.
func isTurnEdge(ev sessionlog.Event) bool {
	return ev.Type == TypeTurnStart || ev.Type == TypeTurnEnd
}

func isPolicyUpdate(ev sessionlog.Event) bool { return ev.Type == TypePolicyUpdated }

// afterExpect reads agentID's log after expect up to its tip and returns the tip. The
// first event for which conflict holds makes it a *control.StaleError naming it; an
// expect above the tip is a *control.AheadError. Cost: the tip (1 read unit) and the
// events after expect (for a client that is up to date, none).
func (c *core) afterExpect(ctx context.Context, agentID, frame string, expect int64, conflict func(sessionlog.Event) bool) (int64, error) {
	tip, err := c.log.Tip(ctx, agentID)
	if err != nil {
		return 0, fmt.Errorf("agent: read tip of %s: %w", agentID, err)
	}
	if expect > tip {
		return 0, &control.AheadError{Frame: frame, Expect: expect, Tip: tip}
	}
	return tip, c.scanAfter(ctx, agentID, frame, expect, expect+1, tip, conflict)
}

// scanAfter reads the log from from to to (inclusive) for an event conflicting with a
// frame's expect (see afterExpect).
func (c *core) scanAfter(ctx context.Context, agentID, frame string, expect, from, to int64, conflict func(sessionlog.Event) bool) error {
	for from <= to {
		evs, err := c.log.Read(ctx, agentID, from, int(min(to-from+1, expectPage)))
		if err != nil {
			return fmt.Errorf("agent: read log of %s from %d: %w", agentID, from, err)
		}
		if len(evs) == 0 {
			return nil
		}
		for _, ev := range evs {
			if ev.Seq > to {
				return nil
			}
			if conflict(ev) {
				return &control.StaleError{Frame: frame, Expect: expect, Seq: ev.Seq, Type: ev.Type}
			}
		}
		from = evs[len(evs)-1].Seq + 1
	}
	return nil
}

// cancelExpecting is Cancel under expect_seq: it stops the turn open at expect — the
// one the client saw running — or none. A turn/start or turn/end logged after expect
// is stale; a turn whose turn/end is at or before expect, or no turn open at expect,
// is ErrNotRunning. The cancel is recorded on the state item conditional on that turn
// still being recorded (cancelTurnIf), so it can never stop a later turn: the runner
// stops only the turn a cancel names. Once recorded, a turn/end of that turn other
// than a cancel, logged meanwhile, makes the answer stale (the cancel, recorded against
// an ended turn, does nothing). Cost: the tip and the events after expect, 1 read of
// the state item, 1–2 log reads around the turn's start and end, 1 conditional write,
// and one asynchronous invoke.
func (s *Service) cancelExpecting(ctx context.Context, agentID, reason string, expect int64) error {
	if _, err := s.c.afterExpect(ctx, agentID, protocol.TypeCancel, expect, isTurnEdge); err != nil {
		return err
	}
	// No turn running now: stale if a turn/start or turn/end came after expect
	// meanwhile (the turn the client saw ended), else not_running.
	notRunning := func() error {
		if _, err := s.c.afterExpect(ctx, agentID, protocol.TypeCancel, expect, isTurnEdge); err != nil {
			return err
		}
		return ErrNotRunning
	}
	st, err := s.c.store.getState(ctx, agentID, attrTurnID, "turn_seq")
	if err != nil {
		return err
	}
	if st.TurnID == "" {
		return notRunning()
	}
	started, err := s.c.turnStartSeq(ctx, agentID, st)
	if err != nil {
		return err
	}
	switch {
	case started == 0:
		return notRunning() // claimed, not started
	case started > expect:
		return &control.StaleError{Frame: protocol.TypeCancel, Expect: expect, Seq: started, Type: TypeTurnStart}
	}
	staleEnd := func() error {
		te, done, err := s.c.turnEndedSeq(ctx, agentID, st)
		if err != nil || !done {
			return err
		}
		if te.seq <= expect {
			return ErrNotRunning // the client saw it end
		}
		if te.Status == StatusCancelled {
			return nil // stopped by this cancel or an earlier one: the turn it named
		}
		return &control.StaleError{Frame: protocol.TypeCancel, Expect: expect, Seq: te.seq, Type: TypeTurnEnd}
	}
	if err := staleEnd(); err != nil {
		return err
	}
	recorded, err := s.c.store.cancelTurnIf(ctx, agentID, st.TurnID, reason)
	if err != nil {
		return err
	}
	if !recorded {
		return notRunning() // no longer recorded: its turn/end is logged
	}
	s.c.pause(PauseCancelRecorded, agentID)
	if err := staleEnd(); err != nil {
		return err
	}
	return s.c.invoke(ctx, agentID)
}

// startTail is how many events from a recorded turn's first seq turnStartSeq reads for
// its turn/start: the user/message and the turn/start come first, with at most a few
// events of other writers (a set_policy, a verdict) between them.
const startTail = 16

// turnStartSeq returns the seq of the turn/start of the turn st records, or 0 when it
// is not logged (the turn is claimed but not started). Cost: 1 log read (usually 1 read
// unit).
func (c *core) turnStartSeq(ctx context.Context, agentID string, st state) (int64, error) {
	evs, err := c.log.Read(ctx, agentID, st.TurnSeq, startTail)
	if err != nil {
		return 0, fmt.Errorf("agent: read log of %s: %w", agentID, err)
	}
	for _, ev := range evs {
		if ev.Type == TypeTurnStart && decode[turnStart](ev).TurnID == st.TurnID {
			return ev.Seq, nil
		}
	}
	return 0, nil
}

// seqTurnEnd is a turn/end with its seq.
type seqTurnEnd struct {
	turnEnd
	seq int64
}

// turnEndedSeq is turnEnded with the turn/end's seq.
func (c *core) turnEndedSeq(ctx context.Context, agentID string, st state) (seqTurnEnd, bool, error) {
	if st.TurnID == "" {
		return seqTurnEnd{}, false, nil
	}
	tip, err := c.log.Tip(ctx, agentID)
	if err != nil {
		return seqTurnEnd{}, false, fmt.Errorf("agent: read tip of %s: %w", agentID, err)
	}
	evs, err := c.log.Read(ctx, agentID, max(st.TurnSeq, tip-endedTail+1), endedTail)
	if err != nil {
		return seqTurnEnd{}, false, fmt.Errorf("agent: read log of %s: %w", agentID, err)
	}
	for _, ev := range evs {
		if ev.Type == TypeTurnEnd {
			if te := decode[turnEnd](ev); te.TurnID == st.TurnID {
				return seqTurnEnd{turnEnd: te, seq: ev.Seq}, true, nil
			}
		}
	}
	return seqTurnEnd{}, false, nil
}

// cancelTurnIf records a cancel of turnID with reason and counts the stimulus, if
// turnID is still the recorded turn; it reports whether it wrote. Cost: 1 write unit.
func (st *store) cancelTurnIf(ctx context.Context, agentID, turnID, reason string) (bool, error) {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #cancel_turn = :t, #cancel_reason = :r ADD #pending :one"),
		ConditionExpression:       aws.String("#turn_id = :t"),
		ExpressionAttributeNames:  names("cancel_turn", attrTurnID, "cancel_reason", attrPending),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": s(turnID), ":r": s(reason), ":one": n(1)},
	})
	if dynamoerr.CondFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("agent: cancel turn %s of %s: %w", turnID, agentID, err)
	}
	return true, nil
}

// setPolicyExpecting is SetPolicy under expect_seq: a compare-and-append. It reads the
// log after expect up to the tip; a policy/updated there is stale; otherwise it puts
// its policy/updated at exactly tip+1, and a put that finds the seq taken reads what
// came meanwhile and tries again. So the policy/updated is logged only if no other was
// logged after expect. It is then claimed as SetPolicy claims its own (send order).
// Cost: SetPolicy's, plus the tip and the events after expect (1 read unit for a client
// up to date); each lost race adds a read of what won it.
func (s *Service) setPolicyExpecting(ctx context.Context, agentID string, patterns []string, expect int64) error {
	key := s.c.stamp(ctx).Key()
	tip, err := s.c.afterExpect(ctx, agentID, protocol.TypeSetPolicy, expect, isPolicyUpdate)
	if err != nil {
		return err
	}
	if _, err := s.c.store.seePolicy(ctx, agentID, key); err != nil {
		return err
	}
	// The put lands only in the log the precondition was checked against: a reset or
	// delete in between makes it ErrEpoch, never an event in the next log.
	epoch, err := s.c.log.Epoch(ctx, agentID)
	if err != nil {
		return fmt.Errorf("agent: read epoch of %s: %w", agentID, err)
	}
	for attempt := 0; ; attempt++ {
		ev, err := s.c.log.AppendInAtStamped(ctx, agentID, sessionlog.Fence{Epoch: epoch}, tip+1, TypePolicyUpdated, policyUpdated{Patterns: patterns, ClientID: control.FrameFrom(ctx).ClientID}, key)
		if err == nil {
			return s.claimPolicy(ctx, agentID, ev)
		}
		if !errors.Is(err, sessionlog.ErrConflict) {
			return fmt.Errorf("agent: update policy of %s: %w", agentID, err)
		}
		if attempt >= 50 {
			return fmt.Errorf("agent: update policy of %s: %w", agentID, errPolicyContended)
		}
		now, err := s.c.log.Tip(ctx, agentID)
		if err != nil {
			return fmt.Errorf("agent: read tip of %s: %w", agentID, err)
		}
		if err := s.c.scanAfter(ctx, agentID, protocol.TypeSetPolicy, expect, tip+1, now, isPolicyUpdate); err != nil {
			return err
		}
		tip = now
	}
}

// verdictExpecting checks an approve's or deny's expect_seq against w, the open turn
// read to the tip: expect above the tip is bad_frame; a standing request logged after
// expect is stale. A call with no standing request is left to resolveVerdict
// (ErrStaleCall).
func verdictExpecting(w *logWindow, frame, callID string, expect int64) error {
	if expect > w.last {
		return &control.AheadError{Frame: frame, Expect: expect, Tip: w.last}
	}
	if w.turn == nil || !w.turn.stands(callID) {
		return nil
	}
	if seq := w.turn.requestSeq[callID]; seq > expect {
		return &control.StaleError{Frame: frame, Expect: expect, Seq: seq, Type: TypeApprovalRequested}
	}
	return nil
}

// verdictFrame is the frame type of a verdict.
func verdictFrame(verdictText string) string {
	if verdictText == VerdictDenied {
		return protocol.TypeDeny
	}
	return protocol.TypeApprove
}

// staleInject reports the conflict that makes a queued inject with an expect_seq
// stale now (nil: none): a turn/start or turn/end after its expect_seq, read from the
// log up to its tip. The runner calls it under its lease, before it logs the inject:
// it alone appends turn/start and turn/end, so none can come between the check and
// the inject's event.
func (rn *activeRun) staleInject(ctx context.Context, it inboxItem) (*control.StaleError, error) {
	if it.ExpectSeq == nil {
		return nil, nil
	}
	tip, err := rn.c.log.Tip(ctx, rn.agent)
	if err != nil {
		return nil, fmt.Errorf("agent: read tip of %s: %w", rn.agent, err)
	}
	err = rn.c.scanAfter(ctx, rn.agent, protocol.TypeInject, *it.ExpectSeq, *it.ExpectSeq+1, tip, isTurnEdge)
	var se *control.StaleError
	if errors.As(err, &se) {
		return se, nil
	}
	return nil, err
}

// answerStale tells the connection that sent a queued inject that it was found stale
// and dropped. A connection gone or superseded meanwhile gets nothing; a failure is
// logged: the inject is dropped either way.
func (rn *activeRun) answerStale(ctx context.Context, it inboxItem, se *control.StaleError) {
	rn.c.logger.InfoContext(ctx, "stale inject dropped", "agent_id", rn.agent, "inbox_id", it.ID,
		"expect_seq", se.Expect, "conflict_seq", se.Seq)
	if rn.c.cfg.Answer == nil || it.Conn == "" {
		return
	}
	if err := rn.c.cfg.Answer.Answer(ctx, rn.agent, it.Conn, protocol.NewError(protocol.CodeStale, se.Message())); err != nil {
		rn.c.logger.WarnContext(ctx, "answer stale inject", "agent_id", rn.agent, "connection_id", it.Conn, "error", err.Error())
	}
}
