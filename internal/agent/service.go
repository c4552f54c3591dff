package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
)

// Service implements socket.Controller for the message function: it records each stimulus
// durably and starts the runner function asynchronously. It is safe for concurrent
// use, and any number of instances in any number of processes may serve one agent.
type Service struct {
	c *core
}

// New returns a Service. It returns an error if a required Config field is missing.
func New(cfg Config) (*Service, error) {
	c, err := newCore(cfg)
	if err != nil {
		return nil, err
	}
	return &Service{c: c}, nil
}

// Inject queues text in the agent's inbox, or refuses text over MaxTextBytes
// JSON-encoded with a *TextTooLongError and writes nothing, or refuses an inject past
// the inbox's bound (MaxInboxItems, MaxInboxBytes) with an *InboxFullError and queues
// nothing; with wake it starts the runner, which starts a turn with the text as its
// user/message if the agent is idle, or drains it into the running or open turn's
// next step as context/injected. The inbox is keyed by the frame's
// protocol.Stamp (from ctx), so steers drain in the order the client sent them
// whatever order their handlers ran in.
//
// A text of at most InlineTextBytes is queued on the agent's state item, and that one
// write also counts the stimulus: a runner holding the lease must not let go without
// reading the inbox again. A longer text is an inbox item of its own; the stimulus is
// then counted only when a runner holds the agent's lease, since a runner that takes
// the lease after the inbox write reads the inbox anyway — a consistent read instead
// of a write. Cost: 1 write unit for a short text; for a longer one the inbox write
// (1 write unit per KB), 1 read unit, 1 more write unit while a runner works. With
// wake, one asynchronous invoke.
func (s *Service) Inject(ctx context.Context, agentID, text string, wake bool) error {
	return s.InjectFrom(ctx, agentID, text, wake, "")
}

// InjectFrom is Inject for a client frame from connection connID: the inbox write is
// conditional on the agent's state item naming connID as its owner (OwnerClaim, written
// with the ownership record by each connect). Once that connection's access has ended
// — superseded by another connect, or the session reset or deleted — the frame queues
// nothing and InjectFrom returns ErrNotOwner (docs/security.md, "Parked frames").
// Cost: Inject's for a short text (the condition is on the write it makes anyway); a
// longer one's put becomes a transaction with a check of the state item (twice the
// put's units, plus 2).
func (s *Service) InjectFrom(ctx context.Context, agentID, text string, wake bool, connID string) error {
	if n := TextBytes(text); n > MaxTextBytes {
		return &TextTooLongError{Bytes: n}
	}
	now := s.c.now()
	st := s.c.stamp(ctx)
	it := inboxItem{ID: newInboxID(st.Key()), Text: text, Wake: wake, At: now.UTC().Format(sessionlog.TimeFormat), ClientID: control.FrameFrom(ctx).ClientID}
	if expect, ok := control.ExpectOf(ctx); ok {
		// Checked now, to answer at once, and again by the runner as it drains the
		// inject (staleInject): a turn may start or end in between.
		if _, err := s.c.afterExpect(ctx, agentID, protocol.TypeInject, expect, isTurnEdge); err != nil {
			return err
		}
		it.ExpectSeq, it.Conn = &expect, connID
	}
	s.c.pause(PauseQueueing, agentID)
	counted, err := s.c.store.putInbox(fromConn(ctx, connID), agentID, it)
	if errors.Is(err, errDuplicate) {
		return nil // applied before (client_id): nothing queued, no error
	}
	if err != nil {
		return err
	}
	if !counted {
		// Read after the inbox write: a holder seen here may already have read the
		// inbox (the count makes its release fail); one not seen took the lease after
		// the write.
		cur, err := s.c.store.getState(ctx, agentID, attrOwner)
		if err != nil {
			return err
		}
		if cur.Runner != "" {
			if err := s.c.store.bump(ctx, agentID); err != nil {
				return err
			}
		}
	}
	s.c.pause(PauseQueued, agentID)
	if !wake {
		return nil
	}
	return s.c.invoke(ctx, agentID)
}

// InFlightBound is how long after a frame's receipt its handler may still be about
// to record it. A cancel from a client that does not number its frames, finding no
// turn running or owed, waits until this long after its own receipt for a waking
// inject received before it, and only then answers not_running. A client that
// numbers its frames (protocol.FieldOrder) never waits: the turnstile has already
// seen every earlier frame take effect.
const InFlightBound = 2 * time.Second

// MaxWaitingCancels bounds the cancels of one agent waiting out InFlightBound at once
// (a count on the state item: 1 write unit to enter, 1 to leave; a count left by a
// handler that died waiting lapses with its deadline). A cancel that
// finds them all taken does not wait: it cancels a turn running or owed, else answers
// not_running at once. So un-numbered cancels hold at most this many handlers per
// agent, for at most InFlightBound; the waiting ones already cover any wake still in
// flight before them.
const MaxWaitingCancels = 2

// Cancel marks the agent's turn cancelled with reason (cut to MaxReasonBytes) and
// starts the runner, which stops the turn at its next step boundary — or at once, if
// the turn is parked on approvals.
//
// Order: the cancel applies to the turn that a waking inject sent before it (by the
// frames' protocol.Stamp, from ctx) starts or steers, even when that inject's handler
// runs after this one: with no turn running, a queued wake sent earlier makes the
// cancel owed, and the runner cancels the turn that wake starts. It returns
// ErrNotRunning only if no such turn is running or owed — after waiting up to
// InFlightBound past the frame's receipt for one still in flight (see there), when
// fewer than MaxWaitingCancels of the agent's cancels wait already. A turn
// whose turn/end is logged is not running, though the state item records it until its
// runner's release: a client that saw the turn end and then sent cancel is answered
// ErrNotRunning, not left without an answer. Cost: 1 write, a read of the log's
// newest events (turnEnded) and one asynchronous invoke with a turn running;
// otherwise 1–2 writes, an inbox query per look, and 1 write to withdraw.
func (s *Service) Cancel(ctx context.Context, agentID, reason string) (err error) {
	done, dup, err := s.c.once(ctx, agentID)
	if err != nil || dup {
		return err
	}
	defer func() { done(err) }()
	reason, _ = boundText(reason, MaxReasonBytes)
	if expect, ok := control.ExpectOf(ctx); ok {
		return s.cancelExpecting(ctx, agentID, reason, expect)
	}
	st := s.c.stamp(ctx)
	key := st.Key()
	deadline := time.UnixMilli(st.At).Add(InFlightBound)
	if st.InOrder {
		deadline = time.Time{}
	}
	owed, waiting := false, false
	ended := "" // a turn the state item records whose turn/end is logged
	for look := 0; ; look++ {
		out, cur, err := s.c.store.cancelRunning(ctx, agentID, reason, key, ended)
		if err != nil {
			return err
		}
		switch out {
		case cancelledRunning:
			// The state item records a turn until its runner's release, a little after
			// the turn/end — which a client may have seen before it sent this cancel.
			// That turn is not running, unless this cancel is what ended it.
			te, done, err := s.c.turnEnded(ctx, agentID, cur)
			if err != nil {
				return err
			}
			if done && (te.Status != StatusCancelled || cur.CancelTurn == cur.TurnID) {
				ended = cur.TurnID
				continue // no turn running: as below
			}
			s.c.pause(PauseCancelRecorded, agentID)
			return s.c.invoke(ctx, agentID)
		case cancelNewerTurn:
			return ErrNotRunning
		}
		if !owed {
			// Recorded before looking at the inbox: a runner that claims a turn from now
			// on sees it, and one that claimed before shows up in cancelRunning above.
			if err := s.c.store.owe(ctx, agentID, reason, key); err != nil {
				return err
			}
			owed = true
			continue
		}
		queued, err := s.c.store.wakeBefore(ctx, agentID, key)
		if err != nil {
			return err
		}
		if queued {
			return nil // the runner that wake started cancels its turn at the start
		}
		if !waiting && s.c.now().Before(deadline) {
			entered, err := s.c.store.enterCancelWait(ctx, agentID, s.c.now(), deadline)
			if err != nil {
				return err
			}
			if entered {
				waiting = true
				defer s.c.store.leaveCancelWait(context.WithoutCancel(ctx), agentID)
			} else {
				deadline = time.Time{} // all waits taken: no wait for this one
			}
		}
		if !s.c.now().Before(deadline) {
			gone, err := s.c.store.forgo(ctx, agentID, key, ended)
			if err != nil {
				return err
			}
			if gone {
				return ErrNotRunning
			}
			continue // a turn was recorded meanwhile: cancel it
		}
		if err := sleep(ctx, min(10*time.Millisecond<<min(look, 4), time.Until(deadline)+time.Millisecond)); err != nil {
			return err
		}
	}
}

// endedTail is how many of the log's newest events turnEnded reads for a recorded
// turn's turn/end. While the state item records an ended turn, only its runner's
// release is still to come, and only a set_policy appends meanwhile.
const endedTail = 16

// turnEnded returns the turn/end of the turn the state item st records, if it is among
// the log's newest endedTail events: the turn is over, its runner yet to clear it from
// the state item. Cost: the tip (1 read unit) and a strongly consistent read of the
// newest events from the turn's first seq on, at most endedTail (usually 1 read unit).
func (c *core) turnEnded(ctx context.Context, agentID string, st state) (turnEnd, bool, error) {
	if st.TurnID == "" {
		return turnEnd{}, false, nil
	}
	tip, err := c.log.Tip(ctx, agentID)
	if err != nil {
		return turnEnd{}, false, fmt.Errorf("agent: read tip of %s: %w", agentID, err)
	}
	evs, err := c.log.Read(ctx, agentID, max(st.TurnSeq, tip-endedTail+1), endedTail)
	if err != nil {
		return turnEnd{}, false, fmt.Errorf("agent: read log of %s: %w", agentID, err)
	}
	te, ok := turnEndOf(evs, st.TurnID)
	return te, ok, nil
}

// Approve records the verdict approved on callID and resumes the turn. It returns
// ErrUnsupported when approvals are not mounted and ErrStaleCall, appending nothing,
// when callID has no standing request in the open turn.
func (s *Service) Approve(ctx context.Context, agentID, callID string) error {
	return s.verdict(ctx, agentID, callID, VerdictApproved, "")
}

// Deny records the verdict denied, with reason, on callID and resumes the turn. Its
// errors are Approve's.
func (s *Service) Deny(ctx context.Context, agentID, callID, reason string) error {
	return s.verdict(ctx, agentID, callID, VerdictDenied, reason)
}

func (s *Service) verdict(ctx context.Context, agentID, callID, verdictText, reason string) (err error) {
	if !s.c.cfg.Approvals {
		return ErrUnsupported
	}
	done, dup, err := s.c.once(ctx, agentID)
	if err != nil || dup {
		return err
	}
	defer func() { done(err) }()
	st, err := s.c.store.getState(ctx, agentID, attrTurnID, attrTurnSeq)
	if err != nil {
		return err
	}
	if st.TurnID == "" {
		if expect, ok := control.ExpectOf(ctx); ok {
			if _, err := s.c.afterExpect(ctx, agentID, verdictFrame(verdictText), expect, func(sessionlog.Event) bool { return false }); err != nil {
				return err // above the tip: bad_frame before stale_call
			}
		}
		return ErrStaleCall
	}
	w := newWindow(s.c.log, agentID, st.TurnSeq)
	if err := w.refresh(ctx); err != nil {
		return err
	}
	if expect, ok := control.ExpectOf(ctx); ok {
		if err := verdictExpecting(w, verdictFrame(verdictText), callID, expect); err != nil {
			return err
		}
	}
	if err := s.c.resolveVerdict(ctx, agentID, w, callID, verdictText, reason); err != nil {
		return err
	}
	if err := s.c.store.bump(ctx, agentID); err != nil {
		return err
	}
	return s.c.invoke(ctx, agentID)
}

// SetModel points role (RoleMain, RoleTitler or RoleCompactor) at spec, stored on the agent's state
// item; the runner reads it at every step boundary. It returns ErrBadSpec for an
// unknown role or a spec the agent's profile cannot run, wrapping a
// *protocol.BadFrameError whose message says which was wrong and why (for example
// `set_model: spec "openai/gpt-4o-mini": no provider "openai" is configured
// (configured: bedrock, scripted)`). A set_model sent before the one in force (by the
// frames' protocol.Stamp, from ctx) changes nothing, so the last one sent wins whatever
// order the handlers ran in. Cost: 1 read, 1 write.
func (s *Service) SetModel(ctx context.Context, agentID, role, spec string) (err error) {
	done, dup, err := s.c.once(ctx, agentID)
	if err != nil || dup {
		return err
	}
	defer func() { done(err) }()
	var attr string
	switch role {
	case RoleMain:
		attr = attrModelMain
	case RoleTitler:
		attr = attrModelTitler
	case RoleCompactor:
		attr = attrModelCompactor
	default:
		return badSpec("set_model: role %q: unknown role (main, titler, compactor)", role)
	}
	st, err := s.c.store.getState(ctx, agentID, attrProfile)
	if err != nil {
		return err
	}
	prof, err := s.c.agentProfile(st.Profile)
	if err != nil {
		return badSpec("set_model: spec %q: %v", spec, err)
	}
	models, err := s.c.modelsOf(prof)
	if err != nil {
		return badSpec("set_model: spec %q: the agent's providers cannot be set up: %v", spec, err)
	}
	if _, err := models.Resolve(spec); err != nil {
		if errors.Is(err, model.ErrUnknownProvider) {
			provider, _, _ := strings.Cut(spec, "/")
			return badSpec("set_model: spec %q: no provider %q is configured (configured: %s)", spec, provider, strings.Join(models.Names(), ", "))
		}
		return badSpec("set_model: spec %q: %s", spec, strings.TrimPrefix(err.Error(), model.ErrBadSpec.Error()+": "))
	}
	if !s.c.allowsModel(prof, role, spec) {
		return badSpec("set_model: spec %q: not among the models this agent's profile allows (allowed_models)", spec)
	}
	_, err = s.c.store.setLatest(ctx, agentID, attr, attr+"_at", spec, s.c.stamp(ctx).Key())
	return err
}

// badSpec is ErrBadSpec with the client-facing message.
func badSpec(format string, args ...any) error {
	return fmt.Errorf("%w: %w", ErrBadSpec, &protocol.BadFrameError{FrameType: "set_model", Message: fmt.Sprintf(format, args...)})
}

// Usage returns the agent's usage counters (zero for an agent that never ran), with the
// quota counters of the current UTC day and month.
func (s *Service) Usage(ctx context.Context, agentID string) (Counters, error) {
	return s.c.store.usage(ctx, agentID)
}

// Usage reads agentID's usage counters from the agents table without a Service — for
// the command line, which has only a table and a client.
func Usage(ctx context.Context, db DB, agentsTable, agentID string) (Counters, error) {
	return (&store{db: db, table: agentsTable}).usage(ctx, agentID)
}

func (s *store) usage(ctx context.Context, agentID string) (Counters, error) {
	st, err := s.getState(ctx, agentID, attrUsageTurns, attrUsageInputTokens, attrUsageOutputTokens,
		attrUsageModelCalls, attrUsageToolCalls, attrUsageWallMS, attrQuotaDay, attrQuotaTurns, attrQuotaMonth, attrQuotaTokens)
	if err != nil {
		return Counters{}, err
	}
	// Counters of a past period are not reset until the agent's next turn start: they
	// count nothing against today's or this month's quota. (An agent that never started
	// a turn has no period: all zero.)
	now := time.Now().UTC()
	if day := now.Format(time.DateOnly); st.QuotaDay != "" && st.QuotaDay != day {
		st.QuotaDay, st.QuotaTurns = day, 0
	}
	if month := now.Format("2006-01"); st.QuotaMonth != "" && st.QuotaMonth != month {
		st.QuotaMonth, st.QuotaTokens = month, 0
	}
	return st.Counters, nil
}

// SetProfile stores a per-agent profile override, merged over the deployment's
// default profile from the agent's next runner invocation on. It returns an error
// wrapping tools.ErrBadProfile (or the kind's error) if the merged profile does not
// build.
func (s *Service) SetProfile(ctx context.Context, agentID string, override tools.Profile) error {
	if _, err := s.c.tools.Build(s.c.profile.Merge(override)); err != nil {
		return err
	}
	raw, err := json.Marshal(override)
	if err != nil {
		return fmt.Errorf("%w: %v", tools.ErrBadProfile, err)
	}
	return s.c.store.setAttr(ctx, agentID, attrProfile, string(raw))
}
