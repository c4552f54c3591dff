package connections

import (
	"context"
	"fmt"
	"regexp"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
)

// Attribute names of the connections table's items (docs/architecture.md lists the
// ownership record's). Expressions name them as "#" + name; the store's write
// helpers (update, del, transact) map every such placeholder to its attribute, so no
// expression carries a bare attribute name and none can be misspelt unseen.
const (
	attrPK = "pk" // connPrefix, ownerPrefix or slotPrefix, then the id

	// conn#<id>
	attrAgent       = "agent"
	attrTokenHash   = "tok" // also on agent#<id>
	attrState       = "state"
	attrConnectedAt = "connected_at"
	attrExpiresAt   = "expires_at"
	attrOrder       = "ord"
	attrWaiting     = "waiting" // frames of the socket in the turnstile, see EnterWait
	attrRole        = "role"    // RoleObserver on an observer's record; absent: the driver

	// agent#<id>: the ownership record
	attrConn       = "conn"
	attrSub        = "sub"
	attrNext       = "next"
	attrFrom       = "from"
	attrRequested  = "req"
	attrTruncated  = "trunc"
	attrReplayEnd  = "rend"
	attrHello      = "hello"
	attrLease      = "lease"
	attrLeaseUntil = "lease_until"
	attrLeaseKind  = "lease_kind"
	attrPending    = "pending" // the mark: true (look again), or the seq it covers
	attrReleased   = "rel"     // the holder that last let the lease go
	attrBatch      = "batch"
	attrSubAt      = "sub_at"
	attrWatch      = "watch"
	attrWatchUntil = "watch_until"

	// slot#<i>
	attrSlotHolder = "holder"
	attrSlotUntil  = "until_ms"
)

// attrNames maps every expression placeholder to its attribute.
var attrNames = func() map[string]string {
	m := map[string]string{}
	for _, a := range []string{
		attrPK, attrAgent, attrTokenHash, attrState, attrConnectedAt, attrExpiresAt, attrOrder, attrWaiting, attrRole,
		attrConn, attrSub, attrNext, attrFrom, attrRequested, attrTruncated, attrReplayEnd,
		attrHello, attrLease, attrLeaseUntil, attrLeaseKind, attrPending, attrReleased, attrBatch, attrSubAt,
		attrWatch, attrWatchUntil, attrSlotHolder, attrSlotUntil,
	} {
		m["#"+a] = a
	}
	return m
}()

var placeholder = regexp.MustCompile(`#\w+`)

// exprNames returns the ExpressionAttributeNames of exprs: each #name in them mapped to
// its attribute (nil when there is none, as DynamoDB rejects an empty map). An unknown
// placeholder is a programming error and panics, at the first test that runs it.
func exprNames(exprs ...*string) map[string]string {
	var names map[string]string
	for _, e := range exprs {
		for _, p := range placeholder.FindAllString(aws.ToString(e), -1) {
			a, ok := attrNames[p]
			if !ok {
				panic(fmt.Sprintf("connections: unknown attribute placeholder %s in %q", p, aws.ToString(e)))
			}
			if names == nil {
				names = map[string]string{}
			}
			names[p] = a
		}
	}
	return names
}

func (st *Store) update(ctx context.Context, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
	in.ExpressionAttributeNames = exprNames(in.UpdateExpression, in.ConditionExpression)
	return st.api.UpdateItem(ctx, in)
}

func (st *Store) del(ctx context.Context, in *dynamodb.DeleteItemInput) (*dynamodb.DeleteItemOutput, error) {
	in.ExpressionAttributeNames = exprNames(in.ConditionExpression)
	return st.api.DeleteItem(ctx, in)
}

// txItem is one named item of a transaction, so that a cancellation reason is matched
// to the item it concerns by name, never by position.
type txItem struct {
	name string
	item types.TransactWriteItem
}

// transact writes items in one transaction. Items of this store get their attribute
// names filled in; a condition check brought by another store keeps its own.
func (st *Store) transact(ctx context.Context, items []txItem) error {
	in := &dynamodb.TransactWriteItemsInput{}
	for _, it := range items {
		w := it.item
		switch {
		case w.Put != nil && w.Put.TableName != nil && *w.Put.TableName == st.table:
			w.Put.ExpressionAttributeNames = exprNames(w.Put.ConditionExpression)
		case w.Update != nil && w.Update.TableName != nil && *w.Update.TableName == st.table && w.Update.ExpressionAttributeNames == nil:
			// (an update that names its own attributes — the observer index's — keeps them)
			w.Update.ExpressionAttributeNames = exprNames(w.Update.UpdateExpression, w.Update.ConditionExpression)
		}
		in.TransactItems = append(in.TransactItems, w)
	}
	_, err := st.api.TransactWriteItems(ctx, in)
	return err
}

// txCondFailed reports whether err is a transaction of items cancelled because the
// condition of the item named name did not hold.
func txCondFailed(err error, items []txItem, name string) bool {
	for i, it := range items {
		if it.name == name {
			return dynamoerr.TxCondFailed(err, i)
		}
	}
	return false
}

// The key prefixes of the table's four kinds of item. An ownership record is keyed by
// its agent: "agent#" here names that record, as in the agents table it names the
// agent's own items; the two never share a table.
const (
	connPrefix   = "conn#"  // a socket's record
	ownerPrefix  = "agent#" // an agent's ownership record
	slotPrefix   = "slot#"  // a replay slot
	departPrefix = "gone#"  // the departure of a socket that had no record (Depart)
)
