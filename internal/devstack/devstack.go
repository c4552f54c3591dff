// Package devstack runs the whole service in one process, as `terret dev` does: a
// DynamoDB endpoint (DynamoDB Local started here, or one given), the tables of
// template.yaml, the local API Gateway (WebSocket routes, @connections and the Lambda
// Invoke API) and a poller for each DynamoDB stream feeding the stream consumers —
// every handler wired by package service exactly as the deployed functions are, with
// their template.yaml timeouts.
package devstack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/config/useraws"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/emulator"
	"github.com/terret/terret-ws/internal/eventsource"
	"github.com/terret/terret-ws/internal/latency"
	"github.com/terret/terret-ws/internal/localgw"
	"github.com/terret/terret-ws/internal/localqueue"
	"github.com/terret/terret-ws/internal/pausehook"
	"github.com/terret/terret-ws/internal/schedule"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/service/agentservice"
	"github.com/terret/terret-ws/internal/service/turns"
	"github.com/terret/terret-ws/internal/stack"
	"github.com/terret/terret-ws/internal/tables"
	"github.com/terret/terret-ws/internal/timer"
	"github.com/terret/terret-ws/internal/webhook"
)

// Options configure a Stack. Zero values take the spec's and dev-profile.md's defaults.
type Options struct {
	Addr                 string // default 127.0.0.1:3001; port 0 picks a free one
	DynamoDBEndpoint     string // "" starts DynamoDB Local in memory
	PingInterval         time.Duration
	ReplayLimit          int
	MaxConcurrentReplays int
	OutboundQueue        int
	MaxObservers         int // observer connections per agent; 0: config.DefaultMaxObservers
	Approvals            bool
	TablePrefix          string // default "terret-": tables terret-log, terret-connections, terret-agents
	Root                 string // repository root holding the pinned DynamoDB Local; "" finds it
	PollInterval         time.Duration
	TokenSweep           time.Duration      // how often expired tokens are revoked (AWS: every minute; terret dev: 30 s); 0: never
	TokenClock           func() time.Time   // the token sweep's clock (default time.Now), for tests
	QuotaSweep           time.Duration      // how often quota-deferred wakes are started (AWS: every minute; terret dev: 5 s); 0: never
	AgentClock           func() time.Time   // the agent runtime's clock (default time.Now), for tests
	Faults               eventsource.Faults // stream fault injection, for tests
	Observer             delivery.Observer  // replay reads, for tests and metrics
	ReplayPage           int                // events per replay read (default 1000)
	Pages                http.Handler       // served at every other GET path (the web page)
	GatewayLimits        bool               // the gateway enforces API Gateway's 32 KB frame and 128 KB message limits
	// OrderWait bounds how long a numbered frame waits for its predecessor (default
	// socket.OrderWait), in process only: tests lengthen it to park frames across a
	// revocation or a delete.
	OrderWait time.Duration
	// IdleTimeout and MaxConnectionDuration are the gateway's connection limits
	// (default API Gateway's: 10 minutes without a client frame, 2 hours in all).
	IdleTimeout           time.Duration
	MaxConnectionDuration time.Duration
	// CloudFrontIdleTimeout, when set, also closes a connection to which nothing was
	// sent for that long, as CloudFront in front of the API does after 10 minutes
	// (localgw.Config.CloudFrontIdleTimeout); zero models the raw execute-api URL.
	CloudFrontIdleTimeout time.Duration
	// NoKeepaliveRoute leaves out the keepalive route, as a deployment from before the
	// extension: the frame reaches $default and is answered bad_frame (tests of the
	// checks that look for the route, such as `terret smoke`).
	NoKeepaliveRoute bool
	Logger           *slog.Logger
	LambdaEmulator   *LambdaEmulator // run the built bootstraps under aws-lambda-rie (emulated.go)
	// Profile is the default profile's file, read again when it changes; "" serves the
	// demo profile. Bedrock and api_key_secret use the default AWS credentials.
	Profile string

	// DynamoDB Local started here (no DynamoDBEndpoint): DataDir holds its database
	// across restarts ("" keeps it in memory); InstallDir is where it is installed when
	// no checkout has it ("" never installs).
	DataDir    string
	InstallDir string
	// Progress gets a line as each start step begins (DynamoDB Local's install and
	// JVM, the tables, the functions' build, the gateway) and one every ProgressEvery
	// (default 10 s) while a step waits, so that a slow start is never silent; nil
	// discards them. ProgressEvery is shorter only in tests.
	Progress      io.Writer
	ProgressEvery time.Duration
	// QuickJVM starts DynamoDB Local's JVM for a quick start over peak speed
	// (dynamolocal.Options.QuickStart): `terret dev` sets it.
	QuickJVM bool
	// Latency adds AWS-like latencies where the local stack is faster than AWS
	// (`terret dev --aws-latency`): the handlers' AWS clients, the functions the
	// Invoke API runs, and the stream polling (unless PollInterval is set).
	Latency latency.Profile
	Measure Measure // metering, invocation counting and seeding hooks (cmd/bench; measure.go)

	// Listener, if set, is served instead of a listener on Addr (tests that shape the
	// gateway's sockets).
	Listener net.Listener
	// Pause holds the agent runtime at named points (agent.Pause*), for tests. The
	// emulated functions (LambdaEmulator), in other processes, reach it over loopback
	// HTTP (package pausehook).
	Pause func(point, agentID string)
	// Webhook tunes the webhook attempts (tests shorten the backoff and the attempts);
	// zero: the deployed function's.
	Webhook webhook.Options
}

// KeepaliveRoute is the route key of the client's keepalive frame,
// {"type":"keepalive"}: on AWS a MOCK integration answers it (no Lambda, no DynamoDB)
// with the template's route response, and it keeps the connection from the idle
// timeouts of API Gateway and of CloudFront.
const KeepaliveRoute = "keepalive"

// mockRoutes are the gateway's MOCK routes and the frame each answers, as template.yaml
// declares them (stack.MockRoutes: the template is their one definition); none with
// noKeepalive, as a deployment from before the extension.
func mockRoutes(noKeepalive bool) ([]string, map[string]string, error) {
	if noKeepalive {
		return nil, nil, nil
	}
	s, err := stack.Parse(terretws.Template)
	if err != nil {
		return nil, nil, err
	}
	replies, err := s.MockRoutes()
	if err != nil {
		return nil, nil, err
	}
	if _, ok := replies[KeepaliveRoute]; !ok {
		return nil, nil, fmt.Errorf("devstack: template.yaml has no MOCK route %q", KeepaliveRoute)
	}
	return slices.Sorted(maps.Keys(replies)), replies, nil
}

// Stack is a running local service.
type Stack struct {
	DynamoDBEndpoint string
	Region           string
	Tables           tables.Names
	Config           config.Config
	AWSConfig        aws.Config // the handlers' clients' configuration
	// Credentials are what DynamoDBEndpoint takes: the DynamoDB Local started here has
	// its own (dynamolocal.Options.Private); an endpoint given by URL the fixed local ones.
	Credentials dynamolocal.Credentials

	sweep  *sweeper
	gw     *localgw.Gateway
	poller *eventsource.Poller
	ddb    *dynamolocal.Server
	emu    *emulator.Emulator
	pause  *pausehook.Server // Options.Pause for the emulated functions
	// webhookQueue is the local WebhookQueue (package localqueue).
	webhookQueue *localqueue.Queue

	http lateHandler // the agent paths over HTTP (package httpapi), bound once built

	schedules *schedule.Local // the local engine of schedules (schedules.go)

	measure    Measure
	quotaSweep *sweeper
	timer      *timer.Local               // approval expiries (package timer)
	logStream  *types.StreamSpecification // held back (Measure.LogStreamLater)
	logMapping eventsource.Mapping
	logPoller  *eventsource.Poller
	// The webhook consumer's log stream mapping, held back under Measure.LogStreamLater
	// until EnableWebhooks, and its poller.
	webhookHeld   eventsource.Mapping
	webhookPoller *eventsource.Poller
	pollerOpts    eventsource.Options
}

// Timeout is the invocation deadline the gateway gives a route key ($default) or a
// function name (runner).
func (s *Stack) Timeout(name string) time.Duration { return s.gw.Timeout(name) }

// WebSocketURL is the base of the agents' socket URLs: WebSocketURL()+"/agents/ID/ws".
func (s *Stack) WebSocketURL() string { return s.gw.WebSocketURL() }

// ErrListen is a listen address that cannot be bound; Start checks it before it starts
// anything else.
var ErrListen = errors.New("devstack: cannot listen")

// Start brings the stack up and returns once it serves. Close stops everything it
// started. Besides the handlers' own logs it logs one line per client frame and per turn
// start and end (a failed turn at Error), and lowers the gateway's and the stream
// poller's Info lines to Debug.
func Start(ctx context.Context, o Options) (st *Stack, err error) {
	if o.Addr == "" {
		o.Addr = "127.0.0.1:3001"
	}
	if o.TablePrefix == "" {
		o.TablePrefix = "terret-"
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	// Bound first, so that a taken address fails in milliseconds, not after DynamoDB Local.
	ln := o.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", o.Addr); err != nil {
			return nil, fmt.Errorf("%w on %s: %v", ErrListen, o.Addr, err)
		}
	}
	// The user's own AWS credentials for Bedrock and secrets, never the fixed local
	// ones DynamoDB Local takes.
	userAWS, err := useraws.Load(ctx)
	if err != nil {
		ln.Close()
		return nil, err
	}
	// Checked before anything starts: a bad profile costs milliseconds, not a build.
	pr := progress{w: o.Progress, every: cmp.Or(o.ProgressEvery, 10*time.Second)}
	if pr.w == nil {
		pr.w = io.Discard
	}
	end := func() {}
	if o.Profile != "" {
		end = pr.begin("reading the profile "+o.Profile, "still reading the profile")
	}
	prof, err := loadProfile(ctx, o, userAWS, logger)
	end()
	if err == nil && o.LambdaEmulator != nil && o.LambdaEmulator.Admit != nil {
		err = o.LambdaEmulator.Admit()
	}
	if err != nil {
		ln.Close()
		return nil, err
	}
	st = &Stack{Region: dynamolocal.Region, DynamoDBEndpoint: o.DynamoDBEndpoint, measure: o.Measure, Credentials: dynamolocal.LocalCredentials}
	// A failed start closes what it started; the local copy survives the
	// `return nil, err` that clears the named result.
	started := st
	defer func() {
		if err != nil {
			started.Close()
			ln.Close()
		}
	}()
	if st.DynamoDBEndpoint == "" {
		// Private: DynamoDB Local listens on every interface; its own credentials keep
		// other hosts out of this database.
		if st.ddb, err = dynamolocal.Start(ctx, dynamolocal.Options{Root: o.Root, DBPath: o.DataDir, InstallDir: o.InstallDir, Progress: pr.w, ProgressEvery: pr.every, QuickStart: o.QuickJVM, Private: true}); err != nil {
			return nil, err
		}
		st.DynamoDBEndpoint = st.ddb.Endpoint()
		st.Credentials = st.ddb.Credentials()
	}
	st.DynamoDBEndpoint = strings.TrimRight(st.DynamoDBEndpoint, "/")
	defs, err := tables.Parse(terretws.Template)
	if err != nil {
		return nil, err
	}
	st.Tables = tables.NamesWithPrefix(defs, o.TablePrefix)
	if st.logStream, err = o.Measure.holdLogStream(defs); err != nil {
		return nil, err
	}
	db := dynamolocal.ClientWith(st.DynamoDBEndpoint, st.Credentials)
	end = pr.begin(fmt.Sprintf("creating the tables %s, %s, %s where missing", st.Tables["LogTable"], st.Tables["ConnectionsTable"], st.Tables["AgentsTable"]), "still creating the tables")
	err = tables.Ensure(ctx, db, defs, st.Tables)
	end()
	if err != nil {
		return nil, fmt.Errorf("devstack: create tables at %s: %w", st.DynamoDBEndpoint, err)
	}

	connect, message, disconnect, deliver, runner := &localgw.Deferred{}, &localgw.Deferred{}, &localgw.Deferred{}, &localgw.Deferred{}, &localgw.Deferred{}
	gwFunctions := map[string]lambda.Handler{"deliver": o.Latency.Delayed(o.Measure.wrap("deliver (async)", deliver)),
		"runner": o.Latency.Delayed(o.Measure.wrap("runner", runner))}
	gwTimeouts, err := templateTimeouts() // the emulated functions' are the template's plus slack (route)
	if err != nil {
		return nil, err
	}
	deliverTimeout := gwTimeouts["deliver"]
	var emu *emulation
	if o.LambdaEmulator != nil {
		end = pr.begin("building the functions' bootstraps for aws-lambda-rie (make build)", "still building the functions")
		emu, err = newEmulation(ctx, o, st.Tables, prof, logger)
		end()
		if err != nil {
			return nil, err
		}
		emu.route(gwFunctions, gwTimeouts)
	}
	// The gateway and pollers live until Close, not until ctx (which bounds start-up).
	life := context.WithoutCancel(ctx)
	con := &console{log: logger}
	quietLog := slog.New(quiet{logger.Handler()})
	// The rest, to the end of Start, is one step.
	defer pr.begin(fmt.Sprintf("starting the gateway on %s and the stream pollers", ln.Addr()), "still starting the gateway and the stream pollers")()
	mocks, mockReplies, err := mockRoutes(o.NoKeepaliveRoute)
	if err != nil {
		return nil, err
	}
	st.gw, err = localgw.Start(life, localgw.Config{
		Addr:         o.Addr,
		Listener:     ln,
		PingInterval: o.PingInterval,
		Region:       st.Region,
		Routes: map[string]lambda.Handler{"$connect": o.Measure.wrap("connect", connect), "$default": o.Measure.wrap("message", message),
			"$disconnect": o.Measure.wrap("disconnect", disconnect)},
		Functions:    gwFunctions,
		Timeouts:     gwTimeouts,
		RetryBackoff: 200 * time.Millisecond,
		// A post to a client that cannot take its frame in 2 s is answered with the frame
		// still queued: a sender blocked on it would hold up the other sessions of its
		// stream shard meanwhile. The client is dropped as lagged by the outbound-queue
		// bound, not by this timeout.
		WriteTimeout: 2 * time.Second,
		Logger:       quietLog,
		Pages:        o.Pages,
		HTTP:         &st.http,
		// Measurements raise the $default bound (measure.go).
		MaxConcurrency:        o.Measure.MaxConcurrency,
		Limits:                o.GatewayLimits,
		IdleTimeout:           o.IdleTimeout,
		MaxConnectionDuration: o.MaxConnectionDuration,
		// The template's keepalive route has a MOCK integration: no function runs.
		MockRoutes:            mocks,
		MockReplies:           mockReplies,
		CloudFrontIdleTimeout: o.CloudFrontIdleTimeout,
	})
	if err != nil {
		return nil, err
	}
	st.Config = config.Config{
		LogTable:             st.Tables["LogTable"],
		ConnectionsTable:     st.Tables["ConnectionsTable"],
		AgentsTable:          st.Tables["AgentsTable"],
		ManagementEndpoint:   st.gw.ManagementEndpoint(),
		DeliverFunction:      "deliver",
		RunnerFunction:       "runner",
		ReplayLimit:          orInt(o.ReplayLimit, config.DefaultReplayLimit),
		MaxConcurrentReplays: orInt(o.MaxConcurrentReplays, config.DefaultMaxConcurrentReplays),
		OutboundQueue:        orInt(o.OutboundQueue, config.DefaultOutboundQueue),
		MaxObservers:         orInt(o.MaxObservers, config.DefaultMaxObservers),
		Approvals:            o.Approvals,
		MainModel:            "scripted",
		TitlerModel:          "scripted",
		DynamoDBEndpoint:     st.DynamoDBEndpoint,
		LambdaEndpoint:       st.gw.LambdaEndpoint(),
		LogLevel:             "info",
	}
	awsCfg := o.Latency.Install(o.Measure.clients(dynamolocal.ConfigWith(st.Credentials)))
	st.AWSConfig = awsCfg
	tune := service.Tuning{Observer: o.Observer, ReplayPage: o.ReplayPage}
	msgD := service.Deliverer(st.Config, awsCfg, logger, tune)      // the message function's, shared as there
	agentLog := slog.New(withoutRunnerTurnFailed{logger.Handler()}) // the console logs failed turns (console.go)
	// Approval expiries: records in the agents table, armed again here at every start.
	st.timer = agentservice.LocalTimer(st.Config, awsCfg, logger)
	agent, err := agentservice.AgentWith(st.Config, awsCfg, msgD, agentLog, agentservice.AgentOptions{ProfileFile: o.Profile, Profiles: prof.src, ModelAWS: &userAWS, Local: true, Pause: o.Pause, Now: o.AgentClock, Rules: ruleEngine.Rules, Turns: turns.Kit(), Timer: st.timer})
	if err != nil {
		return nil, err
	}
	sock := service.Socket(st.Config, awsCfg, msgD, agent, logger)
	if o.OrderWait > 0 {
		sock.WithOrderWait(o.OrderWait)
	}
	d := service.Deliverer(st.Config, awsCfg, logger, tune)
	tokens := service.Tokens(st.Config, awsCfg)
	if o.TokenClock != nil {
		tokens = tokens.WithClock(o.TokenClock)
	}
	httpAPI := agentservice.HTTP(st.Config, awsCfg, logger, agent)
	st.http.Bind(httpAPI)
	connect.Bind(con.connect(perCall(sock.Connect)))
	message.Bind(con.frame(perCall(sock.Message)))
	disconnect.Bind(con.disconnect(perCall(sock.Disconnect)))
	deliver.Bind(perCall(service.DeliverHandler(d, tokens, logger)))
	runner.Bind(perCall(agent.HandleRunner))
	// Webhooks (package webhook): the local WebhookQueue, and the webhook function
	// consuming it and the log's stream, in process or emulated like the others.
	webhookFn := &localgw.Deferred{}
	if st.webhookQueue, err = startWebhookQueue(webhookFn, o, quietLog); err != nil {
		return nil, err
	}
	if err := st.bindWebhook(webhookFn, awsCfg, userAWS, prof, o, logger); err != nil {
		return nil, err
	}
	schedFn, err := st.scheduleFunction(awsCfg, logger)
	if err != nil {
		return nil, err
	}
	if emu != nil { // every handler rebound to its function's emulated environments
		emu.webhookQueueURL = st.webhookQueue.URL()
		handlers := map[string]*localgw.Deferred{"connect": connect, "message": message, "disconnect": disconnect, "deliver": deliver, "runner": runner, "webhook": webhookFn, "schedule": schedFn}
		wrap := map[string]func(lambda.Handler) lambda.Handler{"connect": con.connect, "message": con.frame, "disconnect": con.disconnect}
		if st.emu, err = emu.start(st, handlers, wrap); err != nil {
			return nil, err
		}
		// The agent paths over HTTP through the http function's bootstrap, but for
		// Server-Sent Events (emulatedHTTP).
		st.http.Bind(emulatedHTTP{fn: st.emu.Handler("http"), inProcess: httpAPI})
	}

	filter, err := eventsource.ParseFilter(`{"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"tokens#"}]}}}}`)
	if err != nil {
		return nil, err
	}
	st.pollerOpts = eventsource.Options{PollInterval: cmp.Or(o.PollInterval, o.Latency.PollInterval), Logger: quietLog, Faults: o.Faults}
	mappings := []eventsource.Mapping{
		{Function: "deliver", Handler: o.Measure.wrap("deliver (log stream)", ringing(httpAPI.Bell(), con.turns(deliver))), TableName: st.Tables["LogTable"], BatchSize: 100, MaxRetries: 10, BisectOnError: true, StartingPosition: eventsource.Latest, Timeout: deliverTimeout},
		{Function: "deliver", Handler: o.Measure.wrap("deliver (tokens stream)", deliver), TableName: st.Tables["ConnectionsTable"], BatchSize: 100, MaxRetries: 10, BisectOnError: true, StartingPosition: eventsource.Latest, Timeout: deliverTimeout, Filters: []eventsource.Filter{filter}},
	}
	wm, err := st.webhookMapping(webhookFn, o, gwTimeouts["webhook"])
	if err != nil {
		return nil, err
	}
	if st.logStream == nil { // measurements hold the log's stream back for deliver alone (measure.go)
		mappings = append(mappings, wm)
	} else {
		st.webhookHeld = wm // EnableWebhooks starts it
	}
	st.poller, err = eventsource.Start(life, db, o.Measure.streams(st.DynamoDBEndpoint, st.Credentials), st.Region, st.splitMappings(mappings), st.pollerOpts)
	if err != nil {
		return nil, err
	}
	st.sweep = startSweeper(life, deliver, service.SweepInput, o.TokenSweep, logger)
	st.quotaSweep = startSweeper(life, runner, agentservice.QuotaSweepInput, o.QuotaSweep, logger)
	if err := st.startSchedules(life, awsCfg, schedFn, logger); err != nil {
		return nil, err
	}
	if err := st.timer.Start(life); err != nil {
		return nil, err
	}
	return st, nil
}

// progress prints Start's steps (Options.Progress).
type progress struct {
	w     io.Writer
	every time.Duration
}

// begin prints line and then, every p.every until end is called, still with the time
// spent; end returns once the last line is written, so none follows the step's end.
func (p progress) begin(line, still string) (end func()) {
	fmt.Fprintln(p.w, line)
	began := time.Now()
	done, ticked := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ticked)
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(p.w, "%s (%.0fs)\n", still, time.Since(began).Seconds())
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-ticked }) }
}

func orInt(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// Close stops the pollers, the gateway (closing every socket) and DynamoDB Local if it
// was started here.
func (s *Stack) Close() error {
	var errs []error
	s.sweep.stop()
	s.quotaSweep.stop()
	if s.schedules != nil {
		s.schedules.Close()
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.webhookPoller != nil {
		errs = append(errs, s.webhookPoller.Close())
	}
	if s.logPoller != nil {
		errs = append(errs, s.logPoller.Close())
	}
	if s.poller != nil {
		errs = append(errs, s.poller.Close())
	}
	if s.gw != nil {
		errs = append(errs, s.gw.Close())
	}
	if s.webhookQueue != nil {
		errs = append(errs, s.webhookQueue.Close())
	}
	if s.emu != nil {
		errs = append(errs, s.emu.Close())
	}
	if s.pause != nil {
		errs = append(errs, s.pause.Close())
	}
	if s.ddb != nil {
		errs = append(errs, s.ddb.Close())
	}
	return errors.Join(errs...)
}
