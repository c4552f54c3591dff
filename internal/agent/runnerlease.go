package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
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
	u := newUpdate().Set(attrOwner, ":me").Set(attrLeaseUntil, ":until").Set(attrPending, "if_not_exists(#pending, :zero)").
		If("(attribute_not_exists(#owner) OR "+lease.ExpiredCond("#lease_until", ":now")+" OR #owner = :me)").
		Val(":me", s(me)).Val(":until", n(until.UnixMilli())).Val(":now", n(now.UnixMilli())).Val(":zero", n(0))
	if c != nil {
		u.If("attribute_not_exists(#turn_id)")
		if err := c.apply(u); err != nil {
			return state{}, false, err
		}
	}
	in := u.input()
	in.ReturnValues = types.ReturnValueAllNew
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err := st.update(ctx, agentID, in)
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
	_, err := st.update(ctx, agentID, newUpdate().Set(attrLeaseUntil, ":until").If("#owner = :me").
		Val(":me", s(me)).Val(":until", n(until.UnixMilli())).input())
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
	u := newUpdate().Remove(attrOwner, attrLeaseUntil).If("#owner = :me").Val(":me", s(me))
	if pending.ok {
		u.If("#pending = :p").Val(":p", n(pending.v))
	}
	if ended != nil {
		finishing(u, ended.id, ended.usage)
	}
	if ck != nil {
		v, err := attributevalue.Marshal(ck)
		if err != nil {
			return state{}, false, false, fmt.Errorf("agent: encode checkpoint of %s: %w", agentID, err)
		}
		u.Set(attrCk, ":ck").Val(":ck", v)
	}
	in := u.input()
	in.ReturnValues = types.ReturnValueAllNew
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	out, err := st.update(ctx, agentID, in)
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
