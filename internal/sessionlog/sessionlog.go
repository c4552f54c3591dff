// Package sessionlog is the durable session log: one DynamoDB item per event, keyed by
// (session_id, seq). Appends are conditional puts, so seq starts at 0, is gapless and
// never duplicated, however many writers in however many processes append at once.
//
// Gaplessness follows from one rule: a writer only ever puts seq n+1 after it has seen
// seq n exist (read back from the table, or written by itself), and the put is
// conditional on seq n+1 not existing yet. Events are never deleted (but all at once, by a
// session reset or delete, package sessiondata, after which a new log starts at seq 0,
// and by retention, which expires a prefix of seqs 1 … n-1 and never seq 0 nor the
// tip: Expire, docs/architecture.md "Retention"), so a conflict only means another
// writer got n+1 first; the loser re-reads the tip and tries again. A tip this Log remembers is lowered by every read that reaches the log's
// end, so a log started over is appended to at its own tip.
//
// The epoch: every log, new after each reset or delete, is named by the id of its seq 0
// (its epoch), and every event's item carries it (attribute "epoch"). An append is
// built on a tip in an epoch and lands only in that epoch's log: AppendIn says how
// (Fence) — under a lease a reset or delete waits out (the runner's), a plain put;
// otherwise a put in one transaction with a check of seq 0's id. A writer that finds
// the log's epoch is not the one it built on gets ErrEpoch and has appended nothing.
//
// Cost: one append of an event under 1 KB is one PutItem, 1 write request unit, under
// a lease, when the writer's cached tip is current (a single active writer, as during
// a turn); a writer whose cache is stale pays one strongly consistent Query (1 read
// unit) per conflict. Without a lease it is a TransactWriteItems of the put and the
// check of seq 0: 2 write units for each (up to 1 KB), 4 in all.
package sessionlog

import (
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/metrics"
)

// MaxEnvelopeBytes bounds the JSON envelope of one event. An event is delivered as one
// WebSocket frame, and API Gateway delivers at most 128 KiB per message, so a larger
// envelope could never reach a client; Append refuses it with ErrTooLarge. Producers of
// unbounded content (tool results, model text) must bound it before appending — see
// docs/events.md, "Size bound".
const MaxEnvelopeBytes = 128 * 1024

// TypeSessionCreated is the type of the event at seq 0 of every session.
const TypeSessionCreated = "session/created"

// Errors returned by this package.
var (
	ErrNotFound = errors.New("sessionlog: session not found")
	ErrTooLarge = errors.New("sessionlog: event envelope exceeds 128 KiB")
	ErrConflict = errors.New("sessionlog: seq already taken")
	ErrInvalid  = errors.New("sessionlog: invalid event")
	// ErrEpoch: the log's epoch (seq 0's id) is not the one the append was built on —
	// the session was reset or deleted since the writer read it. Nothing was appended.
	ErrEpoch = errors.New("sessionlog: the log is not the one the writer read (reset or deleted)")
	// ErrLeaseEnded: an append under a lease (Fence.Until) came after the lease's end.
	// Nothing was appended.
	ErrLeaseEnded = errors.New("sessionlog: the writer's lease has ended")
)

// Event is the durable envelope, serialized to clients as-is.
type Event struct {
	ID        string          `json:"id"`
	SessionID string          `json:"session_id"`
	Seq       int64           `json:"seq"`
	At        string          `json:"at"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
	// Stamp is an appender's mark kept with the event's item (attribute "stamp") and
	// never sent: the stamp key of the client frame a policy/updated serves
	// (AppendStamped). "" for an event appended without one.
	Stamp string `json:"-"`
	// Expires is the item's TTL attribute expires_at, unix seconds, set by Expire
	// once retention applies to the event; 0: it never expires. Never sent.
	Expires int64 `json:"-"`
	// Epoch is the epoch of the log the event is in: the id of its seq 0 (attribute
	// "epoch"; seq 0's is its own id). "" for an event appended before events carried
	// it. Never sent: hello carries the epoch.
	Epoch string `json:"-"`
}

// EpochAttr is the log items' attribute naming their log's epoch.
const EpochAttr = "epoch"

// Fence is what an append is built on, and how it makes sure it lands in that log
// (AppendIn).
type Fence struct {
	// Epoch is the epoch of the log the writer read (Event.Epoch, or Epoch). With it,
	// an append that finds another epoch returns ErrEpoch. "": the writer holds no
	// knowledge of the log, and the append takes the epoch it finds (a tip cached
	// from an erased log is refused and read again, never appended on).
	Epoch string
	// Until, when set, is the end of a lease the writer holds that a reset or delete
	// of the session takes over and waits out before it erases the log (the runner
	// lease), less what the writer allows for clock skew: the log cannot change epoch
	// before it, so the put is a plain PutItem, 1 write unit. It is sent only before
	// Until (else ErrLeaseEnded, nothing sent); the writer chooses Until so that the
	// rest of its lease leaves a put room to land. Epoch is required with it.
	// Zero: the put is in a TransactWriteItems with a ConditionCheck that seq 0's id
	// is the epoch, 4 write units.
	Until time.Time
}

// Expired reports whether the event has expired at now: DynamoDB TTL deletes such an
// item lazily (within days), so every reader treats one still present as gone.
func (e Event) Expired(now time.Time) bool { return e.Expires > 0 && e.Expires <= now.Unix() }

// ExpiresAttr is the log items' TTL attribute (template.yaml, LogTable).
const ExpiresAttr = "expires_at"

// TimeFormat is the envelope's `at`: UTC, ISO 8601, always six fractional digits.
const TimeFormat = "2006-01-02T15:04:05.000000Z"

// API is the part of the DynamoDB client the log uses.
type API interface {
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	// TransactWriteItems: an append without a lease, with its check of the epoch.
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Log appends to and reads the log table. It is safe for concurrent use.
type Log struct {
	api   API
	table string
	now   func() time.Time

	mu   sync.Mutex
	tips map[string]mark // highest seq this instance has seen exist, per session, with its epoch
}

// mark is a cached tip: seq exists in the log of epoch ("": not known).
type mark struct {
	seq   int64
	epoch string
}

// New returns a Log over table.
func New(api API, table string) *Log {
	return &Log{api: api, table: table, now: time.Now, tips: map[string]mark{}}
}

// Create appends session/created at seq 0 unless the session exists. It reports whether
// this call created it; two racing first connects create it exactly once.
func (l *Log) Create(ctx context.Context, agentID string) (created bool, err error) {
	ev, err := l.newEvent(agentID, 0, TypeSessionCreated, nil)
	if err != nil {
		return false, err
	}
	ev.Epoch = ev.ID
	err = l.put(ctx, ev)
	switch {
	case errors.Is(err, ErrConflict):
		l.observe(agentID, 0, "")
		return false, nil
	case err != nil:
		return false, err
	}
	l.mu.Lock() // a new log: whatever was cached is of a log since erased
	l.tips[agentID] = mark{seq: 0, epoch: ev.Epoch}
	l.mu.Unlock()
	appended()
	return true, nil
}

// Append adds one event with the next free seq and returns it. payload is marshalled
// to JSON (nil becomes {}; a json.RawMessage is taken as it is). It returns ErrNotFound
// if the session has no session/created yet, ErrTooLarge if the envelope would exceed
// MaxEnvelopeBytes, and ErrInvalid for an empty type or a payload that is not an object.
//
// Append is for a log's only writer (load tools, tests): its put is not fenced, so a
// tip this Log cached from a log since reset or deleted would be appended on. The
// runtime appends with AppendIn. Cost: 1 write unit.
func (l *Log) Append(ctx context.Context, agentID, typ string, payload any) (Event, error) {
	return l.appendNext(ctx, agentID, nil, typ, payload, "")
}

// AppendStamped is Append with stamp kept on the event's item (Event.Stamp), read back
// by Read, never part of the envelope. Cost: Append's.
func (l *Log) AppendStamped(ctx context.Context, agentID, typ string, payload any, stamp string) (Event, error) {
	return l.appendNext(ctx, agentID, nil, typ, payload, stamp)
}

// AppendIn is Append (with stamp, as AppendStamped; "" for none) fenced by f: the event
// lands only in the log of f.Epoch — or, with no epoch given, of the epoch its tip was
// read in — and ErrEpoch says the log is another one now (reset or deleted since):
// nothing was appended, and the writer's work on the old log is to be dropped. See
// Fence for the two ways, and their costs.
func (l *Log) AppendIn(ctx context.Context, agentID string, f Fence, typ string, payload any, stamp string) (Event, error) {
	if !f.Until.IsZero() && f.Epoch == "" {
		return Event{}, fmt.Errorf("%w: an append under a lease needs its epoch", ErrInvalid)
	}
	return l.appendNext(ctx, agentID, &f, typ, payload, stamp)
}

// appendNext puts an event at the tip's next seq until it succeeds. A put that finds
// the seq taken (ErrConflict) backs off with jitter, so that writers in a burst stop
// colliding on each seq, reads the tip again and retries; any other error ends the
// append. With f, the tip is the one of f's epoch (read again when the cached one is
// of another), and a tip read that finds another epoch ends it with ErrEpoch.
func (l *Log) appendNext(ctx context.Context, agentID string, f *Fence, typ string, payload any, stamp string) (Event, error) {
	raw, err := encodePayload(payload)
	if err != nil {
		return Event{}, err
	}
	tip, ok := l.cached(agentID)
	if !ok || (f != nil && (tip.epoch == "" || (f.Epoch != "" && tip.epoch != f.Epoch))) {
		if tip, err = l.tip(ctx, agentID, f != nil); err != nil {
			return Event{}, gone(f, err)
		}
	}
	for attempt := 0; ; attempt++ {
		if f != nil && f.Epoch != "" && tip.epoch != f.Epoch {
			return Event{}, fmt.Errorf("%w: %s is at epoch %s, the writer's is %s", ErrEpoch, agentID, tip.epoch, f.Epoch)
		}
		ev, err := l.newEvent(agentID, tip.seq+1, typ, raw)
		if err != nil {
			return Event{}, err
		}
		ev.Stamp = stamp
		if f != nil { // an unfenced put names no epoch: its cached tip may be of an erased log
			ev.Epoch = tip.epoch
		}
		err = l.putIn(ctx, ev, f)
		if err == nil {
			l.observe(agentID, ev.Seq, ev.Epoch)
			appended()
			return ev, nil
		}
		moved := errors.Is(err, errEpochMoved)
		switch {
		case moved:
			// The tip was of an erased log: read the log as it is, its epoch from
			// seq 0 itself. With the writer's own epoch, the check above refuses it.
			l.Forget(agentID)
		case errors.Is(err, ErrConflict), errors.Is(err, errBusy):
			if err := backoff(ctx, attempt); err != nil {
				return Event{}, err
			}
		default:
			return Event{}, err
		}
		if tip, err = l.tip(ctx, agentID, f != nil); err != nil {
			return Event{}, gone(f, err)
		}
		if moved {
			if tip.epoch, err = l.Epoch(ctx, agentID); err != nil {
				return Event{}, gone(f, err)
			}
		}
	}
}

// gone is err, or ErrEpoch as well when the log is not there any more (being erased)
// for a writer that read it in an epoch.
func gone(f *Fence, err error) error {
	if f != nil && f.Epoch != "" && errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrEpoch, err)
	}
	return err
}

// AppendAt puts an event at exactly seq. It returns ErrConflict if seq is taken. The
// caller must know seq-1 exists (it read or wrote it), or the log would get a gap; so
// seq must be ≥ 1 — seq 0 is written only by Create. Like Append, it is not fenced:
// the runtime uses AppendInAt.
func (l *Log) AppendAt(ctx context.Context, agentID string, seq int64, typ string, payload any) (Event, error) {
	return l.appendAt(ctx, agentID, nil, seq, typ, payload, "")
}

// AppendInAtStamped is AppendInAt with stamp kept on the event's item, as
// AppendStamped keeps it: a compare-and-append for a writer that read the log of
// f.Epoch up to seq-1 and wants its event logged only if nothing came after what it
// read (ErrConflict), and only in that log (ErrEpoch).
func (l *Log) AppendInAtStamped(ctx context.Context, agentID string, f Fence, seq int64, typ string, payload any, stamp string) (Event, error) {
	if f.Epoch == "" {
		return Event{}, fmt.Errorf("%w: AppendInAtStamped needs the writer's epoch", ErrInvalid)
	}
	return l.appendAt(ctx, agentID, &f, seq, typ, payload, stamp)
}

// AppendInAt is AppendAt fenced by f (AppendIn): seq-1 is an event the writer read in
// the log of f.Epoch, which is required. It returns ErrEpoch when the log is another
// one now, and ErrConflict when seq is taken in it.
func (l *Log) AppendInAt(ctx context.Context, agentID string, f Fence, seq int64, typ string, payload any) (Event, error) {
	if f.Epoch == "" {
		return Event{}, fmt.Errorf("%w: AppendInAt needs the writer's epoch", ErrInvalid)
	}
	return l.appendAt(ctx, agentID, &f, seq, typ, payload, "")
}

func (l *Log) appendAt(ctx context.Context, agentID string, f *Fence, seq int64, typ string, payload any, stamp string) (Event, error) {
	if seq < 1 {
		return Event{}, fmt.Errorf("%w: AppendAt seq %d", ErrInvalid, seq)
	}
	raw, err := encodePayload(payload)
	if err != nil {
		return Event{}, err
	}
	ev, err := l.newEvent(agentID, seq, typ, raw)
	if err != nil {
		return Event{}, err
	}
	ev.Stamp = stamp
	if f != nil {
		ev.Epoch = f.Epoch
	}
	for attempt := 0; ; attempt++ {
		err := l.putIn(ctx, ev, f)
		switch {
		case err == nil:
			l.observe(agentID, seq, ev.Epoch)
			appended()
			return ev, nil
		case errors.Is(err, errEpochMoved):
			l.Forget(agentID)
			return Event{}, fmt.Errorf("%w: %s seq %d", ErrEpoch, agentID, seq)
		case errors.Is(err, ErrConflict):
			l.observe(agentID, seq, ev.Epoch)
			return Event{}, err
		case errors.Is(err, errBusy):
			if err := backoff(ctx, attempt); err != nil {
				return Event{}, err
			}
		default:
			return Event{}, err
		}
	}
}

// appended counts one event written to the log: metric EventsAppended on the process's
// default recorder (an EMF line on stdout, no call; nothing without a recorder).
func appended() { metrics.Add("EventsAppended", metrics.Count, 1) }

// Tip returns the highest seq of the session, read strongly consistent. It returns
// ErrNotFound if the session has no events.
func (l *Log) Tip(ctx context.Context, agentID string) (int64, error) {
	m, err := l.tip(ctx, agentID, false)
	return m.seq, err
}

// tip reads the tip and its epoch (the tip item's; with needEpoch, seq 0's when the tip
// item predates the attribute: one more read unit).
func (l *Log) tip(ctx context.Context, agentID string, needEpoch bool) (mark, error) {
	before, had := l.cached(agentID)
	out, err := l.api.Query(ctx, &dynamodb.QueryInput{
		TableName:              aws.String(l.table),
		KeyConditionExpression: aws.String("session_id = :s"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":s": &types.AttributeValueMemberS{Value: agentID},
		},
		ProjectionExpression:     aws.String("seq, #ep, id"),
		ExpressionAttributeNames: map[string]string{"#ep": EpochAttr},
		ScanIndexForward:         aws.Bool(false),
		Limit:                    aws.Int32(1),
		ConsistentRead:           aws.Bool(true),
	})
	if err != nil {
		return mark{}, fmt.Errorf("sessionlog: tip of %s: %w", agentID, err)
	}
	if len(out.Items) == 0 {
		return mark{}, fmt.Errorf("%w: %s", ErrNotFound, agentID)
	}
	seq, err := numberAttr(out.Items[0], "seq")
	if err != nil {
		return mark{}, err
	}
	m := mark{seq: seq, epoch: epochOf(out.Items[0], seq)}
	if m.epoch == "" && needEpoch {
		if m.epoch, err = l.Epoch(ctx, agentID); err != nil {
			return mark{}, err
		}
	}
	l.observeTip(agentID, m, before, had)
	return m, nil
}

// epochOf is the epoch an item of the log names: its epoch attribute, or its own id
// at seq 0; "" for an item from before the attribute.
func epochOf(item map[string]types.AttributeValue, seq int64) string {
	if v, ok := item[EpochAttr].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	if v, ok := item["id"].(*types.AttributeValueMemberS); ok && seq == 0 {
		return v.Value
	}
	return ""
}

// Epoch returns the log's epoch: the id of its session/created event (seq 0). It is
// the same for the life of the log and new when the log is created again after a
// reset or a delete, since every event id is random; hello carries it. It returns
// ErrNotFound if the session has no events. Cost: one strongly consistent Query of one
// item, 1 read unit (a Query rather than a GetItem, so that every function that reads
// the log may read it with the permissions it has).
func (l *Log) Epoch(ctx context.Context, agentID string) (string, error) {
	out, err := l.api.Query(ctx, &dynamodb.QueryInput{
		TableName:              aws.String(l.table),
		KeyConditionExpression: aws.String("session_id = :s AND seq = :z"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":s": &types.AttributeValueMemberS{Value: agentID},
			":z": &types.AttributeValueMemberN{Value: "0"},
		},
		ProjectionExpression: aws.String("id"),
		Limit:                aws.Int32(1),
		ConsistentRead:       aws.Bool(true),
	})
	if err != nil {
		return "", fmt.Errorf("sessionlog: epoch of %s: %w", agentID, err)
	}
	if len(out.Items) == 0 {
		return "", fmt.Errorf("%w: %s", ErrNotFound, agentID)
	}
	id, ok := out.Items[0]["id"].(*types.AttributeValueMemberS)
	if !ok {
		return "", fmt.Errorf("%w: %s seq 0 has no id", ErrInvalid, agentID)
	}
	return id.Value, nil
}

// Forget drops what this Log remembers of the session (its cached tip): the next
// append reads the tip again. A reset or delete of the session calls it in its own
// process; other processes' caches are why a reset fences the runner first.
func (l *Log) Forget(agentID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.tips, agentID)
}

// Read returns up to limit events with seq ≥ from, in seq order, read strongly
// consistent so an event whose append returned is always visible. It pages through
// DynamoDB's 1 MB query pages internally. An empty result means from is past the tip.
func (l *Log) Read(ctx context.Context, agentID string, from int64, limit int) ([]Event, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []Event
	var start map[string]types.AttributeValue
	end := false // the read reached the log's end
	before, had := l.cached(agentID)
	for len(out) < limit {
		page, err := l.api.Query(ctx, &dynamodb.QueryInput{
			TableName:              aws.String(l.table),
			KeyConditionExpression: aws.String("session_id = :s AND seq >= :f"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":s": &types.AttributeValueMemberS{Value: agentID},
				":f": &types.AttributeValueMemberN{Value: strconv.FormatInt(from, 10)},
			},
			Limit:             aws.Int32(int32(min(limit-len(out), 1000))),
			ConsistentRead:    aws.Bool(true),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return out, fmt.Errorf("sessionlog: read %s from %d: %w", agentID, from, err)
		}
		for _, item := range page.Items {
			ev, err := FromItem(item)
			if err != nil {
				return out, err
			}
			out = append(out, ev)
		}
		if len(page.LastEvaluatedKey) == 0 {
			end = true
			break
		}
		start = page.LastEvaluatedKey
	}
	switch n := len(out); {
	case n > 0 && end:
		l.observeTip(agentID, mark{seq: out[n-1].Seq, epoch: out[n-1].Epoch}, before, had) // the tip when read
	case n > 0:
		l.observe(agentID, out[n-1].Seq, out[n-1].Epoch)
	}
	return out, nil
}

// Retained returns where a reader from seq from finds the log it may read: from
// itself unless retention has expired events there, else the lowest seq above them
// whose event is retained. Seq 0 (session/created, which carries the epoch) never
// expires, but a reader from 0 is pulled forward with the rest when seq 1 has expired:
// the retained log has no gap. Expired events still present (TTL deletes lazily)
// count as gone. Retention expires a prefix of seqs 1 … n, never the tip (Expire), so
// the answer is at most the tip; from past the tip is returned as it is.
//
// Cost: one strongly consistent Query of one item, 1 read unit, when nothing has
// expired at from (the common case); else pages over the expired events still present
// (at most the few days TTL takes to delete them), 1 read unit per 4 KB.
func (l *Log) Retained(ctx context.Context, agentID string, from int64) (int64, error) {
	first := max(from, 1)
	var start map[string]types.AttributeValue
	for limit := int32(1); ; limit = 100 {
		page, err := l.api.Query(ctx, &dynamodb.QueryInput{
			TableName:              aws.String(l.table),
			KeyConditionExpression: aws.String("session_id = :s AND seq >= :f"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":s": &types.AttributeValueMemberS{Value: agentID},
				":f": &types.AttributeValueMemberN{Value: strconv.FormatInt(first, 10)},
			},
			ProjectionExpression:     aws.String("seq, #e"),
			ExpressionAttributeNames: map[string]string{"#e": ExpiresAttr},
			Limit:                    aws.Int32(limit),
			ConsistentRead:           aws.Bool(true),
			ExclusiveStartKey:        start,
		})
		if err != nil {
			return 0, fmt.Errorf("sessionlog: retained %s from %d: %w", agentID, from, err)
		}
		now := l.now()
		for _, item := range page.Items {
			seq, err := numberAttr(item, "seq")
			if err != nil {
				return 0, err
			}
			var exp int64
			if _, ok := item[ExpiresAttr]; ok {
				if exp, err = numberAttr(item, ExpiresAttr); err != nil {
					return 0, err
				}
			}
			if (Event{Expires: exp}).Expired(now) {
				continue
			}
			if seq == first {
				return from, nil // nothing expired at from
			}
			return seq, nil
		}
		if len(page.LastEvaluatedKey) == 0 {
			return from, nil // nothing at or past first: from is past the tip
		}
		start = page.LastEvaluatedKey
	}
}

// Expire sets the TTL of the event at seq to expiresAt (unix seconds): DynamoDB deletes
// it some time after, and every reader treats it as gone from then on (Event.Expired).
// Only the runner calls it, for events its checkpoint has passed, never for seq 0 nor
// the tip (docs/architecture.md, "Retention"); an event no longer there (a reset or
// delete meanwhile) is left alone. Cost: one UpdateItem, 1 write unit per 1 KB of the
// item, for free deletion later.
func (l *Log) Expire(ctx context.Context, agentID string, seq, expiresAt int64) error {
	if seq <= 0 {
		return fmt.Errorf("%w: %s seq %d never expires", ErrInvalid, agentID, seq)
	}
	_, err := l.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(l.table),
		Key: map[string]types.AttributeValue{
			"session_id": &types.AttributeValueMemberS{Value: agentID},
			"seq":        &types.AttributeValueMemberN{Value: strconv.FormatInt(seq, 10)},
		},
		UpdateExpression:         aws.String("SET #e = :e"),
		ConditionExpression:      aws.String("attribute_exists(seq)"),
		ExpressionAttributeNames: map[string]string{"#e": ExpiresAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":e": &types.AttributeValueMemberN{Value: strconv.FormatInt(expiresAt, 10)},
		},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sessionlog: expire %s seq %d: %w", agentID, seq, err)
	}
	return nil
}

// MarshalJSON writes the envelope with its fields in the spec's order.
func (e Event) MarshalJSON() ([]byte, error) {
	payload := e.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("{}")
	}
	type envelope Event // no MarshalJSON, same field order
	env := envelope(e)
	env.Payload = payload
	return marshal(env)
}

// marshal is json.Marshal without HTML escaping: "<", ">" and "&" take one byte in an
// event, as in the frame a client sent, so the size bounds count what goes on the wire
// and no frame within the protocol's bounds grows past them (a client frame of 256 "<"
// stays 256 bytes, not 1,536).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Item is the DynamoDB item of the event. The payload is kept as its JSON text so the
// envelope is delivered byte for byte as it was appended.
func (e Event) Item() map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		"session_id": &types.AttributeValueMemberS{Value: e.SessionID},
		"seq":        &types.AttributeValueMemberN{Value: strconv.FormatInt(e.Seq, 10)},
		"id":         &types.AttributeValueMemberS{Value: e.ID},
		"at":         &types.AttributeValueMemberS{Value: e.At},
		"type":       &types.AttributeValueMemberS{Value: e.Type},
		"payload":    &types.AttributeValueMemberS{Value: string(e.Payload)},
	}
	if e.Stamp != "" {
		item["stamp"] = &types.AttributeValueMemberS{Value: e.Stamp}
	}
	if e.Expires > 0 {
		item[ExpiresAttr] = &types.AttributeValueMemberN{Value: strconv.FormatInt(e.Expires, 10)}
	}
	if e.Epoch != "" {
		item[EpochAttr] = &types.AttributeValueMemberS{Value: e.Epoch}
	}
	return item
}

// FromItem decodes an item of the log table. It returns ErrInvalid if an attribute is
// missing or mistyped.
func FromItem(item map[string]types.AttributeValue) (Event, error) {
	var ev Event
	var err error
	str := func(name string) string {
		if v, ok := item[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		if err == nil {
			err = fmt.Errorf("%w: attribute %q missing or not a string", ErrInvalid, name)
		}
		return ""
	}
	ev.SessionID = str("session_id")
	ev.ID = str("id")
	ev.At = str("at")
	ev.Type = str("type")
	ev.Payload = json.RawMessage(str("payload"))
	if v, ok := item["stamp"].(*types.AttributeValueMemberS); ok {
		ev.Stamp = v.Value
	}
	if err != nil {
		return Event{}, err
	}
	if _, ok := item[ExpiresAttr]; ok {
		if ev.Expires, err = numberAttr(item, ExpiresAttr); err != nil {
			return Event{}, err
		}
	}
	if ev.Seq, err = numberAttr(item, "seq"); err != nil {
		return Event{}, err
	}
	ev.Epoch = epochOf(item, ev.Seq)
	return ev, nil
}

func numberAttr(item map[string]types.AttributeValue, name string) (int64, error) {
	v, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("%w: attribute %q missing or not a number", ErrInvalid, name)
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: attribute %q: %v", ErrInvalid, name, err)
	}
	return n, nil
}

// EpochCheck is a transaction's check that agentID's log is still the one of epoch
// (its seq 0's id is epoch): a write in the same transaction lands only while the log
// has not been reset or deleted since the writer read epoch: a reset or delete erases
// seq 0 (the log's last item it erases) before the agent's other items (its inbox), and
// writes the new log's seq 0 only after, so such a write either precedes the erase of
// the agent's items or is refused. Cost in a transaction: 2 write units.
func (l *Log) EpochCheck(agentID, epoch string) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(l.table),
		Key: map[string]types.AttributeValue{
			"session_id": &types.AttributeValueMemberS{Value: agentID},
			"seq":        &types.AttributeValueMemberN{Value: "0"},
		},
		ConditionExpression:       aws.String("id = :e"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":e": &types.AttributeValueMemberS{Value: epoch}},
	}}
}

// errEpochMoved: a fenced put's check found seq 0's id is not the event's epoch (or no
// seq 0). errBusy: a transaction was cancelled by another one on the same items.
var (
	errEpochMoved = errors.New("sessionlog: seq 0 is not the epoch's")
	errBusy       = errors.New("sessionlog: transaction conflict")
)

// putIn puts ev as f says: unfenced (nil) or under a lease, a plain conditional put;
// otherwise in one transaction with a check that seq 0's id is ev.Epoch.
func (l *Log) putIn(ctx context.Context, ev Event, f *Fence) error {
	switch {
	case f == nil:
		return l.put(ctx, ev)
	case !f.Until.IsZero():
		if !time.Now().Before(f.Until) {
			return fmt.Errorf("%w: %s seq %d", ErrLeaseEnded, ev.SessionID, ev.Seq)
		}
		return l.put(ctx, ev)
	}
	_, err := l.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		l.EpochCheck(ev.SessionID, ev.Epoch),
		{Put: &types.Put{
			TableName:           aws.String(l.table),
			Item:                ev.Item(),
			ConditionExpression: aws.String("attribute_not_exists(seq)"),
		}},
	}})
	switch {
	case err == nil:
		return nil
	case dynamoerr.TxCondFailed(err, 0):
		return fmt.Errorf("%w: %s seq 0 is not %s", errEpochMoved, ev.SessionID, ev.Epoch)
	case dynamoerr.TxCondFailed(err, 1):
		return fmt.Errorf("%w: %s seq %d", ErrConflict, ev.SessionID, ev.Seq)
	case dynamoerr.TxConflict(err):
		return fmt.Errorf("%w: %s seq %d", errBusy, ev.SessionID, ev.Seq)
	}
	return fmt.Errorf("sessionlog: append %s seq %d: %w", ev.SessionID, ev.Seq, err)
}

func (l *Log) put(ctx context.Context, ev Event) error {
	_, err := l.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(l.table),
		Item:                ev.Item(),
		ConditionExpression: aws.String("attribute_not_exists(seq)"),
	})
	if dynamoerr.CondFailed(err) {
		return fmt.Errorf("%w: %s seq %d", ErrConflict, ev.SessionID, ev.Seq)
	}
	if err != nil {
		return fmt.Errorf("sessionlog: append %s seq %d: %w", ev.SessionID, ev.Seq, err)
	}
	return nil
}

func (l *Log) newEvent(agentID string, seq int64, typ string, payload json.RawMessage) (Event, error) {
	if agentID == "" || typ == "" {
		return Event{}, fmt.Errorf("%w: empty session id or type", ErrInvalid)
	}
	if len(payload) == 0 {
		payload = json.RawMessage("{}")
	}
	ev := Event{ID: newID(), SessionID: agentID, Seq: seq, At: l.now().UTC().Format(TimeFormat), Type: typ, Payload: payload}
	b, err := ev.MarshalJSON()
	if err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(b) > MaxEnvelopeBytes {
		return Event{}, fmt.Errorf("%w: %s %s is %d bytes", ErrTooLarge, agentID, typ, len(b))
	}
	return ev, nil
}

func encodePayload(payload any) (json.RawMessage, error) {
	var raw json.RawMessage
	switch p := payload.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case json.RawMessage:
		var buf bytes.Buffer
		if err := json.Compact(&buf, p); err != nil {
			return nil, fmt.Errorf("%w: payload is not JSON: %v", ErrInvalid, err)
		}
		raw = buf.Bytes()
	default:
		b, err := marshal(p)
		if err != nil {
			return nil, fmt.Errorf("%w: payload: %v", ErrInvalid, err)
		}
		raw = b
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%w: payload is not a JSON object", ErrInvalid)
	}
	return raw, nil
}

func (l *Log) cached(agentID string) (mark, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.tips[agentID]
	return t, ok
}

// maxCachedTips bounds the tip cache of a long-lived instance; forgetting a tip only
// costs one Query on the next append to that session.
const maxCachedTips = 10000

// observe records that seq exists in the log of epoch ("": not known). The cache only
// moves forward within one epoch; a seq of another epoch replaces it (the cached one
// is of a log since erased).
func (l *Log) observe(agentID string, seq int64, epoch string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.tips) >= maxCachedTips {
		clear(l.tips)
	}
	t, ok := l.tips[agentID]
	switch {
	case !ok, epoch != "" && t.epoch != "" && epoch != t.epoch:
		l.tips[agentID] = mark{seq: seq, epoch: epoch}
	case seq > t.seq:
		l.tips[agentID] = mark{seq: seq, epoch: cmp.Or(epoch, t.epoch)}
	case t.epoch == "" && epoch != "" && seq == t.seq:
		l.tips[agentID] = mark{seq: seq, epoch: epoch}
	}
}

// observeTip records m, the tip a strongly consistent read just found, given what
// the cache held when the read began (before, had): the cache takes it even when
// lower, unless it moved meanwhile within the same epoch (an append of this process
// landed during the read, which the read may have missed). A cached tip above the
// log's — left from a log since reset or deleted (package sessiondata) — would make
// the next append skip seqs; one below costs a conflict and a re-read at most.
func (l *Log) observeTip(agentID string, m mark, before mark, had bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.tips) >= maxCachedTips {
		clear(l.tips)
	}
	if cur, ok := l.tips[agentID]; ok && (!had || cur != before) && cur.seq > m.seq &&
		(cur.epoch == m.epoch || cur.epoch == "" || m.epoch == "") {
		return // moved during the read: keep the newer
	}
	l.tips[agentID] = m
}

// backoff sleeps a random time up to 1 ms × 2^attempt, at most 25 ms.
func backoff(ctx context.Context, attempt int) error {
	ceiling := min(time.Millisecond<<min(attempt, 5), 25*time.Millisecond)
	t := time.NewTimer(rand.N(ceiling + 1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("sessionlog: append: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}

func newID() string {
	b := make([]byte, 16)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}
