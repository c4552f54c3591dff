package agent

import (
	"bytes"
	"compress/gzip"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
)

// inboxItem is one queued inject: an attribute of the state item (inline) when its
// text is at most InlineTextBytes, an item of its own otherwise.
type inboxItem struct {
	ID   string `dynamodbav:"id"`
	Text string `dynamodbav:"text,omitempty"`
	Wake bool   `dynamodbav:"wake"`
	At   string `dynamodbav:"at"`
	// Gz holds Text gzip-compressed, instead of Text, in an inbox item of its own
	// whose text compresses (see compress).
	Gz []byte `dynamodbav:"gz,omitempty"`
	// ScheduleID and FireAt: the inject is a schedule's fire (InjectFire); its
	// user/message or context/injected carries the id, after a schedule/fired.
	ScheduleID string `dynamodbav:"schedule_id,omitempty"`
	FireAt     string `dynamodbav:"fire_at,omitempty"`
	// ClientID is the inject's client_id (control.Frame), for the event it becomes.
	ClientID string `dynamodbav:"client_id,omitempty"`
	// ExpectSeq is the inject's expect_seq precondition (nil: none), checked again by
	// the runner when it drains the inject; Conn is the connection it came from, which
	// is answered stale if that check fails ("" for an inject from no connection).
	ExpectSeq *int64 `dynamodbav:"expect_seq,omitempty"`
	Conn      string `dynamodbav:"conn,omitempty"`
	// attr is the state item's attribute holding an inline inject (inboxAttr, or
	// turnWakeAttr once a turn claimed it); "" for an item of its own.
	attr string `dynamodbav:"-"`
}

// InlineTextBytes is the longest inject text queued on the agent's state item rather
// than as an inbox item of its own. Queued there, an inject costs one write (which
// also counts the stimulus) and no delete: the write that claims the turn, or the
// one that clears a drain, takes it off. The state item is billed by its whole size
// on every write (1 write unit per KB), so only short texts go there; most steers and
// chat messages are shorter.
const InlineTextBytes = 256

// MaxInline is how many injects may be queued on the state item at once; more wait as
// inbox items of their own. It bounds the state item (every write of it is billed by
// its whole size) at about 2 KB, far below DynamoDB's 400 KB item limit, however many
// steers a client sends while a turn works.
const MaxInline = 4

// wakeBefore reports whether a waking inject with a stamp key below key is queued: a
// turn the cancel with that key must stop is owed. Cost: one strongly consistent
// Query of the agent's inbox and state item (usually one read unit).
func (st *store) wakeBefore(ctx context.Context, agentID, key string) (bool, error) {
	items, _, err := st.inbox(ctx, agentID)
	if err != nil {
		return false, err
	}
	for _, it := range items {
		if it.Wake && it.attr != attrTurnWake && it.key() <= key {
			return true, nil
		}
	}
	return false, nil
}

// newInboxID orders the inbox by the frame's stamp key (so steers drain in the order
// the client sent them) and is unique.
func newInboxID(stampKey string) string {
	return stampKey + "-" + randomHex(4)
}

// key is the stamp key of an inbox item (its id without the random suffix).
func (it inboxItem) key() string {
	if i := strings.LastIndexByte(it.ID, '-'); i > 0 {
		return it.ID[:i]
	}
	return it.ID
}

func randomHex(nbytes int) string {
	b := make([]byte, nbytes)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// putInbox queues one inject and, when it is queued on the state item, counts the
// stimulus in the same write. It reports whether the stimulus was counted. A text of
// at most InlineTextBytes goes on the state item while fewer than MaxInline wait there
// (the agent's first one also creates the queue: one failed conditional write more,
// once); otherwise it is an item of its own. Cost: 1 write unit for an inline inject
// (the state item stays small); 1 per KB of the item otherwise, plus 1 counting it
// against the inbox's bound (reserveInbox: past it, an *InboxFullError and nothing is
// queued), plus 1 when the queue on the state item was found full.
func (st *store) putInbox(ctx context.Context, agentID string, it inboxItem) (bool, error) {
	if len(it.Text) <= InlineTextBytes {
		v, err := attributevalue.Marshal(it)
		if err != nil {
			return false, fmt.Errorf("agent: encode inbox item: %w", err)
		}
		for range 3 {
			err = st.inboxUpdate(ctx, agentID, &dynamodb.UpdateItemInput{
				UpdateExpression:                    aws.String("SET #inbox.#id = :it ADD #pending :one"),
				ConditionExpression:                 aws.String("attribute_exists(#inbox) AND size(#inbox) < :max"),
				ExpressionAttributeNames:            map[string]string{"#inbox": attrInbox, "#id": it.ID, "#pending": attrPending},
				ExpressionAttributeValues:           map[string]types.AttributeValue{":it": v, ":one": n(1), ":max": n(MaxInline)},
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			})
			old, failed := dynamoerr.CondFailedItem(err)
			if err == nil {
				return true, nil
			}
			if !failed {
				return false, fmt.Errorf("agent: queue inject for %s: %w", agentID, err)
			}
			if _, exists := old[attrInbox]; exists {
				break // the queue is full: an item of its own
			}
			// No queue yet: create it with this inject in it.
			err = st.inboxUpdate(ctx, agentID, &dynamodb.UpdateItemInput{
				UpdateExpression:          aws.String("SET #inbox = :q ADD #pending :one"),
				ConditionExpression:       aws.String("attribute_not_exists(#inbox)"),
				ExpressionAttributeNames:  map[string]string{"#inbox": attrInbox, "#pending": attrPending},
				ExpressionAttributeValues: map[string]types.AttributeValue{":q": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{it.ID: v}}, ":one": n(1)},
			})
			if err == nil {
				return true, nil
			}
			if !dynamoerr.CondFailed(err) {
				return false, fmt.Errorf("agent: queue inject for %s: %w", agentID, err)
			}
			// Another inject created it meanwhile: queue into it.
		}
	}
	item, err := attributevalue.MarshalMap(compress(it))
	if err != nil {
		return false, fmt.Errorf("agent: encode inbox item: %w", err)
	}
	for k, v := range key(agentID, inboxPrefix+it.ID) {
		item[k] = v
	}
	if err := st.reserveInbox(ctx, agentID, int64(len(it.Text)), it.Wake); err != nil {
		return false, err
	}
	if err := st.inboxPut(ctx, agentID, item); err != nil {
		_ = st.releaseInbox(context.WithoutCancel(ctx), agentID, 1, int64(len(it.Text)))
		return false, fmt.Errorf("agent: queue inject for %s: %w", agentID, err)
	}
	return false, nil
}

// compress stores the text of an inbox item of its own gzip-compressed when that makes
// the item smaller: its put and its delete are each billed 1 write unit per KB of the
// item, and text compresses, typically to a half or a third (AWS's advice for large
// attributes: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-use-s3-too.html).
func compress(it inboxItem) inboxItem {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	_, _ = zw.Write([]byte(it.Text))
	if zw.Close() != nil || b.Len() >= len(it.Text) {
		return it
	}
	it.Gz, it.Text = b.Bytes(), ""
	return it
}

// decompress restores the text of an inbox item stored compressed.
func decompress(it inboxItem) (inboxItem, error) {
	if it.Gz == nil {
		return it, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(it.Gz))
	if err == nil {
		var text []byte
		if text, err = io.ReadAll(io.LimitReader(zr, 2*MaxTextBytes)); err == nil {
			it.Text, it.Gz = string(text), nil
			return it, nil
		}
	}
	return inboxItem{}, fmt.Errorf("agent: decompress inbox item %s: %w", it.ID, err)
}

// inbox returns the agent's queued injects in arrival order — the inbox items, the
// injects queued on the state item and the recorded turn's inline wake — and the state
// item, all read strongly consistent in one Query of the agent's items from "inbox#"
// to "state".
func (st *store) inbox(ctx context.Context, agentID string) ([]inboxItem, state, error) {
	own, cur, err := st.inboxRead(ctx, agentID)
	if err != nil {
		return nil, state{}, err
	}
	return queued(own, cur), cur, nil
}

// queued is the agent's queued injects in arrival order: the inbox items of their own
// own, and those the state item cur holds (the queue, the recorded turn's inline wake).
func queued(own []inboxItem, cur state) []inboxItem {
	out := slices.Clone(own)
	for _, it := range cur.Inbox {
		out = append(out, it)
	}
	if cur.TurnWake != nil {
		out = append(out, *cur.TurnWake)
	}
	slices.SortFunc(out, func(a, b inboxItem) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// inboxRead reads the agent's inbox items of their own and its state item, in one
// strongly consistent Query (inbox).
func (st *store) inboxRead(ctx context.Context, agentID string) ([]inboxItem, state, error) {
	var out []inboxItem
	var cur state
	var start map[string]types.AttributeValue
	for {
		page, err := st.db.Query(ctx, &dynamodb.QueryInput{
			TableName:              aws.String(st.table),
			KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :lo AND :hi"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": s(pk(agentID)), ":lo": s(inboxPrefix), ":hi": s(skState),
			},
			ConsistentRead:    aws.Bool(true),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, state{}, fmt.Errorf("agent: read inbox of %s: %w", agentID, err)
		}
		for _, item := range page.Items {
			if sk, _ := item["sk"].(*types.AttributeValueMemberS); sk != nil && sk.Value == skState {
				if cur, err = decodeState(item); err != nil {
					return nil, state{}, err
				}
				continue
			}
			var it inboxItem
			if err := attributevalue.UnmarshalMap(item, &it); err != nil {
				return nil, state{}, fmt.Errorf("agent: decode inbox item: %w", err)
			}
			if it, err = decompress(it); err != nil {
				return nil, state{}, err
			}
			out = append(out, it)
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		start = page.LastEvaluatedKey
	}
	return out, cur, nil
}

// deleteInbox takes drained injects off the inbox: one DeleteItem per inbox item (and
// one write uncounting them, see releaseInbox), and one write for all those queued on
// the state item (a recorded turn's wake goes with
// the turn). Removing a missing one is no error, so a repeated drain is harmless. When
// it wrote the state item (wrote), cur is the state after that write.
func (st *store) deleteInbox(ctx context.Context, agentID string, items []inboxItem) (cur state, wrote bool, err error) {
	var remove []string
	attrs := map[string]string{"#inbox": attrInbox}
	var own, ownBytes int64
	for _, it := range items {
		if it.attr == "" {
			own, ownBytes = own+1, ownBytes+int64(len(it.Text))
		}
	}
	// Uncounted before they go: a runner dying in between drains them again, and the
	// count errs low, never leaving the inbox refusing injects it has room for.
	if err := st.releaseInbox(ctx, agentID, own, ownBytes); err != nil {
		return state{}, false, err
	}
	for _, it := range items {
		switch it.attr {
		case attrTurnWake:
		case "":
			if _, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(st.table), Key: key(agentID, inboxPrefix+it.ID)}); err != nil {
				return state{}, false, fmt.Errorf("agent: delete drained inbox item %s of %s: %w", it.ID, agentID, err)
			}
		default:
			ph := fmt.Sprintf("#q%d", len(remove))
			remove = append(remove, "#inbox."+ph)
			attrs[ph] = it.ID
		}
	}
	if len(remove) == 0 {
		return state{}, false, nil
	}
	out, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:         aws.String("REMOVE " + strings.Join(remove, ", ")),
		ExpressionAttributeNames: attrs,
		ReturnValues:             types.ReturnValueAllNew,
	})
	if err != nil {
		return state{}, false, fmt.Errorf("agent: remove drained injects of %s: %w", agentID, err)
	}
	cur, err = decodeState(out.Attributes)
	return cur, err == nil, err
}
