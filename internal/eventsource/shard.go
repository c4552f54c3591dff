package eventsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// pendingRecord is a record fetched but not yet checkpointed.
type pendingRecord struct {
	seq   string
	rec   events.DynamoDBEventRecord
	match bool // passes the mapping's filters
}

// shardWorker polls one shard in order. Its state is owned by its goroutine (after
// Start took the initial iterator).
//
// The checkpoint is the front of pending: every record before it was processed (or
// skipped by a filter, or discarded after its retries). Retrying from the checkpoint
// re-delivers pending records from memory, which is what Lambda's re-read from the
// checkpoint returns, without another GetRecords.
type shardWorker struct {
	r         *mappingRunner
	shardID   string
	parentID  string
	startType types.ShardIteratorType
	done      chan struct{} // closed once the shard is exhausted and fully processed
	log       *slog.Logger
	rng       *rand.Rand

	iter        *string
	exhausted   bool   // GetRecords returned no NextShardIterator: the shard is closed
	lastFetched string // sequence number of the last record appended to pending
	pending     []pendingRecord

	attempts        int    // failed deliveries with the current checkpoint
	limit           int    // batch size cap while bisecting, 0 when not
	bisectUntil     string // the bisection ends once this record is checkpointed
	redeliveredHead string // first record of the last fault-redelivered batch
}

func newShardWorker(r *mappingRunner, id, parent string, startType types.ShardIteratorType, ordinal int) *shardWorker {
	return &shardWorker{
		r:         r,
		shardID:   id,
		parentID:  parent,
		startType: startType,
		done:      make(chan struct{}),
		log:       r.log.With("shard_id", id),
		// Seeded per mapping and shard ordinal, so the fault decisions of a run do not
		// depend on how the shards' goroutines interleave.
		rng: rand.New(rand.NewPCG(uint64(r.opts.Faults.Seed), uint64(r.index)<<32|uint64(ordinal))),
	}
}

func (w *shardWorker) run(ctx context.Context, parentDone <-chan struct{}) {
	if parentDone != nil {
		select {
		case <-parentDone:
		case <-ctx.Done():
			return
		}
	}
	w.log.Debug("shard polling started", "iterator_type", string(w.startType))
	batchSize := w.r.m.BatchSize
	for ctx.Err() == nil {
		if w.iter == nil && !w.exhausted {
			if err := w.refreshIterator(ctx); err != nil {
				if ctx.Err() == nil {
					w.log.Warn("get shard iterator failed", "error", err.Error())
					sleep(ctx, w.r.opts.RetryBackoff)
				}
				continue
			}
		}
		if !w.exhausted && len(w.pending) < batchSize {
			if err := w.fill(ctx); err != nil {
				if ctx.Err() == nil {
					w.log.Warn("get records failed", "error", err.Error())
					sleep(ctx, w.r.opts.RetryBackoff)
				}
				continue
			}
		}
		if len(w.pending) == 0 {
			if w.exhausted {
				w.log.Info("shard exhausted")
				close(w.done)
				return
			}
			sleep(ctx, w.r.opts.PollInterval)
			continue
		}
		w.processBatch(ctx)
	}
}

// refreshIterator gets an iterator that continues after the last fetched record, or
// at the starting position when nothing was fetched yet.
func (w *shardWorker) refreshIterator(ctx context.Context) error {
	in := &dynamodbstreams.GetShardIteratorInput{
		StreamArn:         aws.String(w.r.streamARN),
		ShardId:           aws.String(w.shardID),
		ShardIteratorType: w.startType,
	}
	if w.lastFetched != "" {
		in.ShardIteratorType = types.ShardIteratorTypeAfterSequenceNumber
		in.SequenceNumber = aws.String(w.lastFetched)
	}
	out, err := w.r.streams.GetShardIterator(ctx, in)
	if err != nil {
		var gone *types.ResourceNotFoundException
		if errors.As(err, &gone) {
			// The shard aged out of the stream: nothing more can be read from it.
			w.log.Warn("shard no longer in the stream", "error", err.Error())
			w.exhausted = true
			return nil
		}
		return fmt.Errorf("eventsource: get shard iterator for %s: %w", w.shardID, err)
	}
	w.iter = out.ShardIterator
	if w.iter == nil {
		w.exhausted = true
	}
	return nil
}

// fill tops pending up towards one batch, stopping at the shard's current end.
func (w *shardWorker) fill(ctx context.Context) error {
	batchSize := w.r.m.BatchSize
	for len(w.pending) < batchSize && !w.exhausted && w.iter != nil {
		out, err := w.r.streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{
			ShardIterator: w.iter,
			Limit:         aws.Int32(int32(min(maxGetRecordsLimit, batchSize-len(w.pending)))),
		})
		if err != nil {
			var expired *types.ExpiredIteratorException
			var trimmed *types.TrimmedDataAccessException
			switch {
			case errors.As(err, &expired):
				w.iter = nil // refreshed after the last fetched record
				return nil
			case errors.As(err, &trimmed):
				// Records after our position aged out before we read them: Lambda
				// loses them too. Restart at the oldest record still there.
				if w.lastFetched == "" {
					// DynamoDB Local answers a LATEST iterator of a fresh shard this way
					// on its first records; starting at the horizon loses nothing.
					w.log.Debug("iterator trimmed before the first read; restarting at the horizon")
				} else {
					w.log.Error("records trimmed before they were read", "after_sequence_number", w.lastFetched)
				}
				w.iter, w.lastFetched, w.startType = nil, "", types.ShardIteratorTypeTrimHorizon
				return nil
			}
			return fmt.Errorf("eventsource: get records from %s: %w", w.shardID, err)
		}
		for _, rec := range out.Records {
			seq := ""
			if rec.Dynamodb != nil {
				seq = aws.ToString(rec.Dynamodb.SequenceNumber)
			}
			w.lastFetched = seq
			ev, err := toEventRecord(rec, w.r.region, w.r.streamARN)
			if err != nil {
				w.log.Error("record cannot be converted; skipped", "sequence_number", seq, "error", err.Error())
				continue
			}
			w.pending = append(w.pending, pendingRecord{seq: seq, rec: ev, match: matchAny(w.r.m.Filters, ev)})
		}
		w.iter = out.NextShardIterator
		if w.iter == nil {
			w.exhausted = true
		}
		if len(out.Records) == 0 {
			break
		}
	}
	return nil
}

// processBatch delivers one batch from the checkpoint and applies the outcome.
func (w *shardWorker) processBatch(ctx context.Context) {
	m := &w.r.m
	faults := w.r.opts.Faults
	n := min(len(w.pending), m.BatchSize)
	if w.limit > 0 {
		n = min(n, w.limit)
	}
	if n > 1 && w.chance(faults.Split) {
		cut := 1 + w.rng.IntN(n-1)
		w.log.Debug("fault: batch split", "records", n, "delivered", cut)
		n = cut
	}
	batch := w.pending[:n]

	var records []events.DynamoDBEventRecord
	index := make(map[string]int, n) // delivered sequence number → position in batch
	for i, p := range batch {
		if p.match {
			records = append(records, p.rec)
			index[p.seq] = i
		}
	}
	if len(records) == 0 {
		w.advance(n) // nothing passed the filters: checkpoint without an invocation
		return
	}
	if len(records) > 1 && w.chance(faults.Reorder) {
		shuffled := append([]events.DynamoDBEventRecord(nil), records...)
		w.rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if sameOrder(shuffled, records) { // make the fault observable
			shuffled[0], shuffled[1] = shuffled[1], shuffled[0]
		}
		w.log.Debug("fault: batch reordered", "records", len(records))
		records = shuffled
	}

	failedAt, whole, err := w.deliver(ctx, records, index)
	if failedAt < 0 {
		if w.pending[0].seq != w.redeliveredHead && w.chance(faults.Redeliver) {
			// Not checkpointed: the next round delivers these records again.
			w.redeliveredHead = w.pending[0].seq
			w.log.Debug("fault: batch will be redelivered", "records", len(records))
			return
		}
		w.advance(n)
		return
	}

	// Records before the lowest failed one succeeded: checkpoint up to it (Lambda's
	// ReportBatchItemFailures semantics), then retry from the failed record.
	if failedAt > 0 {
		w.advance(failedAt)
	}
	remaining := n - failedAt
	if whole && m.BisectOnError && remaining > 1 {
		w.limit = remaining / 2
		if w.bisectUntil == "" {
			w.bisectUntil = w.pending[remaining-1].seq
		}
		w.log.Warn("batch failed; bisecting", "records", remaining, "next_batch_size", w.limit, "error", err.Error())
		sleep(ctx, w.r.opts.RetryBackoff)
		return
	}
	w.attempts++
	if m.MaxRetries != RetryForever && w.attempts > m.MaxRetries {
		w.discard(w.pending[:remaining], err)
		w.advance(remaining)
		return
	}
	backoff := min(w.r.opts.RetryBackoff<<min(w.attempts-1, 16), maxRetryBackoff)
	w.log.Warn("batch failed; retrying", "records", remaining, "attempt", w.attempts,
		"first_sequence_number", w.pending[0].seq, "backoff_ms", backoff.Milliseconds(), "error", err.Error())
	sleep(ctx, backoff)
}

// deliver invokes the handler. It returns failedAt -1 on success, otherwise the
// position in the batch from which records must be retried, whether the batch failed
// as a whole (handler error, malformed response, unknown itemIdentifier), and why.
func (w *shardWorker) deliver(ctx context.Context, records []events.DynamoDBEventRecord, index map[string]int) (failedAt int, whole bool, err error) {
	m := &w.r.m
	payload, err := json.Marshal(events.DynamoDBEvent{Records: records})
	if err != nil {
		return 0, true, fmt.Errorf("eventsource: marshal event: %w", err)
	}
	lc := &lambdacontext.LambdaContext{
		AwsRequestID:       newRequestID(),
		InvokedFunctionArn: fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", w.r.region, w.r.opts.AccountID, m.Function),
	}
	ictx, cancel := context.WithTimeout(lambdacontext.NewContext(context.WithoutCancel(ctx), lc), m.Timeout)
	defer cancel()
	start := time.Now()
	out, err := callHandler(ictx, m.Handler, payload)
	elapsed := time.Since(start)
	if err == nil && elapsed > m.Timeout {
		err = fmt.Errorf("task timed out after %.2f seconds", m.Timeout.Seconds())
	}
	w.log.Debug("invoked", "request_id", lc.AwsRequestID, "records", len(records), "duration_ms", elapsed.Milliseconds(), "ok", err == nil)
	if err != nil {
		return 0, true, err
	}
	var resp events.DynamoDBEventResponse
	if s := strings.TrimSpace(string(out)); s != "" && s != "null" {
		if err := json.Unmarshal(out, &resp); err != nil {
			return 0, true, fmt.Errorf("malformed response: %w", err)
		}
	}
	if len(resp.BatchItemFailures) == 0 {
		return -1, false, nil
	}
	lowest := -1
	for _, f := range resp.BatchItemFailures {
		i, ok := index[f.ItemIdentifier]
		if !ok {
			return 0, true, fmt.Errorf("itemIdentifier %q is not a sequence number of the batch", f.ItemIdentifier)
		}
		if lowest < 0 || i < lowest {
			lowest = i
		}
	}
	return lowest, false, fmt.Errorf("handler reported %d batch item failure(s) from sequence number %s", len(resp.BatchItemFailures), w.pending[lowest].seq)
}

func callHandler(ctx context.Context, h lambda.Handler, payload []byte) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h.Invoke(ctx, payload)
}

// advance checkpoints the first k pending records.
func (w *shardWorker) advance(k int) {
	for _, p := range w.pending[:k] {
		if p.seq == w.bisectUntil {
			w.limit, w.bisectUntil = 0, ""
		}
	}
	w.pending = append(w.pending[:0:0], w.pending[k:]...)
	w.attempts = 0
}

// discard gives up on records after MaxRetries; the log line and OnDiscard are what
// an on-failure destination would receive.
func (w *shardWorker) discard(batch []pendingRecord, cause error) {
	var records []events.DynamoDBEventRecord
	for _, p := range batch {
		if p.match {
			records = append(records, p.rec)
		}
	}
	w.log.Error("batch discarded after retries", "records", len(records), "attempts", w.attempts,
		"first_sequence_number", batch[0].seq, "last_sequence_number", batch[len(batch)-1].seq, "error", cause.Error())
	if fn := w.r.opts.OnDiscard; fn != nil {
		fn(Discarded{
			Function:  w.r.m.Function,
			TableName: w.r.m.TableName,
			StreamARN: w.r.streamARN,
			ShardID:   w.shardID,
			Records:   records,
			Attempts:  w.attempts,
			Err:       cause,
		})
	}
}

func (w *shardWorker) chance(p float64) bool {
	return p > 0 && w.rng.Float64() < p
}

func sameOrder(a, b []events.DynamoDBEventRecord) bool {
	for i := range a {
		if a[i].Change.SequenceNumber != b[i].Change.SequenceNumber {
			return false
		}
	}
	return true
}
