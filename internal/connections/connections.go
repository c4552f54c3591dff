// Package connections keeps the connections table's records of who is connected:
//
//   - "conn#<connection_id>": one per accepted socket — its agent, the hash of the token
//     it presented and its state (authorized, unauthorized, superseded, lagged).
//     Every frame a socket sends is checked against it.
//   - "agent#<agent_id>": the ownership record. It names the one connection that owns the
//     agent's stream (one connection per agent) and carries that connection's delivery
//     cursor and sender lease; see package delivery and docs/architecture.md.
//   - "gone#<connection_id>": the departure of a socket that had no conn# record (one
//     refused at connect), written by $disconnect for deliver to read (Depart).
//
// A connect writes both in one transaction that also checks the token is still current,
// so a connect can never outlive a concurrent rotation unseen.
package connections

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
)

// Errors returned by this package.
var (
	ErrNotFound  = errors.New("connections: not found")
	ErrNotOwner  = errors.New("connections: connection does not own the agent")
	ErrTokenGone = errors.New("connections: token no longer current")
	ErrLeaseLost = errors.New("connections: lease lost")
)

// State of a connection record.
type State string

// Connection states. Only StateAuthorized may send frames.
const (
	StateAuthorized   State = "authorized"
	StateUnauthorized State = "unauthorized"
	StateSuperseded   State = "superseded"
	StateLagged       State = "lagged"
)

// connTTL bounds how long a record of a socket outlives a lost $disconnect: API Gateway
// closes every connection after 2 hours.
const connTTL = 3 * time.Hour

// Conn is the record of one socket.
type Conn struct {
	ID          string
	AgentID     string
	TokenHash   string
	State       State
	ConnectedAt time.Time
	// Order is the highest order field of a frame of this socket that has taken effect
	// (0: none yet); see MarkOrder.
	Order int64
	// Unwelcomed: superseded before its hello went out, and closing it is owed — hello
	// (unless HelloPosted), superseded, the delete — by the holder of the closing lease
	// (Closer, until CloserUntil); see TakeClose.
	Unwelcomed, HelloPosted bool
	Closer                  string
	CloserUntil             time.Time
	// Role is RoleObserver for an observer connection, served from its own seat
	// (Key); RoleDriver or "" for the driver.
	Role string
}

// Owner is an agent's ownership record: the owning connection and its delivery state.
type Owner struct {
	AgentID   string
	ConnID    string
	TokenHash string
	// Sub counts subscribe frames of this connection; 0 means not subscribed yet.
	Sub int64
	// Next is the delivery cursor: the next seq to send.
	Next int64
	// From and Requested are the current subscription's replay start and the from_seq
	// the client asked for; Truncated is set until replay_truncated has been sent.
	From, Requested int64
	Truncated       bool
	// ReplayEnd is one past the tip when the subscription started: events below it are
	// replay (flow-controlled, read under a replay slot), the rest are live tail.
	ReplayEnd int64
	HelloSent bool
	// Lease names the sender that may post to the connection until LeaseUntil;
	// LeaseKind says whether Lambda retries it should it die.
	Lease      string
	LeaseKind  HolderKind
	LeaseUntil time.Time
	// Pending is the mark: it asks the lease holder to look at the log again before it
	// lets go. PendingTo says how far the mark reaches: one past the highest seq it was
	// left for — a holder whose cursor is there lets go without another look — or 0 for
	// a mark without a seq, which reaches every seq (read the log again, whatever it
	// holds).
	Pending   bool
	PendingTo int64
	// Released is the holder that last let the lease go (Release, Abandon); a watcher
	// ends its claim only if no holder has let go since its look (EndWatch).
	Released string
	// Batch: the subscription asked for batched event frames (docs/protocol.md, "Extension: batched event frames").
	Batch bool
	// WatchUntil is when the watcher's claim (ClaimWatch) runs out; zero: none.
	WatchUntil time.Time
	// Replies are error replies owed to the connection right after hello (OweReply).
	Replies []Reply
	// Observer: this is an observer's seat (obs#<agent>#<conn>), not the ownership
	// record; Key names it.
	Observer bool
}

// API is the part of the DynamoDB client the store uses.
type API interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Store reads and writes connection and ownership records.
type Store struct {
	api   API
	table string
	now   func() time.Time
}

// New returns a Store over the connections table, on the wall clock.
func New(api API, table string) *Store { return NewWithClock(api, table, time.Now) }

// NewWithClock is New with the clock every lease rule of the store reads (lease.LiveCond
// and lease.ExpiredCond's now, the ends of the leases and claims it writes, a
// connection's timestamps) taken from now: the one clock seam of the ownership record's
// rules. A test drives it, and the in-memory double of delivery.Records, with one fake
// clock, so that a lease's expiry is exact to the millisecond and nothing sleeps.
// Production uses New.
func NewWithClock(api API, table string, now func() time.Time) *Store {
	return &Store{api: api, table: table, now: now}
}

// Now reads the clock the store's lease rules read. A reader of a record that tests a
// lease itself (delivery) reads this clock too, so that it and the store's conditions
// agree to the millisecond.
func (s *Store) Now() time.Time { return s.now() }

func connKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: s(connPrefix + id)}
}

// ownerKey is the key of a seat's record: the ownership record, or an observer's seat
// (seat.go).
func ownerKey(seat string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: s(seatPK(seat))}
}

// Items of Claim's transaction, by name (see txItem).
const (
	claimToken    = "token"      // the caller's check that the token is current
	claimOwner    = "owner"      // the new ownership record
	claimConn     = "conn"       // the new connection's record
	claimReplaced = "superseded" // the replaced owner connection's record, marked superseded
	claimAlso     = "also"       // another store's write made with the claim (Claim's also)
)

// Claim makes connID the owner of agentID, superseding any previous owner, and records
// the socket — in one transaction with tokenCheck (see auth.Store.Condition), so it
// fails with ErrTokenGone if the token was revoked meanwhile. tokenCheck is a condition
// on another table; Claim adds it to the transaction as the item it names claimToken,
// and only that item's failure means ErrTokenGone. It returns the ownership record it
// replaced (ConnID "" when there was none, or when connID already owned the agent),
// exactly as it stood when replaced: whether hello went out to the superseded
// connection and who held its sender lease (see delivery.Deliverer.Welcome).
//
// also are writes of other stores made in the same transaction (the agent's state item
// naming its owner: agent.Service.OwnerClaim), so they land exactly when the claim does.
func (st *Store) Claim(ctx context.Context, agentID, connID, tokenHash string, tokenCheck *types.ConditionCheck, also ...types.TransactWriteItem) (superseded Owner, err error) {
	if tokenCheck == nil {
		return Owner{}, fmt.Errorf("connections: claim %s for %s: no token check", agentID, connID)
	}
	for attempt := 0; attempt < 30; attempt++ {
		prev, err := st.Owner(ctx, agentID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return Owner{}, err
		}
		owner := map[string]types.AttributeValue{
			attrPK:        s(ownerPrefix + agentID),
			attrConn:      s(connID),
			attrTokenHash: s(tokenHash),
			attrSub:       n(0),
			attrNext:      n(0),
			attrHello:     &types.AttributeValueMemberBOOL{Value: false},
		}
		put := &types.Put{TableName: aws.String(st.table), Item: owner}
		if prev.ConnID == "" {
			put.ConditionExpression = aws.String("attribute_not_exists(#pk)")
		} else {
			put.ConditionExpression = aws.String("#conn = :prev")
			put.ExpressionAttributeValues = map[string]types.AttributeValue{":prev": s(prev.ConnID)}
			if !prev.HelloSent {
				// The caller acts on whether hello went out and who may be sending it:
				// replace the record only as read (a sender's hello or lease moves retry).
				put.ConditionExpression = aws.String("#conn = :prev AND #hello = :no AND (attribute_not_exists(#lease_until) OR #lease_until = :lu)")
				put.ExpressionAttributeValues[":no"] = &types.AttributeValueMemberBOOL{Value: false}
				put.ExpressionAttributeValues[":lu"] = n(prev.LeaseUntil.UnixMilli())
				if prev.LeaseUntil.IsZero() {
					put.ExpressionAttributeValues[":lu"] = n(0)
				}
			}
		}
		items := []txItem{
			{claimToken, types.TransactWriteItem{ConditionCheck: tokenCheck}},
			{claimOwner, types.TransactWriteItem{Put: put}},
			{claimConn, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(st.table), Item: st.connItem(Conn{ID: connID, AgentID: agentID, TokenHash: tokenHash, State: StateAuthorized})}}},
		}
		if prev.ConnID != "" && prev.ConnID != connID {
			set := "SET #state = :sup, #expires_at = if_not_exists(#expires_at, :exp)"
			vals := map[string]types.AttributeValue{
				":sup": s(string(StateSuperseded)), ":exp": n(st.now().Add(connTTL).Unix()),
			}
			if !prev.HelloSent {
				set += unwelcomedSet(prev, vals) // closing it is owed, hello first (welcome.go)
			}
			items = append(items, txItem{claimReplaced, types.TransactWriteItem{Update: &types.Update{
				TableName: aws.String(st.table), Key: connKey(prev.ConnID),
				UpdateExpression: aws.String(set), ExpressionAttributeValues: vals,
			}}})
		}
		for _, w := range also {
			items = append(items, txItem{claimAlso, w})
		}
		err = st.transact(ctx, items)
		if err == nil {
			if prev.ConnID == connID {
				return Owner{}, nil
			}
			return prev, nil
		}
		if !dynamoerr.TxCanceled(err) {
			return Owner{}, fmt.Errorf("connections: claim %s for %s: %w", agentID, connID, err)
		}
		if txCondFailed(err, items, claimToken) {
			return Owner{}, fmt.Errorf("%w: %s", ErrTokenGone, agentID)
		}
		// Another connect changed the owner between our read and write (or a
		// transaction conflict): read again and retry, with jitter so racers spread.
		time.Sleep(time.Duration(rand.N(min(attempt+1, 10)*20)) * time.Millisecond)
	}
	return Owner{}, fmt.Errorf("connections: claim %s for %s: too much contention", agentID, connID)
}

// Conn returns the record of connID, read strongly consistent, or ErrNotFound.
func (st *Store) Conn(ctx context.Context, connID string) (Conn, error) {
	out, err := st.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.table), Key: connKey(connID), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Conn{}, fmt.Errorf("connections: get %s: %w", connID, err)
	}
	if out.Item == nil {
		return Conn{}, fmt.Errorf("%w: connection %s", ErrNotFound, connID)
	}
	return decodeConn(out.Item), nil
}

// MarkOrder records that connID's frame numbered order has taken effect, so that
// the frame numbered order+1 may proceed (the per-connection turnstile of
// docs/architecture.md, "Frame order"). The mark only grows; a lower or equal mark is
// a no-op, as is a missing record. Cost: 1 write unit.
func (st *Store) MarkOrder(ctx context.Context, connID string, order int64) error {
	_, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       connKey(connID),
		UpdateExpression:          aws.String("SET #ord = :o"),
		ConditionExpression:       aws.String("attribute_exists(#pk) AND (attribute_not_exists(#ord) OR #ord < :o)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":o": n(order)},
	})
	if err != nil && !dynamoerr.CondFailed(err) {
		return fmt.Errorf("connections: mark order %d of %s: %w", order, connID, err)
	}
	return nil
}

// EnterWait counts one more of connID's frames waiting in the turnstile, unless max
// already wait: false then (or when the record is gone), and nothing is written. A
// frame that entered calls LeaveWait when it stops waiting. Should a handler die in
// between, its count stays until the connection's record is deleted: the cap is then
// one lower for that connection only. Cost: 1 write unit.
func (st *Store) EnterWait(ctx context.Context, connID string, max int64) (bool, error) {
	_, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       connKey(connID),
		UpdateExpression:          aws.String("ADD #waiting :one"),
		ConditionExpression:       aws.String("attribute_exists(#pk) AND (attribute_not_exists(#waiting) OR #waiting < :max)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1), ":max": n(max)},
	})
	switch {
	case dynamoerr.CondFailed(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("connections: enter wait of %s: %w", connID, err)
	}
	return true, nil
}

// LeaveWait undoes one EnterWait of connID; a missing record is a no-op. Cost: 1
// write unit.
func (st *Store) LeaveWait(ctx context.Context, connID string) error {
	_, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       connKey(connID),
		UpdateExpression:          aws.String("ADD #waiting :minus"),
		ConditionExpression:       aws.String("attribute_exists(#pk) AND #waiting > :zero"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":minus": n(-1), ":zero": n(0)},
	})
	if err != nil && !dynamoerr.CondFailed(err) {
		return fmt.Errorf("connections: leave wait of %s: %w", connID, err)
	}
	return nil
}

// SetState changes the state of connID's record if it exists.
func (st *Store) SetState(ctx context.Context, connID string, state State) error {
	_, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       connKey(connID),
		UpdateExpression:          aws.String("SET #state = :st"),
		ConditionExpression:       aws.String("attribute_exists(#pk)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":st": s(string(state))},
	})
	if err != nil && !dynamoerr.CondFailed(err) {
		return fmt.Errorf("connections: set state of %s: %w", connID, err)
	}
	return nil
}

// Forget removes connID's record and, if connID still owns agentID, the ownership
// record. A turn is never touched: the agent's life is independent of the socket.
func (st *Store) Forget(ctx context.Context, connID, agentID string) error {
	if _, err := st.del(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(st.table), Key: connKey(connID)}); err != nil {
		return fmt.Errorf("connections: delete %s: %w", connID, err)
	}
	if agentID == "" {
		return nil
	}
	return st.Disown(ctx, agentID, connID)
}

// Disown removes agentID's ownership record if connID still owns it. agentID is a seat
// key (seat.go): an observer's seat goes with its entry in the observer index.
func (st *Store) Disown(ctx context.Context, agentID, connID string) error {
	if IsObserverSeat(agentID) {
		if err := st.unindex(ctx, SeatAgent(agentID), connID); err != nil {
			return err
		}
	}
	_, err := st.del(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(st.table),
		Key:                       ownerKey(agentID),
		ConditionExpression:       aws.String("#conn = :c"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": s(connID)},
	})
	if err != nil && !dynamoerr.CondFailed(err) {
		return fmt.Errorf("connections: release %s from %s: %w", agentID, connID, err)
	}
	return nil
}

// Owner returns agentID's ownership record, read strongly consistent, or ErrNotFound.
func (st *Store) Owner(ctx context.Context, agentID string) (Owner, error) {
	out, err := st.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.table), Key: ownerKey(agentID), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Owner{}, fmt.Errorf("connections: get owner of %s: %w", agentID, err)
	}
	if out.Item == nil {
		return Owner{}, fmt.Errorf("%w: owner of %s", ErrNotFound, agentID)
	}
	return decodeOwner(out.Item), nil
}

// Subscription is what a subscribe frame sets.
type Subscription struct {
	From, Requested int64
	Truncated       bool
	ReplayEnd       int64
	Batch           bool // the client takes batched event frames
	// Stamp is the subscribe frame's protocol.Stamp key: a subscription only replaces
	// one whose stamp is not later, so the last subscribe the client sent stays in
	// force whatever order the handlers ran in. "" sorts first.
	Stamp string
}

// ErrSuperseded reports a subscribe that lost to a later one of the same connection.
var ErrSuperseded = errors.New("connections: a later subscribe is in force")

// Subscribe starts a new subscription of connID on agentID: the cursor moves to
// sub.From and Pending is set, so a sender holding the lease for the replaced
// subscription continues with this one before letting go. It returns ErrNotOwner if
// connID does not own the agent, and ErrSuperseded, changing nothing, if the
// subscription in force has a later stamp.
func (st *Store) Subscribe(ctx context.Context, agentID, connID string, sub Subscription) (Owner, error) {
	out, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.table),
		Key:       ownerKey(agentID),
		UpdateExpression: aws.String("SET #sub = #sub + :one, #next = :from, #from = :from, #req = :req, " +
			"#trunc = :trunc, #rend = :rend, #pending = :true, #batch = :batch, #sub_at = :at"),
		ConditionExpression: aws.String("#conn = :c AND (attribute_not_exists(#sub_at) OR #sub_at <= :at)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":c": s(connID), ":one": n(1), ":from": n(sub.From), ":req": n(sub.Requested),
			":trunc": &types.AttributeValueMemberBOOL{Value: sub.Truncated}, ":rend": n(sub.ReplayEnd),
			":true": &types.AttributeValueMemberBOOL{Value: true}, ":batch": &types.AttributeValueMemberBOOL{Value: sub.Batch},
			":at": s(sub.Stamp),
		},
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if old, failed := dynamoerr.CondFailedItem(err); failed {
		if str(old, attrConn) == connID {
			return decodeOwner(old), fmt.Errorf("%w: %s by %s", ErrSuperseded, agentID, connID)
		}
		return Owner{}, fmt.Errorf("%w: %s by %s", ErrNotOwner, agentID, connID)
	}
	if err != nil {
		return Owner{}, fmt.Errorf("connections: subscribe %s on %s: %w", connID, agentID, err)
	}
	return decodeOwner(out.Attributes), nil
}
