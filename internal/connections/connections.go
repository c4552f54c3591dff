// Package connections keeps the connections table's records of who is connected:
//
//   - "conn#<connection_id>": one per accepted socket — its agent, the hash of the token
//     it presented and its state (authorized, unauthorized, superseded, lagged).
//     Every frame a socket sends is checked against it.
//   - "agent#<agent_id>": the ownership record. It names the one connection that owns the
//     agent's stream (one connection per agent) and carries that connection's delivery
//     cursor and sender lease; see package delivery and docs/architecture.md.
//
// A connect writes both in one transaction that also checks the token is still current,
// so a connect can never outlive a concurrent rotation unseen.
package connections

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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
	Replies [][]byte
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

// New returns a Store over the connections table.
func New(api API, table string) *Store { return &Store{api: api, table: table, now: time.Now} }

func connKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: s("conn#" + id)}
}

func ownerKey(agentID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: s("agent#" + agentID)}
}

// Reject records a socket that failed authentication, so its frames are refused until
// the deliver function has told it unauthorized and closed it.
func (st *Store) Reject(ctx context.Context, connID, agentID string) error {
	_, err := st.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(st.table),
		Item:      st.connItem(Conn{ID: connID, AgentID: agentID, State: StateUnauthorized}),
	})
	if err != nil {
		return fmt.Errorf("connections: reject %s: %w", connID, err)
	}
	return nil
}

// Items of Claim's transaction, by name (see txItem).
const (
	claimToken    = "token"      // the caller's check that the token is current
	claimOwner    = "owner"      // the new ownership record
	claimConn     = "conn"       // the new connection's record
	claimReplaced = "superseded" // the replaced owner connection's record, marked superseded
)

// Claim makes connID the owner of agentID, superseding any previous owner, and records
// the socket — in one transaction with tokenCheck (see auth.Store.Condition), so it
// fails with ErrTokenGone if the token was revoked meanwhile. tokenCheck is a condition
// on another table; Claim adds it to the transaction as the item it names claimToken,
// and only that item's failure means ErrTokenGone. It returns the ownership record it
// replaced (ConnID "" when there was none, or when connID already owned the agent),
// exactly as it stood when replaced: whether hello went out to the superseded
// connection and who held its sender lease (see delivery.Deliverer.Supersede).
func (st *Store) Claim(ctx context.Context, agentID, connID, tokenHash string, tokenCheck *types.ConditionCheck) (superseded Owner, err error) {
	if tokenCheck == nil {
		return Owner{}, fmt.Errorf("connections: claim %s for %s: no token check", agentID, connID)
	}
	for attempt := 0; attempt < 30; attempt++ {
		prev, err := st.Owner(ctx, agentID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return Owner{}, err
		}
		owner := map[string]types.AttributeValue{
			attrPK:        s("agent#" + agentID),
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
		err = st.transact(ctx, items)
		if err == nil {
			if prev.ConnID == connID {
				return Owner{}, nil
			}
			return prev, nil
		}
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) {
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
	if err != nil && !isCondCheckFailed(err) {
		return fmt.Errorf("connections: mark order %d of %s: %w", order, connID, err)
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
	if err != nil && !isCondCheckFailed(err) {
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

// Disown removes agentID's ownership record if connID still owns it.
func (st *Store) Disown(ctx context.Context, agentID, connID string) error {
	_, err := st.del(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(st.table),
		Key:                       ownerKey(agentID),
		ConditionExpression:       aws.String("#conn = :c"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": s(connID)},
	})
	if err != nil && !isCondCheckFailed(err) {
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
	if old, failed := condFailed(err); failed {
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

// AcquireOutcome is what an Acquire found.
type AcquireOutcome int

// Outcomes of Acquire.
const (
	// Acquired: the lease is the caller's; AcquireResult.Owner is the record as written.
	Acquired AcquireOutcome = iota + 1
	// LeaseHeld: another holder's lease is live; Owner is the record as it stands.
	LeaseHeld
	// NothingOwed: the lease is free, but the owner is not subscribed and has had hello,
	// or the cursor is already past upTo; Owner is the record as it stands.
	NothingOwed
	// NoOwner: no connection owns the agent; Owner is zero.
	NoOwner
)

func (k AcquireOutcome) String() string {
	switch k {
	case Acquired:
		return "acquired"
	case LeaseHeld:
		return "lease held"
	case NothingOwed:
		return "nothing owed"
	case NoOwner:
		return "no owner"
	}
	return fmt.Sprintf("AcquireOutcome(%d)", int(k))
}

// AcquireResult is the outcome of Acquire and the ownership record it saw or wrote.
type AcquireResult struct {
	Owner   Owner
	Outcome AcquireOutcome
}

// Acquire takes the sender lease of agentID's owner connection for ttl for h, if it is
// free or expired and there is something to send: hello not yet sent, or a
// subscription — and, with upTo >= 0, the cursor not past upTo (or a Pending mark). The
// result tells which it found (see AcquireOutcome); an error means only that DynamoDB
// could not be asked. Cost: 1 write unit; a refusal returns the record at no extra
// request (ReturnValuesOnConditionCheckFailure ALL_OLD).
func (st *Store) Acquire(ctx context.Context, agentID string, h Holder, ttl time.Duration, upTo int64) (AcquireResult, error) {
	now := st.now()
	cond := "attribute_exists(#conn) AND (attribute_not_exists(#lease) OR #lease_until < :now) AND (#hello = :false OR #sub > :zero)"
	vals := map[string]types.AttributeValue{
		":me": s(h.ID), ":kind": s(string(h.Kind)), ":now": n(now.UnixMilli()), ":until": n(now.Add(ttl).UnixMilli()),
		":false": &types.AttributeValueMemberBOOL{Value: false}, ":zero": n(0),
	}
	if upTo >= 0 {
		cond += " AND (#hello = :false OR #next <= :upto OR attribute_exists(#pending))"
		vals[":upto"] = n(upTo)
	}
	out, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(st.table),
		Key:                                 ownerKey(agentID),
		UpdateExpression:                    aws.String("SET #lease = :me, #lease_kind = :kind, #lease_until = :until REMOVE #pending"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return AcquireResult{decodeOwner(out.Attributes), Acquired}, nil
	}
	old, failed := condFailed(err)
	switch {
	case !failed:
		return AcquireResult{}, fmt.Errorf("connections: acquire lease on %s: %w", agentID, err)
	case old == nil:
		return AcquireResult{Outcome: NoOwner}, nil
	}
	o := decodeOwner(old)
	if o.Lease != "" && !o.LeaseUntil.Before(now) {
		return AcquireResult{o, LeaseHeld}, nil
	}
	return AcquireResult{o, NothingOwed}, nil
}

// MarkPending asks the current lease holder of agentID to look at the log again before
// it lets go, for events up to upTo (upTo < 0: whatever is new). It returns done=true
// when the holder will see them — marked, the cursor is already past upTo, or a mark
// already reaches upTo — or when the lease turns out let go with the cursor past upTo
// (nothing owed), and done=false if no live lease is held and something may be owed
// (the caller should try Acquire).
//
// A mark for upTo >= 0 carries upTo (the mark's seq), so that a holder whose cursor is
// past it lets go in one write (Release). The seq only grows: the write is conditional
// on the mark being absent or a lower seq, so two wake-ups racing leave the higher, and
// a mark without a seq (upTo < 0: a subscribe, a kick, a watcher), which reaches every
// seq, is never narrowed to one. Cost: 1 write unit, none billed beyond it when the
// condition fails (the record comes back with the failure).
func (st *Store) MarkPending(ctx context.Context, agentID string, upTo int64) (done bool, err error) {
	now := st.now().UnixMilli()
	cond := "attribute_exists(#lease) AND #lease_until >= :now"
	vals := map[string]types.AttributeValue{":mark": &types.AttributeValueMemberBOOL{Value: true}, ":now": n(now)}
	if upTo >= 0 {
		// A wake-up for events already sent must not keep the holder busy.
		cond += " AND #next <= :upto AND (attribute_not_exists(#pending) OR (attribute_type(#pending, :ntype) AND #pending < :upto))"
		vals[":upto"] = n(upTo)
		vals[":ntype"] = s("N")
		vals[":mark"] = n(upTo)
	}
	_, err = st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(st.table),
		Key:                                 ownerKey(agentID),
		UpdateExpression:                    aws.String("SET #pending = :mark"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if old, failed := condFailed(err); failed {
		o := decodeOwner(old)
		switch {
		case old == nil:
			return false, nil
		case o.Lease != "" && o.LeaseUntil.UnixMilli() >= now:
			return true, nil // leased, and already past upTo or marked up to it
		case upTo >= 0 && o.HelloSent && (o.Sub == 0 || o.Next > upTo) && !o.Pending:
			// Let go meanwhile, past upTo: Acquire would find nothing owed (and a
			// failed write of its own would cost a write unit).
			return true, nil
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("connections: mark pending on %s: %w", agentID, err)
	}
	return true, nil
}

// MarkReaches reports whether o carries a mark that reaches upTo: one without a seq,
// or one whose seq is upTo or beyond (upTo < 0 asks for a mark without a seq).
func (o Owner) MarkReaches(upTo int64) bool {
	return o.Pending && (o.PendingTo == 0 || upTo >= 0 && o.PendingTo > upTo)
}

// Progress is what a lease holder writes back.
type Progress struct {
	Next      int64
	HelloSent bool
	Truncated bool // still owed
}

// Checkpoint records progress made under the lease for subscription o.Sub of o.ConnID
// and extends the lease by ttl. If the record moved under the holder (resubscribe), it
// returns the new record and ErrLeaseLost is NOT returned as long as the holder still
// holds the lease: the holder continues from the returned record. It returns
// ErrLeaseLost if the lease or the ownership is gone.
func (st *Store) Checkpoint(ctx context.Context, o Owner, holder string, p Progress, ttl time.Duration) (Owner, error) {
	return st.write(ctx, o, holder, p, ttl, false)
}

// Release records progress and lets the lease go, clearing a mark the progress covers
// (no mark, or a mark whose seq is below p.Next), in one conditional write. Otherwise
// the lease is kept and the current record returned with released=false, so that the
// holder looks at the log again: after a resubscribe, with the new subscription's
// cursor; for a mark without a seq, with the mark cleared (one more write, so that a
// mark left after the holder's next read stops its next release); for a mark whose seq
// is at or past p.Next, with the mark left as it is — the holder sends at least up to
// its seq (those events are in the log: the mark was left after they were appended)
// and the next Release clears it. Cost: 1 write unit when the progress covers the mark.
func (st *Store) Release(ctx context.Context, o Owner, holder string, p Progress) (cur Owner, released bool, err error) {
	cur, err = st.write(ctx, o, holder, p, 0, true)
	if err != nil {
		return cur, false, err
	}
	return cur, cur.Lease == "", nil
}

func (st *Store) write(ctx context.Context, o Owner, holder string, p Progress, ttl time.Duration, release bool) (Owner, error) {
	now := st.now()
	for {
		set := "SET #next = :next, #hello = :hello, #trunc = :trunc"
		vals := map[string]types.AttributeValue{
			":me": s(holder), ":c": s(o.ConnID), ":sub": n(o.Sub), ":next": n(p.Next),
			":hello": &types.AttributeValueMemberBOOL{Value: p.HelloSent},
			":trunc": &types.AttributeValueMemberBOOL{Value: p.Truncated},
		}
		update := set
		cond := "#lease = :me AND #conn = :c AND #sub = :sub"
		if release {
			update += ", #rel = :me REMOVE #lease, #lease_kind, #lease_until, #pending"
			cond += " AND (attribute_not_exists(#pending) OR (attribute_type(#pending, :ntype) AND #pending < :next))"
			vals[":ntype"] = s("N")
		} else {
			update += ", #lease_until = :until"
			vals[":until"] = n(now.Add(ttl).UnixMilli())
		}
		out, err := st.update(ctx, &dynamodb.UpdateItemInput{
			TableName:                           aws.String(st.table),
			Key:                                 ownerKey(o.AgentID),
			UpdateExpression:                    aws.String(update),
			ConditionExpression:                 aws.String(cond),
			ExpressionAttributeValues:           vals,
			ReturnValues:                        types.ReturnValueAllNew,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return decodeOwner(out.Attributes), nil
		}
		old, failed := condFailed(err)
		if !failed {
			return Owner{}, fmt.Errorf("connections: write progress on %s: %w", o.AgentID, err)
		}
		cur := decodeOwner(old)
		if old == nil || cur.Lease != holder || cur.ConnID != o.ConnID {
			return cur, fmt.Errorf("%w: %s", ErrLeaseLost, o.AgentID)
		}
		if cur.Sub != o.Sub {
			// Resubscribed: the new subscription's cursor wins; keep the lease, clear
			// pending (we are about to look), and hand the new record back.
			out, err := st.update(ctx, &dynamodb.UpdateItemInput{
				TableName:                 aws.String(st.table),
				Key:                       ownerKey(o.AgentID),
				UpdateExpression:          aws.String("SET #hello = :hello, #lease_until = :until REMOVE #pending"),
				ConditionExpression:       aws.String("#lease = :me AND #conn = :c AND #sub = :sub"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(holder), ":c": s(o.ConnID), ":sub": n(cur.Sub), ":hello": &types.AttributeValueMemberBOOL{Value: p.HelloSent || cur.HelloSent}, ":until": n(now.Add(leaseFloor(ttl)).UnixMilli())},
				ReturnValues:              types.ReturnValueAllNew,
			})
			if isCondCheckFailed(err) {
				continue // moved again: look again
			}
			if err != nil {
				return Owner{}, fmt.Errorf("connections: adopt subscription on %s: %w", o.AgentID, err)
			}
			return decodeOwner(out.Attributes), nil
		}
		if cur.Pending && cur.PendingTo > p.Next {
			// A mark with a seq ahead of the progress (release only): keep the lease
			// and the mark; the holder sends up to the seq and releases again.
			return cur, nil
		}
		// A mark without a seq (release only): clear it, keep the lease, write the progress.
		out, err = st.update(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(st.table),
			Key:                       ownerKey(o.AgentID),
			UpdateExpression:          aws.String(set + ", #lease_until = :until REMOVE #pending"),
			ConditionExpression:       aws.String("#lease = :me AND #conn = :c AND #sub = :sub"),
			ExpressionAttributeValues: withUntil(vals, n(now.Add(leaseFloor(ttl)).UnixMilli()), ":ntype"),
			ReturnValues:              types.ReturnValueAllNew,
		})
		if isCondCheckFailed(err) {
			continue
		}
		if err != nil {
			return Owner{}, fmt.Errorf("connections: clear pending on %s: %w", o.AgentID, err)
		}
		return decodeOwner(out.Attributes), nil
	}
}

// leaseFloor is the lease extension used when a release turns into more work.
func leaseFloor(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return DefaultLease
	}
	return ttl
}

// DefaultLease is how long a sender may post to a connection before it must checkpoint.
const DefaultLease = 30 * time.Second

// withUntil returns vals with :until set and the placeholders drop left out (DynamoDB
// refuses a value no expression uses).
func withUntil(vals map[string]types.AttributeValue, until types.AttributeValue, drop ...string) map[string]types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(vals)+1)
	for k, v := range vals {
		out[k] = v
	}
	for _, k := range drop {
		delete(out, k)
	}
	out[":until"] = until
	return out
}

func (st *Store) connItem(c Conn) map[string]types.AttributeValue {
	now := st.now()
	item := map[string]types.AttributeValue{
		attrPK:          s("conn#" + c.ID),
		attrAgent:       s(c.AgentID),
		attrState:       s(string(c.State)),
		attrConnectedAt: n(now.UnixMilli()),
		attrExpiresAt:   n(now.Add(connTTL).Unix()),
	}
	if c.TokenHash != "" {
		item[attrTokenHash] = s(c.TokenHash)
	}
	return item
}

func decodeConn(item map[string]types.AttributeValue) Conn {
	c := Conn{
		ID:          strings.TrimPrefix(str(item, attrPK), "conn#"),
		AgentID:     str(item, attrAgent),
		TokenHash:   str(item, attrTokenHash),
		State:       State(str(item, attrState)),
		ConnectedAt: time.UnixMilli(num(item, attrConnectedAt)),
		Order:       num(item, attrOrder),
	}
	decodeWelcome(&c, item)
	return c
}

func decodeOwner(item map[string]types.AttributeValue) Owner {
	if item == nil {
		return Owner{}
	}
	o := Owner{
		AgentID:   strings.TrimPrefix(str(item, attrPK), "agent#"),
		ConnID:    str(item, attrConn),
		TokenHash: str(item, attrTokenHash),
		Sub:       num(item, attrSub),
		Next:      num(item, attrNext),
		From:      num(item, attrFrom),
		Requested: num(item, attrRequested),
		Truncated: boolean(item, attrTruncated),
		ReplayEnd: num(item, attrReplayEnd),
		HelloSent: boolean(item, attrHello),
		Lease:     str(item, attrLease),
		LeaseKind: kindOf(str(item, attrLease), str(item, attrLeaseKind)),
		Batch:     boolean(item, attrBatch),
		Replies:   replies(item),
		Released:  str(item, attrReleased),
	}
	switch v := item[attrPending].(type) {
	case *types.AttributeValueMemberBOOL:
		o.Pending = v.Value
	case *types.AttributeValueMemberN:
		o.Pending, o.PendingTo = true, num(item, attrPending)+1
	}
	if ms := num(item, attrLeaseUntil); ms > 0 {
		o.LeaseUntil = time.UnixMilli(ms)
	}
	if ms := num(item, attrWatchUntil); ms > 0 && str(item, attrWatch) != "" {
		o.WatchUntil = time.UnixMilli(ms)
	}
	return o
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func str(item map[string]types.AttributeValue, k string) string {
	if v, ok := item[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func num(item map[string]types.AttributeValue, k string) int64 {
	if v, ok := item[k].(*types.AttributeValueMemberN); ok {
		i, _ := strconv.ParseInt(v.Value, 10, 64)
		return i
	}
	return 0
}

func boolean(item map[string]types.AttributeValue, k string) bool {
	v, ok := item[k].(*types.AttributeValueMemberBOOL)
	return ok && v.Value
}

func isCondCheckFailed(err error) bool {
	_, failed := condFailed(err)
	return failed
}

// Abandon records progress and lets the lease go even if Pending is set, for a holder
// that must stop (its invocation is ending) and hands the work to a fresh one. If the
// subscription changed under the holder, only the lease goes: the new subscription's
// cursor is kept.
func (st *Store) Abandon(ctx context.Context, o Owner, holder string, p Progress) error {
	_, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(st.table),
		Key:                 ownerKey(o.AgentID),
		UpdateExpression:    aws.String("SET #next = :next, #hello = :hello, #trunc = :trunc, #rel = :me REMOVE #lease, #lease_kind, #lease_until"),
		ConditionExpression: aws.String("#lease = :me AND #conn = :c AND #sub = :sub"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me": s(holder), ":c": s(o.ConnID), ":sub": n(o.Sub), ":next": n(p.Next),
			":hello": &types.AttributeValueMemberBOOL{Value: p.HelloSent}, ":trunc": &types.AttributeValueMemberBOOL{Value: p.Truncated},
		},
	})
	if err == nil {
		return nil
	}
	if !isCondCheckFailed(err) {
		return fmt.Errorf("connections: abandon lease on %s: %w", o.AgentID, err)
	}
	// Resubscribed meanwhile: the progress belongs to the replaced subscription and is
	// dropped, but the lease must still go, or the new subscription would wait for it to
	// run out. Pending stays set for whoever comes next.
	_, err = st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       ownerKey(o.AgentID),
		UpdateExpression:          aws.String("SET #rel = :me REMOVE #lease, #lease_kind, #lease_until"),
		ConditionExpression:       aws.String("#lease = :me AND #conn = :c"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(holder), ":c": s(o.ConnID)},
	})
	if err != nil && !isCondCheckFailed(err) {
		return fmt.Errorf("connections: abandon lease on %s: %w", o.AgentID, err)
	}
	return nil
}

// SlotGroupSize is k, the number of slots one poll for a free slot reads: Slots are
// split into groups of k so that a waiter's read costs k half read units whatever the
// number of slots, and the reads of W waiters spread over all groups instead of landing
// on every slot item (docs/scale.md, "The replay slots"). It is far under the 100 keys
// one BatchGetItem takes.
const SlotGroupSize = 4

// ErrNoSlotGroup is returned by Slots.TryAcquire for a group outside [0, Groups()).
var ErrNoSlotGroup = errors.New("connections: no such slot group")

// Slots is a cluster-wide counting semaphore of n slots, items "slot#<i>" of the
// connections table, each a lease with an expiry so a crashed holder frees its slot.
// It bounds concurrent replay reads across every Lambda instance: at most n held at
// once. The slots form Groups() groups of SlotGroupSize (the last may be smaller): group
// g is slot#(g·k) … slot#(min((g+1)·k, n)−1). A waiter polls one group at a time.
type Slots struct {
	store *Store
	n     int
	ttl   time.Duration
}

// NewSlots returns a semaphore of n slots with leases of ttl.
func (st *Store) NewSlots(n int, ttl time.Duration) *Slots { return &Slots{store: st, n: n, ttl: ttl} }

// Groups returns G = ⌈n / SlotGroupSize⌉, the number of slot groups (1 for n ≤ 4).
func (sl *Slots) Groups() int { return (sl.n + SlotGroupSize - 1) / SlotGroupSize }

// TryAcquire takes a free slot of group (0 ≤ group < Groups()) and returns its index, or
// -1 if all of the group's slots are held (slots of other groups may be free: a waiter
// picks a group at random for each poll). It first reads the group's slots (one
// eventually consistent BatchGetItem of at most SlotGroupSize keys, half a read unit
// each) and writes only to those that look free, starting from a random one, so that a
// crowd of waiters costs reads, not failed conditional writes.
func (sl *Slots) TryAcquire(ctx context.Context, holder string, group int) (int, error) {
	if group < 0 || group >= sl.Groups() {
		return -1, fmt.Errorf("connections: acquire slot in group %d of %d: %w", group, sl.Groups(), ErrNoSlotGroup)
	}
	lo := group * SlotGroupSize
	size := min(lo+SlotGroupSize, sl.n) - lo
	now := sl.store.now()
	busy, err := sl.busy(ctx, lo, size, now)
	if err != nil {
		return -1, err
	}
	start := rand.IntN(size)
	for j := range size {
		i := lo + (start+j)%size
		if busy[i] {
			continue
		}
		_, err := sl.store.update(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(sl.store.table),
			Key:                       slotKey(i),
			UpdateExpression:          aws.String("SET #holder = :me, #until_ms = :until"),
			ConditionExpression:       aws.String("attribute_not_exists(#holder) OR #until_ms < :now"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(holder), ":until": n(now.Add(sl.ttl).UnixMilli()), ":now": n(now.UnixMilli())},
		})
		if err == nil {
			return i, nil
		}
		if !isCondCheckFailed(err) {
			return -1, fmt.Errorf("connections: acquire slot %d: %w", i, err)
		}
	}
	return -1, nil
}

func slotKey(i int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: s("slot#" + strconv.Itoa(i))}
}

// busy reports which of the size slots from lo hold a live lease, as far as an
// eventually consistent read can tell (a stale answer only costs one failed conditional
// write).
func (sl *Slots) busy(ctx context.Context, lo, size int, now time.Time) (map[int]bool, error) {
	keys := make([]map[string]types.AttributeValue, size)
	for j := range keys {
		keys[j] = slotKey(lo + j)
	}
	busy := map[int]bool{}
	req := map[string]types.KeysAndAttributes{sl.store.table: {Keys: keys}}
	for len(req) > 0 {
		out, err := sl.store.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return nil, fmt.Errorf("connections: read slots %d-%d: %w", lo, lo+size-1, err)
		}
		for _, item := range out.Responses[sl.store.table] {
			i, _ := strconv.Atoi(strings.TrimPrefix(str(item, attrPK), "slot#"))
			if str(item, attrSlotHolder) != "" && num(item, attrSlotUntil) >= now.UnixMilli() {
				busy[i] = true
			}
		}
		req = out.UnprocessedKeys
	}
	return busy, nil
}

// Release frees slot i if holder still holds it.
func (sl *Slots) Release(ctx context.Context, holder string, i int) error {
	_, err := sl.store.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(sl.store.table),
		Key:                       slotKey(i),
		UpdateExpression:          aws.String("REMOVE #holder, #until_ms"),
		ConditionExpression:       aws.String("#holder = :me"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(holder)},
	})
	if err != nil && !isCondCheckFailed(err) {
		return fmt.Errorf("connections: release slot %d: %w", i, err)
	}
	return nil
}

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
			"(attribute_not_exists(#watch_until) OR #watch_until < :now OR #watch = :me)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me": s(watcher), ":until": n(until.UnixMilli()), ":now": n(st.now().UnixMilli()),
		},
	})
	if isCondCheckFailed(err) {
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
		Key:                                 ownerKey(seen.AgentID),
		UpdateExpression:                    aws.String("REMOVE #watch, #watch_until"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if old, failed := condFailed(err); failed {
		return str(old, attrWatch) != watcher, nil
	}
	if err != nil {
		return false, fmt.Errorf("connections: end watch on %s: %w", seen.AgentID, err)
	}
	return true, nil
}
