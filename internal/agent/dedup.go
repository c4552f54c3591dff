package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// Exactly-once control frames (docs/architecture.md, "Exactly-once frames").
//
// A control frame with a client_id (control.Frame, from ctx) is applied once per agent
// within DedupWindow: its dedup record, an item of the agents table with pk
// "dedup#<agent id>#<client_id>", is put with the condition that no live one exists.
// An inject's record goes in the same transaction as its inbox write, so the inject is
// queued exactly when its record is written: a repeat finds the record and queues
// nothing; a failed write leaves neither, and the client's resend applies. Every other
// control frame claims its record with one conditional put before it applies anything
// and deletes it again when the frame is refused or fails, so a frame that did not
// apply does not burn its id; a handler that dies between the claim and the apply
// does (see there). The record expires by TTL (expires_at); until DynamoDB removes it,
// the condition treats an expired one as absent.

// DedupWindow is how long a client_id is remembered for its agent.
const DedupWindow = 24 * time.Hour

// dedupPrefix starts the pk of a dedup record; agent ids hold no '#', so
// "<agent id>#<client_id>" names one agent's client_id unambiguously.
const (
	dedupPrefix = "dedup#"
	skDedup     = "dedup"
)

// errDuplicate: the frame's client_id was applied already for the agent.
var errDuplicate = errors.New("agent: client_id already applied")

func dedupKey(agentID, clientID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(dedupPrefix + agentID + "#" + clientID), "sk": s(skDedup)}
}

// dedupPut is the put of the dedup record of clientID, holding ref, conditional on no
// live record: 1 write unit (2 in a transaction).
func (st *store) dedupPut(agentID, clientID, ref string, now time.Time) *types.Put {
	item := dedupKey(agentID, clientID)
	item["expires_at"] = n(now.Add(DedupWindow).Unix())
	item["at"] = s(now.UTC().Format(sessionlog.TimeFormat))
	item["ref"] = s(ref)
	return &types.Put{
		TableName:                 aws.String(st.table),
		Item:                      item,
		ConditionExpression:       aws.String("attribute_not_exists(pk) OR expires_at <= :now"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": n(now.Unix())},
	}
}

// claimDedup claims clientID for a frame that is not an inject: false when a live
// record exists (the frame was applied, or is being applied). Cost: 1 write unit.
func (st *store) claimDedup(ctx context.Context, agentID, clientID, ref string, now time.Time) (bool, error) {
	p := st.dedupPut(agentID, clientID, ref, now)
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: p.TableName, Item: p.Item,
		ConditionExpression: p.ConditionExpression, ExpressionAttributeValues: p.ExpressionAttributeValues,
	})
	switch {
	case dynamoerr.CondFailed(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("agent: claim client_id of %s: %w", agentID, err)
	}
	return true, nil
}

// releaseDedup deletes the record claimDedup put with ref (a frame that did not apply).
// Cost: 1 write unit.
func (st *store) releaseDedup(ctx context.Context, agentID, clientID, ref string) error {
	_, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(st.table), Key: dedupKey(agentID, clientID),
		ConditionExpression:       aws.String("#ref = :ref"),
		ExpressionAttributeNames:  map[string]string{"#ref": "ref"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":ref": s(ref)},
	})
	if err != nil && !dynamoerr.CondFailed(err) {
		return fmt.Errorf("agent: release client_id of %s: %w", agentID, err)
	}
	return nil
}

// once claims the client_id ctx's frame carries, for a frame other than inject. It
// reports dup when the id was applied already: the caller applies nothing and answers
// as applied. Otherwise the caller applies the frame and calls done with the outcome:
// a failed frame's claim is released, so a repeat applies it. A frame without a
// client_id claims nothing.
func (c *core) once(ctx context.Context, agentID string) (done func(error), dup bool, err error) {
	id := control.FrameFrom(ctx).ClientID
	if id == "" {
		return func(error) {}, false, nil
	}
	ref := randomHex(8)
	claimed, err := c.store.claimDedup(ctx, agentID, id, ref, time.Now())
	if err != nil || !claimed {
		return nil, !claimed && err == nil, err
	}
	return func(ferr error) {
		if ferr == nil {
			return
		}
		if err := c.store.releaseDedup(context.WithoutCancel(ctx), agentID, id, ref); err != nil {
			c.logger.WarnContext(ctx, "release client_id of a frame that failed", "agent_id", agentID, "error", err)
		}
	}, false, nil
}

// frameTx writes items (an inject's inbox write, and the check of its connection) in
// one transaction with the dedup record of the frame's client_id, the frame's guard and
// its epoch check, as ctx's control.Frame asks. A duplicate client_id is errDuplicate,
// a failed guard control.ErrTokenGone, a failed epoch check sessionlog.ErrEpoch; any
// other cancellation is returned for the caller to read by index. A transaction that
// met another write is tried again, a few times.
func (st *store) frameTx(ctx context.Context, agentID string, now time.Time, items ...types.TransactWriteItem) error {
	f := control.FrameFrom(ctx)
	dedupAt, guardAt, epochAt := -1, -1, -1
	if f.ClientID != "" {
		dedupAt = len(items)
		items = append(items, types.TransactWriteItem{Put: st.dedupPut(agentID, f.ClientID, randomHex(8), now)})
	}
	if f.Guard != nil {
		guardAt = len(items)
		items = append(items, *f.Guard)
	}
	if f.Epoch != nil {
		epochAt = len(items)
		items = append(items, *f.Epoch)
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: items}
	for attempt := 0; ; attempt++ {
		_, err := st.db.TransactWriteItems(ctx, in)
		switch {
		case err == nil:
			return nil
		case dynamoerr.TxCondFailed(err, dedupAt):
			return errDuplicate
		case dynamoerr.TxCondFailed(err, guardAt):
			return control.ErrTokenGone
		case dynamoerr.TxCondFailed(err, epochAt):
			return fmt.Errorf("agent: queue inject for %s: %w", agentID, sessionlog.ErrEpoch)
		case dynamoerr.TxConflict(err) && attempt < 8:
			t := time.NewTimer(rand.N(time.Duration(5<<attempt) * time.Millisecond))
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("agent: queue inject for %s: %w", agentID, ctx.Err())
			case <-t.C:
			}
		default:
			return err
		}
	}
}

// framed reports whether ctx's frame needs frameTx: a client_id, a guard or an epoch
// check.
func framed(ctx context.Context) bool {
	f := control.FrameFrom(ctx)
	return f.ClientID != "" || f.Guard != nil || f.Epoch != nil
}
