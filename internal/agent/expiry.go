package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/terret/terret-ws/internal/sessionlog"
)

// Approvals that expire (docs/agents.md, "Approvals that expire").
//
// A tool entry's approval.expires_in gives each approval request for its tools a
// deadline, written in the request itself (approval/requested's expires_at). Before
// the runner logs the request it arms a Timer for that moment; when the timer fires,
// the runner function is invoked with the request's call id (RunnerEvent.Expire), and
// it resolves the request as denied, reason "expired", with the verdict's own
// compare-and-append (resolveVerdict) — so an expiry racing a client's verdict logs
// exactly once, and the loser (the client's frame) answers stale_call. The turn then
// goes on as after a denial. Nothing polls, and no client need be connected.

// ReasonExpired is the reason of the verdict an expired approval request gets.
const ReasonExpired = "expired"

// Timer fires, once, at a moment: it invokes the runner function with
// RunnerEvent{AgentID: agentID, Expire: callID} at or after at, even across a restart
// of the process that armed it (the records are durable). Arming the same agent and
// call again replaces the earlier one. The local one is package timer's (terret dev);
// on AWS an EventBridge Scheduler one-time schedule. A scheduling engine may replace
// either: this is all the runtime asks of it.
type Timer interface {
	Arm(ctx context.Context, agentID, callID string, at time.Time) error
}

// armExpiry arms the timer of an approval request about to be logged for callID,
// expiring after d; it returns the request's expires_at ("" when d is 0). Armed before
// the request is logged: a runner that dies in between leaves a timer that finds no
// request (a no-op), and the retry arms again.
func (rn *activeRun) armExpiry(ctx context.Context, callID string, d time.Duration) (string, error) {
	if d <= 0 {
		return "", nil
	}
	if rn.c.cfg.Timer == nil {
		rn.c.logger.WarnContext(ctx, "approval expiry without a timer: the request waits for a verdict", "agent_id", rn.agent, "call_id", callID)
		return "", nil
	}
	at := rn.c.now().Add(d).UTC()
	if err := rn.c.cfg.Timer.Arm(ctx, rn.agent, callID, at); err != nil {
		return "", fmt.Errorf("agent: arm expiry of %s for %s: %w", callID, rn.agent, err)
	}
	return at.Format(sessionlog.TimeFormat), nil
}

// Expire resolves callID's approval request as denied, reason expired, if it still
// stands and its expires_at has passed; a verdict already logged makes it a no-op. A
// timer that fires early (a clock ahead of this one) is armed again for the request's
// own moment. It reports whether it logged the verdict. Cost: the state item's turn (1
// read), the open turn's events, and the verdict's append.
func (r *Runner) Expire(ctx context.Context, agentID, callID string) (bool, error) {
	c := r.c
	st, err := c.store.getState(ctx, agentID, attrTurnID, attrTurnSeq)
	if err != nil || st.TurnID == "" {
		return false, err
	}
	w := newWindow(c.log, agentID, st.TurnSeq)
	if err := w.refresh(ctx); err != nil {
		return false, err
	}
	if w.turn == nil || !w.turn.stands(callID) {
		return false, nil
	}
	at, ok := w.turn.expiresAt[callID]
	if !ok {
		return false, nil // a request that never expires
	}
	if now := c.now(); now.Before(at) {
		if c.cfg.Timer == nil {
			return false, nil
		}
		return false, c.cfg.Timer.Arm(ctx, agentID, callID, at)
	}
	err = c.resolveVerdict(ctx, agentID, w, callID, VerdictDenied, ReasonExpired)
	if errors.Is(err, ErrStaleCall) {
		return false, nil // a verdict won the race
	}
	if err != nil {
		return false, err
	}
	c.logger.InfoContext(ctx, "approval request expired", "agent_id", agentID, "call_id", callID)
	return true, c.store.bump(ctx, agentID)
}
