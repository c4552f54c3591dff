package agent

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
)

// claim is a new turn to record on the state item: its id, a lower bound of its
// first seq, and the waking inject that starts it. An inline wake moves from the
// queue to turn_wake in the same write.
type claim struct {
	turnID string
	seq    int64
	wake   inboxItem
	// rules is the profile's rules in force at the claim, JSON (pinnedRules): the turn
	// decides its tool calls by them however the profile changes until it ends.
	rules string
}

// apply adds the claim's parts to u: the turn's id, first seq and wake key set, any
// cancel of an earlier turn removed, an inline wake moved off the queue; and the
// condition that the wake is still queued there.
func (c *claim) apply(u *update) error {
	u.Set(attrTurnID, ":t").Set(attrTurnSeq, ":seq").Set(attrTurnKey, ":k").Remove(attrCancelTurn, attrCancelReason)
	u.Val(":t", s(c.turnID)).Val(":seq", n(c.seq)).Val(":k", s(c.wake.key()))
	if c.rules != "" {
		u.Set(attrTurnRules, ":rules").Val(":rules", s(c.rules))
	}
	if c.wake.attr == "" || c.wake.attr == attrTurnWake {
		return nil
	}
	w, err := attributevalue.Marshal(c.wake)
	if err != nil {
		return fmt.Errorf("agent: encode waking inject: %w", err)
	}
	u.Set(attrTurnWake, ":w").Val(":w", w).Remove(attrInbox+".#q").If("attribute_exists(#inbox.#q)").Key("#q", c.wake.ID)
	return nil
}

// setTurn records turnID as the agent's turn (claimed, open or ending). turnSeq is a
// lower bound of the turn's first seq. It returns the state after the write.
func (st *store) setTurn(ctx context.Context, agentID, me, turnID string, turnSeq int64) (state, error) {
	u := newUpdate().Set(attrTurnID, ":t").Set(attrTurnSeq, ":seq").If("#owner = :me").
		Val(":me", s(me)).Val(":t", s(turnID)).Val(":seq", n(turnSeq))
	in := u.input()
	in.ReturnValues = types.ReturnValueAllNew
	out, err := st.update(ctx, agentID, in)
	if dynamoerr.CondFailed(err) {
		return state{}, errLeaseLost
	}
	if err != nil {
		return state{}, fmt.Errorf("agent: set turn of %s: %w", agentID, err)
	}
	return decodeState(out.Attributes)
}

// claimTurn is setTurn for a new turn c, started by a waking inject: any cancel
// recorded for an earlier turn goes, and an inline wake moves off the queue. It
// returns the state after the write, whose CancelAt says whether a cancel sent after
// the wake is owed.
func (st *store) claimTurn(ctx context.Context, agentID, me string, c claim) (state, error) {
	u := newUpdate().If("#owner = :me").Val(":me", s(me))
	if err := c.apply(u); err != nil {
		return state{}, err
	}
	in := u.input()
	in.ReturnValues = types.ReturnValueAllNew
	out, err := st.update(ctx, agentID, in)
	if dynamoerr.CondFailed(err) {
		return state{}, errLeaseLost
	}
	if err != nil {
		return state{}, fmt.Errorf("agent: claim turn of %s: %w", agentID, err)
	}
	return decodeState(out.Attributes)
}

// cancelClaimed marks the turn just claimed cancelled: a cancel sent after its wake was
// recorded before the claim (CancelAt). It returns the state after the write.
func (st *store) cancelClaimed(ctx context.Context, agentID, me, turnID, reason string) (state, error) {
	in := newUpdate().Set(attrCancelTurn, ":t").Set(attrCancelReason, ":r").If("#owner = :me").If("#turn_id = :t").
		Val(":me", s(me)).Val(":t", s(turnID)).Val(":r", s(reason)).input()
	in.ReturnValues = types.ReturnValueAllNew
	out, err := st.update(ctx, agentID, in)
	if dynamoerr.CondFailed(err) {
		return state{}, errLeaseLost
	}
	if err != nil {
		return state{}, fmt.Errorf("agent: cancel claimed turn of %s: %w", agentID, err)
	}
	return decodeState(out.Attributes)
}

// finishTurn clears the ended turn turnID from the state item and adds its usage to
// the counters, in one write conditional on the turn still being recorded — so a
// turn is metered exactly once however often a runner dies around its end. A turn
// already cleared is no error. It returns the state after the write, or as found when
// the turn was already cleared.
func (st *store) finishTurn(ctx context.Context, agentID, me, turnID string, u TurnUsage) (state, error) {
	up := newUpdate().If("#owner = :me").Val(":me", s(me))
	finishing(up, turnID, u)
	in := up.input()
	in.ReturnValues = types.ReturnValueAllNew
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err := st.update(ctx, agentID, in)
	if item, ok := dynamoerr.CondFailedItem(err); ok {
		return foundMine(item, me) // already finished, or the lease lost
	}
	if err != nil {
		return state{}, fmt.Errorf("agent: finish turn %s of %s: %w", turnID, agentID, err)
	}
	return decodeState(out.Attributes)
}

// finishing adds to u the parts that clear the ended turn turnID and meter its usage
// u, conditional on the turn being the recorded one: finishTurn writes them alone,
// release folds them into its own write.
func finishing(up *update, turnID string, u TurnUsage) {
	up.Remove(turnAttrs...)
	up.Add(attrUsageTurns, ":one").Add(attrUsageInputTokens, ":in").Add(attrUsageOutputTokens, ":out").Add(attrUsageModelCalls, ":mc").
		Add(attrUsageToolCalls, ":tc").Add(attrUsageWallMS, ":wall").Add(attrQuotaTurns, ":one").Add(attrQuotaTokens, ":tok")
	up.If("#turn_id = :t")
	up.Val(":t", s(turnID)).Val(":one", n(1)).Val(":in", n(u.InputTokens)).Val(":out", n(u.OutputTokens)).
		Val(":tok", n(u.InputTokens+u.OutputTokens)).Val(":mc", n(u.ModelCalls)).Val(":tc", n(u.ToolCalls)).Val(":wall", n(u.WallMS))
}

// turnAttrs are the attributes that go with the recorded turn.
var turnAttrs = []string{attrTurnID, attrTurnSeq, attrTurnKey, attrTurnWake, attrCancelTurn, attrCancelReason, attrTurnRules}

// clearTurn forgets a claimed turn that never started. It returns the state after the
// write, or as found when that turn was no longer recorded (no error), and
// errLeaseLost when the lease is not mine.
func (st *store) clearTurn(ctx context.Context, agentID, me, turnID string) (state, error) {
	in := newUpdate().Remove(turnAttrs...).If("#owner = :me").If("#turn_id = :t").Val(":me", s(me)).Val(":t", s(turnID)).input()
	in.ReturnValues = types.ReturnValueAllNew
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err := st.update(ctx, agentID, in)
	if item, ok := dynamoerr.CondFailedItem(err); ok {
		return foundMine(item, me) // no longer recorded, or the lease lost
	}
	if err != nil {
		return state{}, fmt.Errorf("agent: clear turn of %s: %w", agentID, err)
	}
	return decodeState(out.Attributes)
}

// addUsage adds usage outside a turn (the titler's model call) to the counters. It
// returns the state after the write.
func (st *store) addUsage(ctx context.Context, agentID string, in, out int64) (state, error) {
	u := newUpdate().Add(attrUsageInputTokens, ":in").Add(attrUsageOutputTokens, ":out").Add(attrUsageModelCalls, ":one").Add(attrQuotaTokens, ":tok").
		Val(":in", n(in)).Val(":out", n(out)).Val(":one", n(1)).Val(":tok", n(in+out)).input()
	u.ReturnValues = types.ReturnValueAllNew
	res, err := st.update(ctx, agentID, u)
	if err != nil {
		return state{}, fmt.Errorf("agent: add usage of %s: %w", agentID, err)
	}
	return decodeState(res.Attributes)
}

// bump counts a stimulus, so a runner about to release its lease goes round again.
func (st *store) bump(ctx context.Context, agentID string) error {
	_, err := st.update(ctx, agentID, newUpdate().Add(attrPending, ":one").Val(":one", n(1)).input())
	if err != nil {
		return fmt.Errorf("agent: record stimulus for %s: %w", agentID, err)
	}
	return nil
}

// cancelOutcome is what cancelRunning found.
type cancelOutcome int

const (
	cancelledRunning cancelOutcome = iota // the recorded turn is marked cancelled
	cancelNoTurn                          // no turn is recorded
	cancelNewerTurn                       // the recorded turn's wake was sent after the cancel
)

// cancelRunning marks the agent's recorded turn cancelled with reason and counts the
// stimulus, if the turn's waking inject was sent before the cancel (key). It also
// raises CancelAt to key, so a turn that a wake sent before the cancel starts later
// (its handler ran late) is cancelled too. A later cancel already recorded makes this
// one a no-op that reports cancelledRunning. A recorded turn with id ended (not "")
// is one whose turn/end is logged: it counts as no turn (cancelNoTurn). It returns
// the state item as found, before the write. Cost: 1 write unit.
func (st *store) cancelRunning(ctx context.Context, agentID, reason, key, ended string) (cancelOutcome, state, error) {
	u := newUpdate().Set(attrCancelTurn, "#turn_id").Set(attrCancelReason, ":r").Set(attrCancelAt, ":k").Set(attrCancelAtReason, ":r").Add(attrPending, ":one").
		If("attribute_exists(#turn_id)").If("(attribute_not_exists(#turn_key) OR #turn_key <= :k)").
		If("(attribute_not_exists(#cancel_at) OR #cancel_at <= :k)").
		Val(":r", s(reason)).Val(":k", s(key)).Val(":one", n(1))
	if ended != "" {
		u.If("#turn_id <> :ended").Val(":ended", s(ended))
	}
	in := u.input()
	in.ReturnValues = types.ReturnValueAllOld
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err := st.update(ctx, agentID, in)
	if item, ok := dynamoerr.CondFailedItem(err); ok {
		cur, derr := decodeState(item)
		switch {
		case derr != nil:
			return 0, state{}, derr
		case cur.TurnID == "" || cur.TurnID == ended:
			return cancelNoTurn, cur, nil
		case cur.TurnKey != "" && cur.TurnKey > key:
			return cancelNewerTurn, cur, nil
		}
		return cancelledRunning, cur, nil // a later cancel is recorded: it covers this one
	}
	if err != nil {
		return 0, state{}, fmt.Errorf("agent: cancel turn of %s: %w", agentID, err)
	}
	cur, err := decodeState(out.Attributes)
	return cancelledRunning, cur, err
}

// owe records a cancel that found no turn running: CancelAt rises to key, so the turn
// a wake sent before the cancel starts is cancelled at its start. Cost: 1 write unit.
func (st *store) owe(ctx context.Context, agentID, reason, key string) error {
	_, err := st.update(ctx, agentID, newUpdate().Set(attrCancelAt, ":k").Set(attrCancelAtReason, ":r").
		If("attribute_not_exists(#cancel_at) OR #cancel_at <= :k").Val(":r", s(reason)).Val(":k", s(key)).input())
	if dynamoerr.CondFailed(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent: record cancel of %s: %w", agentID, err)
	}
	return nil
}

// forgo withdraws the owed cancel recorded with key, if it is still the latest and no
// turn has been recorded since — but for ended (not ""), a recorded turn whose turn/end
// is logged. It reports false when a turn was recorded meanwhile (the cancel may apply
// to it after all).
func (st *store) forgo(ctx context.Context, agentID, key, ended string) (bool, error) {
	u := newUpdate().Remove(attrCancelAt, attrCancelAtReason).If("#cancel_at = :k").Val(":k", s(key))
	if ended != "" {
		u.If("(attribute_not_exists(#turn_id) OR #turn_id = :ended)").Val(":ended", s(ended))
	} else {
		u.If("attribute_not_exists(#turn_id)")
	}
	in := u.input()
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	_, err := st.update(ctx, agentID, in)
	if item, ok := dynamoerr.CondFailedItem(err); ok {
		cur, derr := decodeState(item)
		if derr != nil {
			return false, derr
		}
		return cur.TurnID == "" || cur.TurnID == ended, nil
	}
	if err != nil {
		return false, fmt.Errorf("agent: withdraw cancel of %s: %w", agentID, err)
	}
	return true, nil
}

// claimPolicy records the policy/updated at seq, appended for the set_policy with
// stamp key, as the newest claimed and counts the stimulus — if no claim is newer by
// key or later by seq. Otherwise it writes nothing and returns the state holding the
// newer claim (claimed false). Cost: 1 write unit.
func (st *store) claimPolicy(ctx context.Context, agentID, key string, seq int64) (old state, claimed bool, err error) {
	in := newUpdate().Set(attrPolicyAt, ":k").Set(attrPolicySeq, ":s").Add(attrPending, ":one").
		If("(attribute_not_exists(#policy_at) OR #policy_at <= :k)").If("(attribute_not_exists(#policy_seq) OR #policy_seq <= :s)").
		Val(":k", s(key)).Val(":s", n(seq)).Val(":one", n(1)).input()
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	_, err = st.update(ctx, agentID, in)
	if item, ok := dynamoerr.CondFailedItem(err); ok {
		old, err := decodeState(item)
		return old, false, err
	}
	if err != nil {
		return state{}, false, fmt.Errorf("agent: claim policy of %s at seq %d: %w", agentID, seq, err)
	}
	return state{}, true, nil
}

// foundMine is the state item a write whose turn condition failed found (ALL_OLD):
// the caller's to adopt while me still holds the lease, errLeaseLost otherwise.
func foundMine(item map[string]types.AttributeValue, me string) (state, error) {
	cur, err := decodeState(item)
	if err != nil {
		return state{}, err
	}
	if cur.Runner != me {
		return state{}, errLeaseLost
	}
	return cur, nil
}
