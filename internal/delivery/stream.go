package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// maxParallelSessions bounds how many sessions one stream batch pumps at once.
const maxParallelSessions = 16

// streamBudget bounds the time the stream consumer spends on one session: the live tail
// of a keeping-up client takes milliseconds; a backlog or a slow client is handed to an
// asynchronous invocation so the shard's other sessions are not held up.
const streamBudget = time.Second

// Input is one invocation of the deliver function, decoded once (DecodeInput) into
// the envelope of its kind — never told apart by probing the JSON: a StreamInput, a
// SweepInput or a KickInput. Its dynamic type is its kind.
type Input interface{ input() }

// StreamInput is a DynamoDB stream batch: the log table's, or token changes from the
// connections table.
type StreamInput struct{ Records []events.DynamoDBEventRecord }

// SweepInput is a schedule's sweep (Sweep, e.g. "tokens"), served by the caller
// (service's DeliverHandler).
type SweepInput struct{ Sweep string }

// KickInput is an asynchronous Kick.
type KickInput struct{ Kick }

func (StreamInput) input() {}
func (SweepInput) input()  {}
func (KickInput) input()   {}

// wireInput is the JSON of every kind of Input, decoded in one pass; a kind is present
// when its own field is.
type wireInput struct {
	Records []events.DynamoDBEventRecord `json:"Records"`
	Sweep   string                       `json:"sweep"`
	Kick
}

// ErrInput is an invocation that is not exactly one kind of Input.
var ErrInput = errors.New("delivery: unknown invocation")

// DecodeInput decodes raw once into the envelope of its kind; one that is none, or more
// than one, is ErrInput.
func DecodeInput(raw json.RawMessage) (Input, error) {
	var w wireInput
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("delivery: decode invocation: %w", err)
	}
	var kinds []Input
	if w.Records != nil {
		kinds = append(kinds, StreamInput{Records: w.Records})
	}
	if w.Sweep != "" {
		kinds = append(kinds, SweepInput{Sweep: w.Sweep})
	}
	if w.Kind != "" {
		kinds = append(kinds, KickInput{Kick: w.Kick})
	}
	if len(kinds) != 1 {
		return nil, fmt.Errorf("%w: %d kinds in %.100s", ErrInput, len(kinds), raw)
	}
	return kinds[0], nil
}

// Handle serves every invocation of the deliver function but a sweep: a DynamoDB stream
// batch or an asynchronous Kick (HandleInput).
func (d *Deliverer) Handle(ctx context.Context, raw json.RawMessage) (any, error) {
	in, err := DecodeInput(raw)
	if err != nil {
		return nil, err
	}
	return d.HandleInput(ctx, in)
}

// HandleInput serves a decoded invocation: a StreamInput or a KickInput.
func (d *Deliverer) HandleInput(ctx context.Context, in Input) (any, error) {
	switch in := in.(type) {
	case StreamInput:
		return d.HandleStream(ctx, events.DynamoDBEvent{Records: in.Records}), nil
	case KickInput:
		return nil, d.HandleKick(ctx, in.Kick)
	}
	return nil, fmt.Errorf("%w: %T is not the deliver core's", ErrInput, in)
}

// HandleStream wakes the sender of every session in the batch and closes connections
// whose token was rotated or revoked. It reports failures per record (the records of a
// session whose pump failed), never failing the whole batch, so one bad session cannot
// block a shard.
func (d *Deliverer) HandleStream(ctx context.Context, batch events.DynamoDBEvent) events.DynamoDBEventResponse {
	bySession := map[string][]sessionlog.Event{}
	seqNums := map[string][]string{}
	var failures []events.DynamoDBBatchItemFailure
	fail := func(ids ...string) {
		for _, id := range ids {
			failures = append(failures, events.DynamoDBBatchItemFailure{ItemIdentifier: id})
		}
	}
	for _, r := range batch.Records {
		id := r.Change.SequenceNumber
		if pk, ok := r.Change.Keys["pk"]; ok && pk.DataType() == events.DataTypeString {
			if agentID := auth.AgentFromKey(pk.String()); agentID != "" {
				if err := d.revoke(ctx, agentID, r); err != nil {
					d.logger.ErrorContext(ctx, "revoke", "agent_id", agentID, "error", err)
					fail(id)
				}
			}
			continue
		}
		if r.EventName != string(events.DynamoDBOperationTypeInsert) {
			continue // the log is append-only; nothing else is news
		}
		ev, err := sessionlog.FromImage(r.Change.NewImage)
		if err != nil {
			d.logger.ErrorContext(ctx, "undecodable log record", "sequence_number", id, "error", err)
			continue // a poison record can never succeed; the log still has the event
		}
		bySession[ev.SessionID] = append(bySession[ev.SessionID], ev)
		seqNums[ev.SessionID] = append(seqNums[ev.SessionID], id)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxParallelSessions)
	for session, hints := range bySession {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := d.pumpSeats(ctx, session, hints, streamBudget); err != nil {
				d.logger.ErrorContext(ctx, "pump", "agent_id", session, "error", err)
				mu.Lock()
				fail(seqNums[session]...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return events.DynamoDBEventResponse{BatchItemFailures: failures}
}

// revoke closes agentID's owner connection if a token change dropped the token it
// presented, and each observer connection whose token it dropped. Rotation reaches connections already open this way.
func (d *Deliverer) revoke(ctx context.Context, agentID string, r events.DynamoDBEventRecord) error {
	dropped := auth.Dropped(hashKeys(r.Change.OldImage), hashKeys(r.Change.NewImage))
	if len(dropped) == 0 {
		if m, ok := wasReset(r); ok {
			return d.closeReset(ctx, agentID, m)
		}
		return nil
	}
	oerr := d.closeObservers(ctx, agentID, dropped, protocol.CodeUnauthorized, message(protocol.CodeUnauthorized))
	o, err := d.store.Owner(ctx, agentID)
	if errors.Is(err, connections.ErrNotFound) {
		return oerr
	}
	if err != nil {
		return errors.Join(err, oerr)
	}
	for _, h := range dropped {
		if h == o.TokenHash {
			return errors.Join(d.Close(ctx, o, protocol.CodeUnauthorized, message(protocol.CodeUnauthorized)), oerr)
		}
	}
	return oerr
}

func hashKeys(image map[string]events.DynamoDBAttributeValue) []string {
	v, ok := image["hashes"]
	if !ok || v.DataType() != events.DataTypeMap {
		return nil
	}
	var out []string
	for k := range v.Map() {
		out = append(out, k)
	}
	return out
}
