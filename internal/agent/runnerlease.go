package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/lease"
)

// errLeaseLost means another runner invocation took the agent's lease over; this one
// must stop writing at once.
var errLeaseLost = errors.New("agent: runner lease lost")

// acquire takes the agent's lease for me until `until` if it is free, expired or
// already mine, and returns the state after the write. When another invocation holds
// it, it returns that state and false. With c set, the same write claims the turn c,
// on the further condition that no turn is recorded (and an inline wake is still
// queued); when only that fails, it returns the state found and false as well, and
// the caller takes the lease without the claim. Cost: 1 write unit either way.
func (st *store) acquire(ctx context.Context, agentID, me string, now, until time.Time, c *claim) (state, bool, error) {
	set := []string{"#owner = :me", "#lease_until = :until", "#pending = if_not_exists(#pending, :zero)"}
	var remove []string
	cond := []string{"(attribute_not_exists(#owner) OR " + lease.ExpiredCond("#lease_until", ":now") + " OR #owner = :me)"}
	attrs := names(attrOwner, attrLeaseUntil, attrPending)
	vals := map[string]types.AttributeValue{":me": s(me), ":until": n(until.UnixMilli()), ":now": n(now.UnixMilli()), ":zero": n(0)}
	if c != nil {
		cond = append(cond, "attribute_not_exists(#turn_id)")
		if err := c.clause(&set, &remove, &cond, attrs, vals); err != nil {
			return state{}, false, err
		}
	}
	out, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:                    aws.String(clauses{set: set, remove: remove}.String()),
		ConditionExpression:                 aws.String(strings.Join(cond, " AND ")),
		ExpressionAttributeNames:            attrs,
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if item, ok := dynamoerr.CondFailedItem(err); ok {
		held, derr := decodeState(item)
		return held, false, derr
	}
	if err != nil {
		return state{}, false, fmt.Errorf("agent: acquire lease of %s: %w", agentID, err)
	}
	got, err := decodeState(out.Attributes)
	return got, err == nil, err
}

// renew extends my lease. It returns errLeaseLost if the lease is no longer mine. It
// asks for nothing back: the heartbeat runs beside the runner's loop, which does not
// read the lease's end from its state.
func (st *store) renew(ctx context.Context, agentID, me string, until time.Time) error {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #lease_until = :until"),
		ConditionExpression:       aws.String("#owner = :me"),
		ExpressionAttributeNames:  names(attrOwner, attrLeaseUntil),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(me), ":until": n(until.UnixMilli())},
	})
	if dynamoerr.CondFailed(err) {
		return errLeaseLost
	}
	if err != nil {
		return fmt.Errorf("agent: renew lease of %s: %w", agentID, err)
	}
	return nil
}

// endedTurn is a turn whose turn/end is logged and whose state write — clearing it and
// metering its usage — is still to be made.
type endedTurn struct {
	id    string
	usage TurnUsage
}

// release gives my lease up. With pending set, only if no stimulus arrived since the
// runner saw that pending count: otherwise it keeps the lease and returns the current
// state and false, and the runner goes round again. A release that happened returns
// the state after its write. With ended set, the same write
// finishes that turn as finishTurn does, conditional on it still being recorded: a
// release that does not happen finishes nothing. A lease that is not mine any more
// counts as released. With ck set, the same write stores the runner's checkpoint
// (checkpoint.go): a release that does not happen stores none; wrote reports whether
// this write happened (and stored ck). Cost: 1 write unit per KB of the state item
// (the checkpoint adds its own size).
func (st *store) release(ctx context.Context, agentID, me string, pending optional[int64], ended *endedTurn, ck *checkpoint) (cur state, released, wrote bool, err error) {
	cond := "#owner = :me"
	vals := map[string]types.AttributeValue{":me": s(me)}
	attrs := names(attrOwner, attrLeaseUntil)
	if pending.ok {
		cond += " AND #pending = :p"
		vals[":p"] = n(pending.v)
		attrs["#pending"] = attrPending
	}
	expr := clauses{remove: []string{"#owner", "#lease_until"}}
	if ended != nil {
		fin := finishing(ended.id, ended.usage)
		cond += " AND " + fin.cond
		expr.remove = append(expr.remove, fin.expr.remove...)
		expr.add = fin.expr.add
		maps.Copy(attrs, fin.names)
		maps.Copy(vals, fin.vals)
	}
	if ck != nil {
		v, err := attributevalue.Marshal(ck)
		if err != nil {
			return state{}, false, false, fmt.Errorf("agent: encode checkpoint of %s: %w", agentID, err)
		}
		expr.set = append(expr.set, "#ck = :ck")
		attrs["#ck"] = attrCk
		vals[":ck"] = v
	}
	out, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:                    aws.String(expr.String()),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            attrs,
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if item, ok := dynamoerr.CondFailedItem(err); ok {
		var derr error
		if cur, derr = decodeState(item); derr != nil {
			return state{}, false, false, derr
		}
		if cur.Runner != me {
			return cur, true, false, nil
		}
		return cur, false, false, nil
	}
	if err != nil {
		return state{}, false, false, fmt.Errorf("agent: release lease of %s: %w", agentID, err)
	}
	if cur, err = decodeState(out.Attributes); err != nil {
		return state{}, false, false, err
	}
	return cur, true, true, nil
}
