package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/dynamoerr"
)

// ErrNotOwner: a client frame's connection no longer owns the agent — the state item
// names another connection as its owner (OwnerClaim), or none since a session delete
// or reset — so the frame queued nothing. The message function refuses the frame as
// from a connection that may not send.
var ErrNotOwner = control.ErrNotOwner

// attrConn is the state item's copy of the ownership record's owner connection
// (control.AttrConn).
const attrConn = control.AttrConn

// OwnerClaim is the write a connect adds to its claim transaction (control.OwnerClaim).
func OwnerClaim(table, agentID, connID string) types.TransactWriteItem {
	return control.OwnerClaim(table, agentID, connID)
}

// ownerKey is the context key of a client frame's connection (InjectFrom).
type ownerKey struct{}

// fromConn returns ctx carrying connID: every inbox write made with it is conditional
// on the state item naming connID as the agent's owner. "": ctx as it is.
func fromConn(ctx context.Context, connID string) context.Context {
	if connID == "" {
		return ctx
	}
	return context.WithValue(ctx, ownerKey{}, connID)
}

// connOf is the frame connection ctx carries, or "".
func connOf(ctx context.Context) string {
	c, _ := ctx.Value(ownerKey{}).(string)
	return c
}

// inboxUpdate is an inbox write on the state item: st.update, with the condition that
// the state item names the frame's connection as owner added to in's own when ctx
// carries one (free: a condition on the write it makes anyway). A write refused for
// that reason is ErrNotOwner; one refused by in's own condition is returned as
// st.update returns it, with the old item when in asked for it.
//
// A frame with a client_id or a guard (control.Frame) makes the write a transaction
// with its dedup record and its guard (frameTx): a refusal by in's own condition is
// then returned as the single write's would be (a ConditionalCheckFailedException with
// the old item), a duplicate as errDuplicate, a failed guard as control.ErrTokenGone.
func (st *store) inboxUpdate(ctx context.Context, agentID string, in *dynamodb.UpdateItemInput) error {
	conn := connOf(ctx)
	if conn == "" && !framed(ctx) {
		_, err := st.update(ctx, agentID, in)
		return err
	}
	if conn != "" {
		in.ConditionExpression = aws.String("(" + aws.ToString(in.ConditionExpression) + ") AND #owner_conn = :owner_conn")
		in.ExpressionAttributeNames["#owner_conn"] = attrConn
		in.ExpressionAttributeValues[":owner_conn"] = s(conn)
	}
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	var err error
	if framed(ctx) {
		err = st.frameTx(ctx, agentID, time.Now(), types.TransactWriteItem{Update: &types.Update{
			TableName: aws.String(st.table), Key: key(agentID, skState),
			UpdateExpression: in.UpdateExpression, ConditionExpression: in.ConditionExpression,
			ExpressionAttributeNames: in.ExpressionAttributeNames, ExpressionAttributeValues: in.ExpressionAttributeValues,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}})
		if old, failed := dynamoerr.TxCondFailedItem(err, 0); failed {
			err = &types.ConditionalCheckFailedException{Message: aws.String("inbox write's condition"), Item: old}
		}
	} else {
		_, err = st.update(ctx, agentID, in)
	}
	if old, failed := dynamoerr.CondFailedItem(err); failed && conn != "" && !ownedBy(old, conn) {
		return ErrNotOwner
	}
	return err
}

// ownedBy reports whether the state item item names conn as the agent's owner.
func ownedBy(item map[string]types.AttributeValue, conn string) bool {
	v, ok := item[attrConn].(*types.AttributeValueMemberS)
	return ok && v.Value == conn
}

// inboxPut puts an inbox item of its own: a plain PutItem, or, when ctx carries the
// frame's connection, the put and a check that the state item names that connection
// in one transaction (a put can be conditional on its own item only). Cost then: the
// put billed twice (a transactional write) and 2 write units for the check; a
// transaction that met another write of the state item is tried again, a few times.
func (st *store) inboxPut(ctx context.Context, agentID string, item map[string]types.AttributeValue) error {
	conn := connOf(ctx)
	if framed(ctx) {
		// With the dedup record and the guard (frameTx), and the connection's check.
		items := []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String(st.table), Item: item}}}
		if conn != "" {
			items = append(items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
				TableName: aws.String(st.table), Key: key(agentID, skState),
				ConditionExpression:       aws.String("#conn = :c"),
				ExpressionAttributeNames:  map[string]string{"#conn": attrConn},
				ExpressionAttributeValues: map[string]types.AttributeValue{":c": s(conn)},
			}})
		}
		err := st.frameTx(ctx, agentID, time.Now(), items...)
		if conn != "" && dynamoerr.TxCondFailed(err, 1) {
			return ErrNotOwner
		}
		return err
	}
	if conn == "" {
		_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.table), Item: item})
		return err
	}
	pk, _ := item["pk"].(*types.AttributeValueMemberS)
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(st.table), Item: item}},
		{ConditionCheck: &types.ConditionCheck{
			TableName: aws.String(st.table), Key: map[string]types.AttributeValue{"pk": pk, "sk": s(skState)},
			ConditionExpression:       aws.String("#conn = :c"),
			ExpressionAttributeNames:  map[string]string{"#conn": attrConn},
			ExpressionAttributeValues: map[string]types.AttributeValue{":c": s(conn)},
		}},
	}}
	for attempt := 0; ; attempt++ {
		_, err := st.db.TransactWriteItems(ctx, in)
		switch {
		case err == nil:
			return nil
		case dynamoerr.TxCondFailed(err, 1):
			return ErrNotOwner
		case dynamoerr.TxConflict(err) && attempt < 5:
			t := time.NewTimer(rand.N(time.Duration(5<<attempt) * time.Millisecond))
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("agent: queue inject: %w", ctx.Err())
			case <-t.C:
			}
		default:
			return err
		}
	}
}
