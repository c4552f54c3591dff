// Package eventsource is a local stand-in for Lambda's DynamoDB Streams event source
// mapping: it polls a table's stream and invokes a lambda.Handler with the same
// DynamoDBEvent batches, and applies the same response semantics
// (ReportBatchItemFailures, retries, bisection, discard after MaximumRetryAttempts,
// event filtering).
//
// Guarantees, as on Lambda: delivery is at least once; records of one shard are
// delivered in stream order and never checkpointed past a record that was not
// processed successfully; shards are polled concurrently, a child shard only after
// its parent is exhausted. Test-only fault injection (Options.Faults) adds the
// duplicates, splits and reorderings a consumer must tolerate.
package eventsource

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// StreamsAPI is the part of the DynamoDB Streams client the poller uses.
type StreamsAPI interface {
	DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// TablesAPI is the part of the DynamoDB client the poller uses, to find a table's
// LatestStreamArn.
type TablesAPI interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

var (
	_ StreamsAPI = (*dynamodbstreams.Client)(nil)
	_ TablesAPI  = (*dynamodb.Client)(nil)
)

// StartingPosition is where a mapping starts reading the shards that exist when it
// starts. Shards that appear later are always read from their beginning, as Lambda
// does.
type StartingPosition string

// Starting positions.
const (
	TrimHorizon StartingPosition = "TRIM_HORIZON" // every record still in the stream
	Latest      StartingPosition = "LATEST"       // records written after Start returned
)

// Defaults and limits.
const (
	DefaultBatchSize        = 100
	MaxBatchSize            = 10000 // Lambda's limit for DynamoDB Streams
	DefaultMaxRetries       = 5
	RetryForever            = -1
	DefaultTimeout          = 30 * time.Second
	DefaultPollInterval     = 50 * time.Millisecond
	DefaultDescribeInterval = 2 * time.Second
	DefaultRetryBackoff     = 100 * time.Millisecond
	DefaultAccountID        = "000000000000"

	maxRetryBackoff    = 5 * time.Second
	maxGetRecordsLimit = 1000 // GetRecords' own cap
)

// Sentinel errors of Start.
var (
	ErrInvalidMapping = errors.New("eventsource: invalid mapping")
	ErrNoStream       = errors.New("eventsource: table has no stream enabled")
)

// Mapping is one event source mapping: a table's stream feeding one function.
type Mapping struct {
	// Function names the function in logs and in InvokedFunctionArn.
	Function string
	// Handler gets events.DynamoDBEvent JSON and may return events.DynamoDBEventResponse
	// JSON (ReportBatchItemFailures is always on). An empty or null result is success.
	Handler   lambda.Handler
	TableName string
	// BatchSize is the most records per invocation (default 100, at most 10000).
	BatchSize int
	// MaxRetries is how often a failing batch is retried before it is discarded
	// (logged and passed to Options.OnDiscard, what an on-failure destination would
	// get). Zero means DefaultMaxRetries; RetryForever (-1) never discards.
	MaxRetries int
	// BisectOnError splits a batch whose invocation failed as a whole in two and
	// retries the halves, isolating a poison record; halving is not counted as a retry.
	BisectOnError bool
	// Filters are FilterCriteria: records matching none are skipped and checkpointed
	// without an invocation. No filters pass every record.
	Filters []Filter
	// StartingPosition defaults to TrimHorizon.
	StartingPosition StartingPosition
	// Timeout is the invocation deadline (default 30s). A handler returning after it
	// has failed, as Lambda would have killed it.
	Timeout time.Duration
}

// Options tune all mappings of a Poller. Zero fields take the defaults.
type Options struct {
	// PollInterval is the wait after a GetRecords that returned nothing (default 50ms).
	PollInterval time.Duration
	// DescribeInterval is how often each stream is described again to pick up new
	// shards (default 2s).
	DescribeInterval time.Duration
	// RetryBackoff is the wait before the first retry of a failed batch; it doubles
	// with each further retry, up to 5s (default 100ms).
	RetryBackoff time.Duration
	// AccountID builds InvokedFunctionArn (default 000000000000).
	AccountID string
	Logger    *slog.Logger
	// OnDiscard, when set, is called with every batch discarded after MaxRetries, on
	// the shard's goroutine (so keep it short).
	OnDiscard func(Discarded)
	Faults    Faults
}

// Faults injects the misbehaviour Lambda's event source mapping is allowed, so tests
// can prove consumers tolerate it. All off by default; decisions come from a random
// source seeded by Seed (per mapping and shard), so a run is reproducible.
type Faults struct {
	Seed int64
	// Redeliver is the probability that a successfully processed batch is delivered
	// again (at most once in a row for the same first record).
	Redeliver float64
	// Split is the probability that a batch is cut short at a random point; the rest
	// is delivered in following batches.
	Split float64
	// Reorder is the probability that the records within a delivered batch are
	// shuffled (DynamoDB Streams only orders records per item).
	Reorder float64
}

// Discarded is a batch given up after MaxRetries.
type Discarded struct {
	Function  string
	TableName string
	StreamARN string
	ShardID   string
	// Records are the records given up, in stream order (filtered-out records
	// excluded).
	Records  []events.DynamoDBEventRecord
	Attempts int
	Err      error
}

// Poller runs the mappings passed to Start until Close.
type Poller struct {
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	stopWatch func() bool
	closeOnce sync.Once
	log       *slog.Logger
}

// Start resolves every mapping's stream (DescribeTable → LatestStreamArn), takes the
// initial shard iterators (so LATEST means "after Start returned"), and polls in the
// background until Close or the cancellation of ctx. region becomes each record's
// awsRegion and the region of InvokedFunctionArn.
func Start(ctx context.Context, tables TablesAPI, streams StreamsAPI, region string, ms []Mapping, opts Options) (*Poller, error) {
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.DescribeInterval <= 0 {
		opts.DescribeInterval = DefaultDescribeInterval
	}
	if opts.RetryBackoff <= 0 {
		opts.RetryBackoff = DefaultRetryBackoff
	}
	if opts.AccountID == "" {
		opts.AccountID = DefaultAccountID
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	log := opts.Logger.With("component", "eventsource")

	runners := make([]*mappingRunner, 0, len(ms))
	for i, m := range ms {
		m, err := withDefaults(m)
		if err != nil {
			return nil, err
		}
		out, err := tables.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(m.TableName)})
		if err != nil {
			return nil, fmt.Errorf("eventsource: describe table %s: %w", m.TableName, err)
		}
		arn := aws.ToString(out.Table.LatestStreamArn)
		if arn == "" || out.Table.StreamSpecification == nil || !aws.ToBool(out.Table.StreamSpecification.StreamEnabled) {
			return nil, fmt.Errorf("%w: %s", ErrNoStream, m.TableName)
		}
		r := &mappingRunner{
			m:         m,
			index:     i,
			region:    region,
			streamARN: arn,
			streams:   streams,
			opts:      opts,
			log:       log.With("function", m.Function, "table", m.TableName),
			shards:    map[string]*shardWorker{},
		}
		initial, err := r.discover(ctx, true)
		if err != nil {
			return nil, err
		}
		for _, w := range initial {
			if err := w.refreshIterator(ctx); err != nil {
				return nil, err
			}
		}
		r.initial = initial
		runners = append(runners, r)
		r.log.Info("mapping started", "stream_arn", arn, "shards", len(initial),
			"starting_position", string(m.StartingPosition), "batch_size", m.BatchSize, "filters", filterStrings(m.Filters))
	}

	// Handlers in flight when the poller stops finish within their own deadlines
	// rather than seeing a cancellation the real service would never send.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Poller{cancel: cancel, log: log}
	for _, r := range runners {
		r.wg = &p.wg
		p.wg.Add(1)
		go r.run(pctx)
	}
	p.stopWatch = context.AfterFunc(ctx, func() { _ = p.Close() })
	return p, nil
}

// Close stops polling and waits for the mappings' goroutines, including an invocation
// in flight (bounded by its Timeout). Records fetched but not yet processed are
// simply not delivered; nothing is checkpointed durably, so a new Poller starts over
// from its StartingPosition.
func (p *Poller) Close() error {
	p.closeOnce.Do(func() {
		p.stopWatch()
		p.cancel()
		p.wg.Wait()
		p.log.Info("poller closed")
	})
	return nil
}

func withDefaults(m Mapping) (Mapping, error) {
	if m.Handler == nil {
		return m, fmt.Errorf("%w: %q has no handler", ErrInvalidMapping, m.Function)
	}
	if m.TableName == "" {
		return m, fmt.Errorf("%w: %q has no table", ErrInvalidMapping, m.Function)
	}
	if m.Function == "" {
		m.Function = m.TableName + "-consumer"
	}
	if m.BatchSize <= 0 {
		m.BatchSize = DefaultBatchSize
	}
	if m.BatchSize > MaxBatchSize {
		return m, fmt.Errorf("%w: %q batch size %d exceeds %d", ErrInvalidMapping, m.Function, m.BatchSize, MaxBatchSize)
	}
	if m.MaxRetries == 0 {
		m.MaxRetries = DefaultMaxRetries
	}
	if m.MaxRetries < RetryForever {
		return m, fmt.Errorf("%w: %q max retries %d (use -1 for forever)", ErrInvalidMapping, m.Function, m.MaxRetries)
	}
	switch m.StartingPosition {
	case "":
		m.StartingPosition = TrimHorizon
	case TrimHorizon, Latest:
	default:
		return m, fmt.Errorf("%w: %q starting position %q", ErrInvalidMapping, m.Function, m.StartingPosition)
	}
	if m.Timeout <= 0 {
		m.Timeout = DefaultTimeout
	}
	return m, nil
}

// mappingRunner discovers the shards of one mapping's stream and runs a worker per
// shard. shards is only touched by Start and then by the runner's goroutine.
type mappingRunner struct {
	m         Mapping
	index     int
	region    string
	streamARN string
	streams   StreamsAPI
	opts      Options
	log       *slog.Logger
	wg        *sync.WaitGroup

	shards  map[string]*shardWorker
	initial []*shardWorker
	ordinal int
}

func (r *mappingRunner) run(ctx context.Context) {
	defer r.wg.Done()
	for _, w := range r.initial {
		r.startWorker(ctx, w)
	}
	t := time.NewTicker(r.opts.DescribeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		found, err := r.discover(ctx, false)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("describe stream failed", "stream_arn", r.streamARN, "error", err.Error())
			}
			continue
		}
		for _, w := range found {
			r.log.Info("new shard", "shard_id", w.shardID, "parent_shard_id", w.parentID)
			r.startWorker(ctx, w)
		}
	}
}

// startWorker runs w once its parent, if this mapping knows it, is exhausted.
func (r *mappingRunner) startWorker(ctx context.Context, w *shardWorker) {
	var parentDone <-chan struct{}
	if parent, ok := r.shards[w.parentID]; ok && w.parentID != "" {
		parentDone = parent.done
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		w.run(ctx, parentDone)
	}()
}

// discover describes the whole stream and returns workers for shards not seen
// before, parents before children.
func (r *mappingRunner) discover(ctx context.Context, initial bool) ([]*shardWorker, error) {
	var shards []types.Shard
	var start *string
	for {
		out, err := r.streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(r.streamARN), ExclusiveStartShardId: start})
		if err != nil {
			return nil, fmt.Errorf("eventsource: describe stream %s: %w", r.streamARN, err)
		}
		shards = append(shards, out.StreamDescription.Shards...)
		start = out.StreamDescription.LastEvaluatedShardId
		if start == nil {
			break
		}
	}
	var found []*shardWorker
	for _, s := range shards {
		id := aws.ToString(s.ShardId)
		if _, ok := r.shards[id]; ok || id == "" {
			continue
		}
		startType := types.ShardIteratorTypeTrimHorizon
		if initial && r.m.StartingPosition == Latest {
			startType = types.ShardIteratorTypeLatest
		}
		w := newShardWorker(r, id, aws.ToString(s.ParentShardId), startType, r.ordinal)
		r.ordinal++
		r.shards[id] = w
		found = append(found, w)
	}
	// DescribeStream lists shards roughly by creation, but nothing promises a parent
	// precedes its child; order them so parents start (and are waited for) first.
	return parentsFirst(found), nil
}

func parentsFirst(ws []*shardWorker) []*shardWorker {
	byID := make(map[string]*shardWorker, len(ws))
	for _, w := range ws {
		byID[w.shardID] = w
	}
	out := make([]*shardWorker, 0, len(ws))
	placed := make(map[string]bool, len(ws))
	var place func(w *shardWorker)
	place = func(w *shardWorker) {
		if placed[w.shardID] {
			return
		}
		placed[w.shardID] = true
		if p, ok := byID[w.parentID]; ok {
			place(p)
		}
		out = append(out, w)
	}
	for _, w := range ws {
		place(w)
	}
	return out
}

// newRequestID returns a random UUID, the shape of Lambda request ids.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return strings.Join([]string{h[0:8], h[8:12], h[12:16], h[16:20], h[20:32]}, "-")
}

// sleep waits d or until ctx is done; false means ctx is done.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
