package connections

// The watcher's claim on an ownership record (ClaimWatch, EndWatch).

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/lease"
)

// ClaimWatch makes watcher the one watcher of agentID's ownership record until until: the
// invocation that makes sure a Pending mark left with a lease holder is served even if
// that holder dies. It returns false if another watcher's claim is still live or the
// record is gone. A watcher calls it again with its own id to extend its claim.
func (st *Store) ClaimWatch(ctx context.Context, agentID, watcher string, until time.Time) (bool, error) {
	_, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(st.table),
		Key:              ownerKey(agentID),
		UpdateExpression: aws.String("SET #watch = :me, #watch_until = :until"),
		ConditionExpression: aws.String("attribute_exists(#conn) AND " +
			"(attribute_not_exists(#watch_until) OR " + lease.ExpiredCond("#watch_until", ":now") + " OR #watch = :me)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me": s(watcher), ":until": n(until.UnixMilli()), ":now": n(st.now().UnixMilli()),
		},
	})
	if dynamoerr.CondFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("connections: claim watch on %s: %w", agentID, err)
	}
	return true, nil
}

// EndWatch gives watcher's claim on seen.AgentID's record up. Unless force is set it does
// so only while the record is as the watcher last read it, settled: no mark, no lease,
// and no holder let the lease go since (seen.Released) — so that a wake-up that found the
// claim taken, and relied on the watcher, is covered by the watcher's last look and
// what it checked after it. It returns false (claim kept) if the record moved, and true
// when the claim is gone (or was not watcher's).
func (st *Store) EndWatch(ctx context.Context, seen Owner, watcher string, force bool) (bool, error) {
	cond := "#watch = :me"
	vals := map[string]types.AttributeValue{":me": s(watcher)}
	if !force {
		cond += " AND attribute_not_exists(#pending) AND attribute_not_exists(#lease)"
		if seen.Released == "" {
			cond += " AND attribute_not_exists(#rel)"
		} else {
			cond += " AND #rel = :rel"
			vals[":rel"] = s(seen.Released)
		}
	}
	_, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(st.table),
		Key:                                 ownerKey(seen.Key()),
		UpdateExpression:                    aws.String("REMOVE #watch, #watch_until"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if old, failed := dynamoerr.CondFailedItem(err); failed {
		return str(old, attrWatch) != watcher, nil
	}
	if err != nil {
		return false, fmt.Errorf("connections: end watch on %s: %w", seen.AgentID, err)
	}
	return true, nil
}
