package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/latency"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tables"
)

// stack is the service as devstack.Start wires it — the local gateway, the stream
// pollers and every handler built by package service, as `terret dev` runs them — with
// the measurement hooks of devstack.Measure: every handler's AWS clients carry the
// meter, every handler the gateway and the pollers invoke is counted, the gateway's
// concurrency is Lambda's account default, and the log table gets its stream only
// after the seeding.
type stack struct {
	endpoint    string
	tables      tables.Names
	cfg         config.Config
	awsCfg      aws.Config // metered: every handler's clients
	meter       *meter
	pollerMeter *meter
	inv         *invocations
	replays     *replayGauge
	trace       *stormTrace      // the storm's breakdown
	raw         *dynamodb.Client // not metered: seeding and bookkeeping
	tokens      *auth.Store
	owners      *connections.Store
	dev         *devstack.Stack
	logger      *slog.Logger
	poll        time.Duration
}

// lambdaConcurrency is Lambda's default concurrency limit per account and region.
const lambdaConcurrency = 1000

type stackOptions struct {
	endpoint      string
	prefix        string
	poll          time.Duration
	maxReplays    int
	logger        *slog.Logger
	replayGauge   *replayGauge
	meter         *meter
	invocations   *invocations
	replayLimit   int
	outboundQueue int
	latency       latency.Profile // AWS-like latencies, or none
}

// newStack brings the service up on fresh tables of template.yaml, the log table
// without its stream; start adds the stream and its poller once the logs are seeded.
func newStack(ctx context.Context, o stackOptions) (*stack, error) {
	poll := cmp.Or(o.latency.PollInterval, o.poll)
	st := &stack{endpoint: o.endpoint, meter: o.meter, inv: o.invocations, replays: o.replayGauge, logger: o.logger, poll: poll, pollerMeter: newMeter(), trace: newStormTrace()}
	st.meter.onPost = st.trace.post
	st.replays.trace = st.trace
	var err error
	st.dev, err = devstack.Start(ctx, devstack.Options{
		Addr: "127.0.0.1:0", DynamoDBEndpoint: o.endpoint, TablePrefix: o.prefix, PollInterval: poll,
		ReplayLimit: o.replayLimit, MaxConcurrentReplays: o.maxReplays, OutboundQueue: o.outboundQueue,
		Observer: o.replayGauge, Logger: o.logger, Latency: o.latency,
		Measure: devstack.Measure{
			Clients: st.meter.install,
			// The pollers stand in for Lambda's event source mapping (no cost of ours):
			// their requests are metered apart, to see what DynamoDB Local spends on them.
			PollerClients: st.pollerMeter.install,
			Wrap: func(name string, h lambda.Handler) lambda.Handler {
				return st.inv.counted(name, st.trace.wrap(name, h))
			},
			// Lambda's default account concurrency rather than the local gateway's 64: at
			// its bound the gateway stops reading sockets, so the pongs of a reconnect
			// storm's clients (each subscribe holds a $default invocation for its whole
			// replay) go unread and the gateway closes healthy sockets as "ping timeout".
			MaxConcurrency: lambdaConcurrency,
			LogStreamLater: true,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("bench: start the stack at %s: %w", o.endpoint, err)
	}
	st.tables, st.cfg, st.awsCfg = st.dev.Tables, st.dev.Config, st.dev.AWSConfig
	st.raw = dynamolocal.Client(o.endpoint)
	st.tokens = auth.New(st.raw, st.tables["ConnectionsTable"])
	st.owners = connections.New(st.raw, st.tables["ConnectionsTable"])
	return st, nil
}

// start gives the log table the stream template.yaml defines, and its poller. The
// seeded logs were written before: DynamoDB Local's GetRecords slows down with the
// number of records in a shard (with the storm's 200,000 seeded records in it, a tail
// event took seconds to come through the stream), and on AWS a log written before a
// reconnect storm is read from the table, not the stream, whose cost does not depend on
// what else it holds.
func (st *stack) start(ctx context.Context) error {
	return st.dev.EnableLogStream(ctx)
}

func orInt(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func (st *stack) close() {
	if st.dev != nil {
		_ = st.dev.Close()
	}
}

// log returns a session log over the metered client (appends the bench makes on the
// runtime's behalf are part of the measured cost).
func (st *stack) log() *sessionlog.Log {
	return sessionlog.New(st.cfg.DynamoDB(st.awsCfg), st.cfg.LogTable)
}

// settle waits until the stack is quiet — no invocation started and no request made by
// any handler for a few stream polls — so that a snapshot taken next includes every
// consequence of what came before (stream wake-ups arrive one poll after the write that
// caused them). A handler may still be in flight: a deliver "watch" invocation — started
// only when a backstop wake-up leaves a mark with a sender that no retried invocation
// covers and its own looks (350 ms in all) do not see it let go — reads the ownership
// record with a growing pause (250 ms doubling up to 8 s, never past the sender's
// lease) and makes its last requests (GetItem, EndWatch) once the record is covered;
// waiting for it could cost a whole lease at every snapshot, so those requests may fall
// in a later window (settleAll waits for them).
func (st *stack) settle(ctx context.Context) {
	quiet := 4*st.poll + 150*time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	lastInv, lastReq := st.inv.total.Load(), st.meter.calls.Load()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(quiet)
		inv, req := st.inv.total.Load(), st.meter.calls.Load()
		if inv == lastInv && req == lastReq {
			return
		}
		lastInv, lastReq = inv, req
	}
}

// settleAll is settle, then waits (at most limit) until no handler is in flight either.
func (st *stack) settleAll(ctx context.Context, limit time.Duration) {
	st.settle(ctx)
	deadline := time.Now().Add(limit)
	for st.inv.inflight.Load() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	st.settle(ctx)
}

// streamLive appends an event to a session of its own and waits until the log stream's
// consumer was invoked for it: from then on the poller reads after what it has seen.
func (st *stack) streamLive(ctx context.Context) error {
	lg := sessionlog.New(st.raw, st.cfg.LogTable)
	if _, err := lg.Create(ctx, "bench-sentinel"); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for i := 0; time.Now().Before(deadline); i++ {
		if st.inv.snapshot().N["deliver (log stream)"] > 0 {
			return nil
		}
		if i%20 == 19 { // a record may have gone to a trimmed LATEST iterator: add one
			if _, err := lg.Append(ctx, "bench-sentinel", "bench/sentinel", nil); err != nil {
				return err
			}
		}
		time.Sleep(st.poll)
	}
	return errors.New("bench: the log stream's consumer never ran")
}

// drain waits until the log stream's consumer is idle: no invocation started for a
// second (at most five minutes). The logs are seeded before the pollers start, so this
// returns after a second unless DynamoDB Local answered the LATEST iterator as trimmed
// and the poller went back to the horizon (then it waits out the seeding's wake-ups).
func (st *stack) drain(ctx context.Context, progress func(string, ...any)) {
	began := time.Now()
	last := st.inv.total.Load()
	for time.Since(began) < 5*time.Minute && ctx.Err() == nil {
		time.Sleep(time.Second)
		now := st.inv.total.Load()
		if now == last {
			break
		}
		last = now
	}
	progress("stream consumer idle after %v", time.Since(began).Round(time.Millisecond))
}

// replayGauge is the delivery.Observer: it tracks how many replay reads run at once.
type replayGauge struct {
	trace     *stormTrace // hears each page read (delivery.SlotObserver)
	mu        sync.Mutex
	cur, peak int
	reads     int64
}

func (g *replayGauge) ReplayRead(start bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if start {
		g.cur++
		g.reads++
		g.peak = max(g.peak, g.cur)
	} else {
		g.cur--
	}
}

// PageRead makes the gauge a delivery.SlotObserver, for the storm's breakdown.
func (g *replayGauge) PageRead(agentID string, slotWait time.Duration, polls int, read time.Duration) {
	if g.trace != nil {
		g.trace.PageRead(agentID, slotWait, polls, read)
	}
}

// reset starts a new observation window and returns the previous peak.
func (g *replayGauge) reset() (peak int, reads int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	peak, reads = g.peak, g.reads
	g.peak, g.reads = g.cur, 0
	return peak, reads
}

// snapshot is both counters at once, for per-phase accounting.
type snapshot struct {
	at  time.Time
	ddb usage
	inv invocationCounts
}

func (st *stack) snap() snapshot {
	return snapshot{at: time.Now(), ddb: st.meter.snapshot(), inv: st.inv.snapshot()}
}

// phaseCost is what a phase cost, between two snapshots.
type phaseCost struct {
	Elapsed time.Duration
	DDB     usage
	Inv     invocationCounts
}

func (a snapshot) to(b snapshot) phaseCost {
	return phaseCost{Elapsed: b.at.Sub(a.at), DDB: b.ddb.since(a.ddb), Inv: b.inv.since(a.inv)}
}

func (c phaseCost) add(d phaseCost) phaseCost {
	out := phaseCost{Elapsed: c.Elapsed + d.Elapsed, DDB: usage{}, Inv: invocationCounts{N: map[string]int64{}, Busy: map[string]time.Duration{}}}
	for _, u := range []usage{c.DDB, d.DDB} {
		for k, s := range u {
			t := out.DDB[k]
			t.Calls += s.Calls
			t.Errors += s.Errors
			t.CondFailed += s.CondFailed
			t.TxCanceled += s.TxCanceled
			t.RRU += s.RRU
			t.WRU += s.WRU
			t.Time += s.Time
			out.DDB[k] = t
		}
	}
	for _, iv := range []invocationCounts{c.Inv, d.Inv} {
		for k, v := range iv.N {
			out.Inv.N[k] += v
		}
		for k, v := range iv.Busy {
			out.Inv.Busy[k] += v
		}
	}
	return out
}

func (c phaseCost) rru() float64 { return c.DDB.sum(dynamo).RRU }
func (c phaseCost) wru() float64 { return c.DDB.sum(dynamo).WRU }
func (c phaseCost) posts() int64 {
	return c.DDB.sum(operation("ApiGatewayManagementApi", "PostToConnection")).Calls
}
