package connections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/lease"
)

// Hello comes before anything else a connection is sent (docs/protocol.md). Two kinds
// of frame can be owed before it and are kept here until it has gone out: error replies
// to a connection's own frames (on agent#<id>, for the sender that posts hello), and
// the superseded frame of a connection superseded before its hello (on conn#<id>, for
// the one closer of that connection). See docs/architecture.md, "Hello first".
const (
	// agent#<id>: error replies owed once hello has gone out (OweReply).
	attrReplies = "replies"
	// conn#<id> of a connection superseded before its hello went out (Claim): closing
	// it is owed — hello unless hello_posted, then superseded, then the delete — by the
	// holder of the closing lease (closer, closer_until), which Claim carries over from
	// the replaced ownership record's sender lease.
	attrUnwelcomed  = "unwelcomed"
	attrCloser      = "closer"
	attrCloserUntil = "closer_until"
	attrHelloPosted = "hello_posted"
)

func init() {
	for _, a := range []string{attrReplies, attrUnwelcomed, attrCloser, attrCloserUntil, attrHelloPosted} {
		attrNames["#"+a] = a
	}
}

// MaxReplies bounds the error replies one connection may have owed before its hello
// went out; OweReply refuses more (ErrRepliesFull).
const MaxReplies = 16

// Errors of the hello-first records.
var (
	// ErrHelloSent: hello is recorded as sent, so the reply may be posted at once.
	ErrHelloSent = errors.New("connections: hello already sent")
	// ErrRepliesFull: MaxReplies replies are owed already.
	ErrRepliesFull = errors.New("connections: too many replies owed before hello")
)

// OweReply records frame, an error reply to connID, for the sender that posts hello to
// connID: that sender posts it right after hello (TakeReplies). It returns
// ErrHelloSent, recording nothing, if hello is already recorded — the reply can then be
// posted straight away, as hello went out before it was recorded —, ErrNotOwner if
// connID does not own agentID (superseded or gone: it is being closed), and
// ErrRepliesFull at the bound. Cost: 1 write unit.
func (st *Store) OweReply(ctx context.Context, agentID, connID string, r Reply) error {
	_, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(st.table),
		Key:                 ownerKey(agentID),
		UpdateExpression:    aws.String("SET #replies = list_append(if_not_exists(#replies, :none), :r)"),
		ConditionExpression: aws.String("#conn = :c AND #hello = :false AND (attribute_not_exists(#replies) OR size(#replies) < :max)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":c": s(connID), ":false": &types.AttributeValueMemberBOOL{Value: false},
			":none": &types.AttributeValueMemberL{}, ":max": n(MaxReplies),
			":r": &types.AttributeValueMemberL{Value: []types.AttributeValue{r.item()}},
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	old, failed := dynamoerr.CondFailedItem(err)
	switch {
	case !failed && err != nil:
		return fmt.Errorf("connections: owe reply to %s on %s: %w", connID, agentID, err)
	case !failed:
		return nil
	case old == nil || str(old, attrConn) != connID:
		return fmt.Errorf("%w: %s by %s", ErrNotOwner, agentID, connID)
	case boolean(old, attrHello):
		return fmt.Errorf("%w: %s", ErrHelloSent, connID)
	default:
		return fmt.Errorf("%w: %s", ErrRepliesFull, connID)
	}
}

// TakeReplies removes and returns the replies owed to connID on agentID's record, in
// the order they were owed; none if there are none or connID no longer owns the agent.
// Taking is one atomic write, so each reply is posted by one taker at most. Cost: 1
// write unit; the sender calls it only when its record shows replies.
func (st *Store) TakeReplies(ctx context.Context, agentID, connID string) ([]Reply, error) {
	out, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       ownerKey(agentID),
		UpdateExpression:          aws.String("REMOVE #replies"),
		ConditionExpression:       aws.String("#conn = :c AND attribute_exists(#replies)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": s(connID)},
		ReturnValues:              types.ReturnValueUpdatedOld,
	})
	if dynamoerr.CondFailed(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("connections: take replies of %s on %s: %w", connID, agentID, err)
	}
	return replies(out.Attributes), nil
}

// Reply is a frame owed to a connection right after its hello (OweReply), stored with
// what the connection does after it: Close is the close code of a frame after which
// the connection is closed (an internal error, Fail), "" for one it stays open after.
// The sender that takes it acts on Close without decoding the frame.
type Reply struct {
	Frame []byte
	Close string
}

// Attributes of a reply in the replies list.
const (
	replyFrame = "f"
	replyClose = "c"
)

func (r Reply) item() types.AttributeValue {
	m := map[string]types.AttributeValue{replyFrame: s(string(r.Frame))}
	if r.Close != "" {
		m[replyClose] = s(r.Close)
	}
	return &types.AttributeValueMemberM{Value: m}
}

func replies(item map[string]types.AttributeValue) []Reply {
	l, ok := item[attrReplies].(*types.AttributeValueMemberL)
	if !ok {
		return nil
	}
	out := make([]Reply, 0, len(l.Value))
	for _, v := range l.Value {
		if m, ok := v.(*types.AttributeValueMemberM); ok {
			out = append(out, Reply{Frame: []byte(str(m.Value, replyFrame)), Close: str(m.Value, replyClose)})
		}
	}
	return out
}

// unwelcomedSet is Claim's update of the replaced connection's record when hello was
// not recorded as sent there: closing it is owed, and the replaced record's sender
// lease becomes the closing lease (the holder that may be posting hello right now
// keeps the right to finish, and nobody else may start before its lease runs out).
func unwelcomedSet(prev Owner, vals map[string]types.AttributeValue) string {
	vals[":true"] = &types.AttributeValueMemberBOOL{Value: true}
	if prev.Lease == "" {
		return ", #unwelcomed = :true"
	}
	vals[":closer"] = s(prev.Lease)
	vals[":closer_until"] = n(prev.LeaseUntil.UnixMilli())
	return ", #unwelcomed = :true, #closer = :closer, #closer_until = :closer_until"
}

// TakeClose takes the closing lease of connID, a connection superseded before its hello
// went out, for holder until now+ttl: when no one holds it, it ran out, or holder holds
// it already (the replaced record's sender, whose lease Claim carried over). With
// helloPosted the same write records that holder has posted hello. It returns the
// record (as written when taken, as it stands otherwise) and whether holder holds the
// lease now; not taken with Unwelcomed false means nothing is owed (closed already, or
// never superseded before hello), and ErrNotFound means the record is gone with the
// connection. Cost: 1 write unit.
func (st *Store) TakeClose(ctx context.Context, connID, holder string, ttl time.Duration, helloPosted bool) (Conn, bool, error) {
	now := st.now()
	set := "SET #closer = :me, #closer_until = :until"
	vals := map[string]types.AttributeValue{
		":me": s(holder), ":until": n(now.Add(ttl).UnixMilli()), ":now": n(now.UnixMilli()),
		":true": &types.AttributeValueMemberBOOL{Value: true},
	}
	if helloPosted {
		set += ", #hello_posted = :true"
	}
	out, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(st.table),
		Key:              connKey(connID),
		UpdateExpression: aws.String(set),
		ConditionExpression: aws.String("#unwelcomed = :true AND " +
			"(attribute_not_exists(#closer) OR #closer = :me OR " + lease.ExpiredCond("#closer_until", ":now") + ")"),
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return decodeConn(out.Attributes), true, nil
	}
	old, failed := dynamoerr.CondFailedItem(err)
	switch {
	case !failed:
		return Conn{}, false, fmt.Errorf("connections: take close of %s: %w", connID, err)
	case old == nil:
		return Conn{}, false, fmt.Errorf("%w: connection %s", ErrNotFound, connID)
	}
	return decodeConn(old), false, nil
}

// ClearOwed records that connID, closed by holder (TakeClose), is owed nothing more. It
// returns ErrLeaseLost if holder no longer holds the closing lease. Cost: 1 write unit.
func (st *Store) ClearOwed(ctx context.Context, connID, holder string) error {
	_, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       connKey(connID),
		UpdateExpression:          aws.String("REMOVE #unwelcomed, #closer, #closer_until, #hello_posted"),
		ConditionExpression:       aws.String("#closer = :me"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(holder)},
	})
	if dynamoerr.CondFailed(err) {
		return fmt.Errorf("%w: closing %s", ErrLeaseLost, connID)
	}
	if err != nil {
		return fmt.Errorf("connections: clear owed %s: %w", connID, err)
	}
	return nil
}

// decodeWelcome fills in c's hello-first attributes from its record.
func decodeWelcome(c *Conn, item map[string]types.AttributeValue) {
	c.Unwelcomed = boolean(item, attrUnwelcomed)
	c.HelloPosted = boolean(item, attrHelloPosted)
	c.Closer = str(item, attrCloser)
	if ms := num(item, attrCloserUntil); ms > 0 {
		c.CloserUntil = time.UnixMilli(ms)
	}
}
