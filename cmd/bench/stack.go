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
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/eventsource"
	"github.com/terret/terret-ws/internal/latency"
	"github.com/terret/terret-ws/internal/localgw"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tables"
)

// stack is the service wired as devstack.Start wires it — the local gateway, the
// stream pollers and every handler built by package service — except that the
// handlers get an AWS config carrying the meter, and every handler the gateway and the
// pollers invoke is counted.
type stack struct {
	endpoint    string
	tables      tables.Names
	cfg         config.Config
	awsCfg      aws.Config // metered: every handler's clients
	meter       *meter
	pollerMeter *meter
	inv         *invocations
	replays     *replayGauge
	raw         *dynamodb.Client // not metered: seeding and bookkeeping
	logStream   *types.StreamSpecification
	tokens      *auth.Store
	owners      *connections.Store
	gw          *localgw.Gateway
	poller      *eventsource.Poller
	logger      *slog.Logger
	poll        time.Duration
}

// lambdaConcurrency is Lambda's default concurrency limit per account and region.
const lambdaConcurrency = 1000

// deliverTimeout is the deliver function's timeout in template.yaml.
const deliverTimeout = 5 * time.Minute

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

// newStack creates the tables of template.yaml; start brings the service up on them.
func newStack(ctx context.Context, o stackOptions) (*stack, error) {
	defs, err := tables.Parse(terretws.Template)
	if err != nil {
		return nil, err
	}
	st := &stack{endpoint: o.endpoint, meter: o.meter, inv: o.invocations, replays: o.replayGauge, logger: o.logger, poll: o.poll}
	st.tables = tables.NamesWithPrefix(defs, o.prefix)
	st.raw = dynamolocal.Client(o.endpoint)
	// The log table is created without its stream, which enableLogStream adds once the
	// seeding is done (see there).
	for i, d := range defs {
		if d.LogicalID == "LogTable" && d.Input.StreamSpecification != nil {
			st.logStream = d.Input.StreamSpecification
			defs[i].Input.StreamSpecification = nil
		}
	}
	if st.logStream == nil {
		return nil, errors.New("bench: template.yaml's LogTable has no stream")
	}
	if err := tables.Ensure(ctx, st.raw, defs, st.tables); err != nil {
		return nil, fmt.Errorf("bench: create tables at %s: %w", o.endpoint, err)
	}
	st.tokens = auth.New(st.raw, st.tables["ConnectionsTable"])
	st.owners = connections.New(st.raw, st.tables["ConnectionsTable"])
	st.cfg.LogTable = st.tables["LogTable"]
	return st, nil
}

// enableLogStream gives the log table the stream template.yaml defines, and waits until
// the table is ACTIVE with it. The seeded logs were written before: DynamoDB Local's
// GetRecords slows down with the number of records in a shard (with the storm's 200,000
// seeded records in it, a tail event took seconds to come through the stream), and on
// AWS a log written before a reconnect storm is read from the table, not the stream,
// whose cost does not depend on what else it holds.
func (st *stack) enableLogStream(ctx context.Context) error {
	name := st.tables["LogTable"]
	_, err := st.raw.UpdateTable(ctx, &dynamodb.UpdateTableInput{TableName: aws.String(name), StreamSpecification: st.logStream})
	if err != nil {
		return fmt.Errorf("bench: enable the stream of %s: %w", name, err)
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, err := st.raw.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return err
		}
		if out.Table.TableStatus == types.TableStatusActive && aws.ToString(out.Table.LatestStreamArn) != "" {
			return nil
		}
	}
	return fmt.Errorf("bench: %s not ACTIVE with a stream after a minute", name)
}

func (st *stack) start(ctx context.Context, o stackOptions) error {
	if err := st.enableLogStream(ctx); err != nil {
		return err
	}
	var err error
	connect, message, disconnect, deliver, runner := &localgw.Deferred{}, &localgw.Deferred{}, &localgw.Deferred{}, &localgw.Deferred{}, &localgw.Deferred{}
	life := context.WithoutCancel(ctx)
	st.gw, err = localgw.Start(life, localgw.Config{
		Addr: "127.0.0.1:0",
		Routes: map[string]lambda.Handler{
			"$connect":    st.inv.counted("connect", connect),
			"$default":    st.inv.counted("message", message),
			"$disconnect": st.inv.counted("disconnect", disconnect),
		},
		Functions: map[string]lambda.Handler{
			"deliver": o.latency.Delayed(st.inv.counted("deliver (async)", deliver)),
			"runner":  o.latency.Delayed(st.inv.counted("runner", runner)),
		},
		Timeouts:     map[string]time.Duration{"deliver": deliverTimeout, "runner": 15 * time.Minute, "$default": 5 * time.Minute},
		RetryBackoff: 200 * time.Millisecond,
		// Lambda's default account concurrency rather than the local gateway's 64: at
		// its bound the gateway stops reading sockets, so the pongs of a reconnect
		// storm's clients (each subscribe holds a $default invocation for its whole
		// replay) go unread and the gateway closes healthy sockets as "ping timeout".
		MaxConcurrency: lambdaConcurrency,
		Logger:         o.logger,
	})
	if err != nil {
		return err
	}
	st.cfg = config.Config{
		LogTable:             st.tables["LogTable"],
		ConnectionsTable:     st.tables["ConnectionsTable"],
		AgentsTable:          st.tables["AgentsTable"],
		ManagementEndpoint:   st.gw.ManagementEndpoint(),
		DeliverFunction:      "deliver",
		RunnerFunction:       "runner",
		ReplayLimit:          orInt(o.replayLimit, config.DefaultReplayLimit),
		MaxConcurrentReplays: orInt(o.maxReplays, config.DefaultMaxConcurrentReplays),
		OutboundQueue:        orInt(o.outboundQueue, config.DefaultOutboundQueue),
		MainModel:            "scripted",
		TitlerModel:          "scripted",
		DynamoDBEndpoint:     o.endpoint,
		LambdaEndpoint:       st.gw.LambdaEndpoint(),
		LogLevel:             "warn",
	}
	st.awsCfg = o.latency.Install(st.meter.install(dynamolocal.Config()))
	agent, err := service.Agent(st.cfg, st.awsCfg, o.logger)
	if err != nil {
		return err
	}
	tune := service.Tuning{Observer: st.replays}
	sock := service.Socket(st.cfg, st.awsCfg, agent, o.logger, tune)
	d := service.Deliverer(st.cfg, st.awsCfg, o.logger, tune)
	connect.Bind(lambda.NewHandler(sock.Connect))
	message.Bind(lambda.NewHandler(sock.Message))
	disconnect.Bind(lambda.NewHandler(sock.Disconnect))
	deliver.Bind(lambda.NewHandler(d.Handle))
	runner.Bind(lambda.NewHandler(agent.HandleRunner))

	filter, err := eventsource.ParseFilter(`{"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"tokens#"}]}}}}`)
	if err != nil {
		return err
	}
	// The pollers stand in for Lambda's event source mapping (no cost of ours): their
	// requests are metered apart, to see what DynamoDB Local spends on them.
	st.pollerMeter = newMeter()
	pollCfg := st.pollerMeter.install(dynamolocal.Config())
	streams := dynamodbstreams.NewFromConfig(pollCfg, func(so *dynamodbstreams.Options) { so.BaseEndpoint = aws.String(o.endpoint) })
	st.poller, err = eventsource.Start(life, st.raw, streams, dynamolocal.Region, []eventsource.Mapping{
		{Function: "deliver", Handler: st.inv.counted("deliver (log stream)", deliver), TableName: st.tables["LogTable"], BatchSize: 100, MaxRetries: 10, BisectOnError: true, StartingPosition: eventsource.Latest, Timeout: deliverTimeout},
		{Function: "deliver", Handler: st.inv.counted("deliver (tokens stream)", deliver), TableName: st.tables["ConnectionsTable"], BatchSize: 100, MaxRetries: 10, BisectOnError: true, StartingPosition: eventsource.Latest, Timeout: deliverTimeout, Filters: []eventsource.Filter{filter}},
	}, eventsource.Options{PollInterval: cmp.Or(o.latency.PollInterval, o.poll), Logger: o.logger})
	return err
}

func orInt(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func (st *stack) close() {
	if st.poller != nil {
		_ = st.poller.Close()
	}
	if st.gw != nil {
		_ = st.gw.Close()
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
// caused them). A handler may still be in flight: a deliver "watch" invocation sleeps
// out a busy sender's lease (up to 30 s) and makes its last two requests (GetItem,
// EndWatch) when it wakes; waiting for it would cost the lease's length at every
// snapshot, so those two requests fall in a later window (settleAll waits for them).
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
