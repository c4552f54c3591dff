package agent

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
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

// clause adds the claim's parts to an update: the turn's id, first seq and wake key
// set, any cancel of an earlier turn removed, an inline wake moved off the queue; and
// the conditions that the wake is still queued there.
func (c *claim) clause(set, remove, cond *[]string, attrs map[string]string, vals map[string]types.AttributeValue) error {
	*set = append(*set, "#turn_id = :t", "#turn_seq = :seq", "#turn_key = :k")
	*remove = append(*remove, "#cancel_turn", "#cancel_reason")
	for _, a := range []string{attrTurnID, attrTurnSeq, attrTurnKey, attrCancelTurn, attrCancelReason} {
		attrs["#"+a] = a
	}
	vals[":t"], vals[":seq"], vals[":k"] = s(c.turnID), n(c.seq), s(c.wake.key())
	if c.rules != "" {
		*set = append(*set, "#turn_rules = :rules")
		attrs["#turn_rules"], vals[":rules"] = attrTurnRules, s(c.rules)
	}
	if c.wake.attr == "" || c.wake.attr == attrTurnWake {
		return nil
	}
	w, err := attributevalue.Marshal(c.wake)
	if err != nil {
		return fmt.Errorf("agent: encode waking inject: %w", err)
	}
	*set = append(*set, "#turn_wake = :w")
	*remove = append(*remove, "#inbox.#q")
	*cond = append(*cond, "attribute_exists(#inbox.#q)")
	attrs["#turn_wake"], attrs["#inbox"], attrs["#q"] = attrTurnWake, attrInbox, c.wake.ID
	vals[":w"] = w
	return nil
}

// setTurn records turnID as the agent's turn (claimed, open or ending). turnSeq is a
// lower bound of the turn's first seq. It returns the state after the write.
func (st *store) setTurn(ctx context.Context, agentID, me, turnID string, turnSeq int64) (state, error) {
	out, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #turn_id = :t, #turn_seq = :seq"),
		ConditionExpression:       aws.String("#owner = :me"),
		ExpressionAttributeNames:  names(attrOwner, attrTurnID, attrTurnSeq),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(me), ":t": s(turnID), ":seq": n(turnSeq)},
		ReturnValues:              types.ReturnValueAllNew,
	})
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
	var set, remove []string
	cond := []string{"#owner = :me"}
	attrs := names(attrOwner)
	vals := map[string]types.AttributeValue{":me": s(me)}
	if err := c.clause(&set, &remove, &cond, attrs, vals); err != nil {
		return state{}, err
	}
	out, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String(clauses{set: set, remove: remove}.String()),
		ConditionExpression:       aws.String(strings.Join(cond, " AND ")),
		ExpressionAttributeNames:  attrs,
		ExpressionAttributeValues: vals,
		ReturnValues:              types.ReturnValueAllNew,
	})
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
	out, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #cancel_turn = :t, #cancel_reason = :r"),
		ConditionExpression:       aws.String("#owner = :me AND #turn_id = :t"),
		ExpressionAttributeNames:  names(attrOwner, attrTurnID, attrCancelTurn, attrCancelReason),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(me), ":t": s(turnID), ":r": s(reason)},
		ReturnValues:              types.ReturnValueAllNew,
	})
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
	f := finishing(turnID, u)
	f.names["#owner"] = attrOwner
	f.vals[":me"] = s(me)
	out, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:                    aws.String(f.expr.String()),
		ConditionExpression:                 aws.String("#owner = :me AND " + f.cond),
		ExpressionAttributeNames:            f.names,
		ExpressionAttributeValues:           f.vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if item, ok := dynamoerr.CondFailedItem(err); ok {
		return foundMine(item, me) // already finished, or the lease lost
	}
	if err != nil {
		return state{}, fmt.Errorf("agent: finish turn %s of %s: %w", turnID, agentID, err)
	}
	return decodeState(out.Attributes)
}

// finish is the update that clears an ended turn and meters its usage, by its parts,
// conditional on the turn being the recorded one: finishTurn writes it alone, release
// folds it into its own write.
type finish struct {
	expr  clauses
	cond  string
	names map[string]string
	vals  map[string]types.AttributeValue
}

// finishing is the finish of the ended turn turnID with usage u.
func finishing(turnID string, u TurnUsage) finish {
	return finish{
		expr: clauses{
			remove: []string{"#turn_id", "#turn_seq", "#turn_key", "#turn_wake", "#cancel_turn", "#cancel_reason", "#turn_rules"},
			add: []string{"#usage_turns :one", "#usage_input_tokens :in", "#usage_output_tokens :out", "#usage_model_calls :mc",
				"#usage_tool_calls :tc", "#usage_wall_ms :wall", "#quota_turns :one", "#quota_tokens :tok"},
		},
		cond: "#turn_id = :t",
		names: names(attrTurnID, attrTurnSeq, attrTurnKey, attrTurnWake, attrCancelTurn, attrCancelReason, attrTurnRules,
			attrUsageTurns, attrUsageInputTokens, attrUsageOutputTokens, attrUsageModelCalls, attrUsageToolCalls, attrUsageWallMS,
			attrQuotaTurns, attrQuotaTokens),
		vals: map[string]types.AttributeValue{
			":t": s(turnID), ":one": n(1), ":in": n(u.InputTokens), ":out": n(u.OutputTokens),
			":tok": n(u.InputTokens + u.OutputTokens),
			":mc":  n(u.ModelCalls), ":tc": n(u.ToolCalls), ":wall": n(u.WallMS),
		},
	}
}

// clearTurn forgets a claimed turn that never started. It returns the state after the
// write, or as found when that turn was no longer recorded (no error), and
// errLeaseLost when the lease is not mine.
func (st *store) clearTurn(ctx context.Context, agentID, me, turnID string) (state, error) {
	out, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:                    aws.String("REMOVE #turn_id, #turn_seq, #turn_key, #turn_wake, #cancel_turn, #cancel_reason, #turn_rules"),
		ConditionExpression:                 aws.String("#owner = :me AND #turn_id = :t"),
		ExpressionAttributeNames:            names(attrOwner, attrTurnID, attrTurnSeq, attrTurnKey, attrTurnWake, attrCancelTurn, attrCancelReason, attrTurnRules),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":me": s(me), ":t": s(turnID)},
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
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
	res, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("ADD #usage_input_tokens :in, #usage_output_tokens :out, #usage_model_calls :one, #quota_tokens :tok"),
		ExpressionAttributeNames:  names(attrUsageInputTokens, attrUsageOutputTokens, attrUsageModelCalls, attrQuotaTokens),
		ExpressionAttributeValues: map[string]types.AttributeValue{":in": n(in), ":out": n(out), ":one": n(1), ":tok": n(in + out)},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err != nil {
		return state{}, fmt.Errorf("agent: add usage of %s: %w", agentID, err)
	}
	return decodeState(res.Attributes)
}

// bump counts a stimulus, so a runner about to release its lease goes round again.
func (st *store) bump(ctx context.Context, agentID string) error {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("ADD #pending :one"),
		ExpressionAttributeNames:  names(attrPending),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1)},
	})
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
	cond := "attribute_exists(#turn_id) AND (attribute_not_exists(#turn_key) OR #turn_key <= :k) " +
		"AND (attribute_not_exists(#cancel_at) OR #cancel_at <= :k)"
	vals := map[string]types.AttributeValue{":r": s(reason), ":k": s(key), ":one": n(1)}
	if ended != "" {
		cond += " AND #turn_id <> :ended"
		vals[":ended"] = s(ended)
	}
	out, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:                    aws.String("SET #cancel_turn = #turn_id, #cancel_reason = :r, #cancel_at = :k, #cancel_at_reason = :r ADD #pending :one"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names(attrCancelTurn, attrTurnID, attrTurnKey, attrCancelReason, attrCancelAt, attrCancelAtReason, attrPending),
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
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
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #cancel_at = :k, #cancel_at_reason = :r"),
		ConditionExpression:       aws.String("attribute_not_exists(#cancel_at) OR #cancel_at <= :k"),
		ExpressionAttributeNames:  names(attrCancelAt, attrCancelAtReason),
		ExpressionAttributeValues: map[string]types.AttributeValue{":r": s(reason), ":k": s(key)},
	})
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
	cond := "#cancel_at = :k AND attribute_not_exists(#turn_id)"
	vals := map[string]types.AttributeValue{":k": s(key)}
	if ended != "" {
		cond = "#cancel_at = :k AND (attribute_not_exists(#turn_id) OR #turn_id = :ended)"
		vals[":ended"] = s(ended)
	}
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:                    aws.String("REMOVE #cancel_at, #cancel_at_reason"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names(attrCancelAt, attrCancelAtReason, attrTurnID),
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
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
	_, err = st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression: aws.String("SET #policy_at = :k, #policy_seq = :s ADD #pending :one"),
		ConditionExpression: aws.String("(attribute_not_exists(#policy_at) OR #policy_at <= :k) AND " +
			"(attribute_not_exists(#policy_seq) OR #policy_seq <= :s)"),
		ExpressionAttributeNames:            names(attrPolicyAt, attrPolicySeq, attrPending),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":k": s(key), ":s": n(seq), ":one": n(1)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
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
