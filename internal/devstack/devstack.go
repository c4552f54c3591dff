// Package devstack runs the whole service in one process, as `terret dev` does: a
// DynamoDB endpoint (DynamoDB Local started here, or one given), the tables of
// template.yaml, the local API Gateway (WebSocket routes, @connections and the Lambda
// Invoke API) and a poller for each DynamoDB stream feeding the stream consumers —
// every handler wired by package service exactly as the deployed functions are.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/eventsource"
	"github.com/terret/terret-ws/internal/localgw"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/tables"
)

// Options configure a Stack. Zero values take the spec's and dev-profile.md's defaults.
type Options struct {
	Addr                 string // default 127.0.0.1:3001; port 0 picks a free one
	DynamoDBEndpoint     string // "" starts DynamoDB Local in memory
	PingInterval         time.Duration
	ReplayLimit          int
	MaxConcurrentReplays int
	OutboundQueue        int
	Approvals            bool
	TablePrefix          string // default "terret-": tables terret-log, terret-connections, terret-agents
	Root                 string // repository root holding the pinned DynamoDB Local; "" finds it
	PollInterval         time.Duration
	Faults               eventsource.Faults // stream fault injection, for tests
	Observer             delivery.Observer  // replay reads, for tests and metrics
	ReplayPage           int                // events per replay read (default 1000)
	Pages                http.Handler       // served at every other GET path (the web page)
	GatewayLimits        bool               // the gateway enforces API Gateway's 32 KB frame and 128 KB message limits
	Logger               *slog.Logger
}

// Stack is a running local service.
type Stack struct {
	DynamoDBEndpoint string
	Region           string
	Tables           tables.Names
	Config           config.Config

	gw     *localgw.Gateway
	poller *eventsource.Poller
	ddb    *dynamolocal.Server
}

// WebSocketURL is the base of the agents' socket URLs: WebSocketURL()+"/agents/ID/ws".
func (s *Stack) WebSocketURL() string { return s.gw.WebSocketURL() }

// Start brings the stack up and returns once it serves. Close stops everything it
// started.
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
	st = &Stack{Region: dynamolocal.Region, DynamoDBEndpoint: o.DynamoDBEndpoint}
	// A failed start closes what it started; the local copy survives the
	// `return nil, err` that clears the named result.
	started := st
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	if st.DynamoDBEndpoint == "" {
		if st.ddb, err = dynamolocal.Start(ctx, dynamolocal.Options{Root: o.Root}); err != nil {
			return nil, err
		}
		st.DynamoDBEndpoint = st.ddb.Endpoint()
	}
	st.DynamoDBEndpoint = strings.TrimRight(st.DynamoDBEndpoint, "/")
	defs, err := tables.Parse(terretws.Template)
	if err != nil {
		return nil, err
	}
	st.Tables = tables.NamesWithPrefix(defs, o.TablePrefix)
	db := dynamolocal.Client(st.DynamoDBEndpoint)
	if err := tables.Ensure(ctx, db, defs, st.Tables); err != nil {
		return nil, fmt.Errorf("devstack: create tables at %s: %w", st.DynamoDBEndpoint, err)
	}

	connect, message, disconnect, deliver, runner := &localgw.Deferred{}, &localgw.Deferred{}, &localgw.Deferred{}, &localgw.Deferred{}, &localgw.Deferred{}
	// The gateway and pollers live until Close, not until ctx (which bounds start-up).
	life := context.WithoutCancel(ctx)
	st.gw, err = localgw.Start(life, localgw.Config{
		Addr:         o.Addr,
		PingInterval: o.PingInterval,
		Region:       st.Region,
		Routes:       map[string]lambda.Handler{"$connect": connect, "$default": message, "$disconnect": disconnect},
		Functions:    map[string]lambda.Handler{"deliver": deliver, "runner": runner},
		Timeouts:     map[string]time.Duration{"deliver": deliverTimeout, "runner": 15 * time.Minute, "$default": 5 * time.Minute},
		RetryBackoff: 200 * time.Millisecond,
		// A client that cannot take one frame in 2 s is treated as gone: a sender blocked
		// on it holds up the other sessions of its stream shard meanwhile.
		WriteTimeout: 2 * time.Second,
		Logger:       logger,
		Pages:        o.Pages,
		Limits:       o.GatewayLimits,
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
		Approvals:            o.Approvals,
		MainModel:            "scripted",
		TitlerModel:          "scripted",
		DynamoDBEndpoint:     st.DynamoDBEndpoint,
		LambdaEndpoint:       st.gw.LambdaEndpoint(),
		LogLevel:             "info",
	}
	awsCfg := dynamolocal.Config()
	agent, err := service.Agent(st.Config, awsCfg, logger)
	if err != nil {
		return nil, err
	}
	tune := service.Tuning{Observer: o.Observer, ReplayPage: o.ReplayPage}
	sock := service.Socket(st.Config, awsCfg, agent, logger, tune)
	d := service.Deliverer(st.Config, awsCfg, logger, tune)
	connect.Bind(lambda.NewHandler(sock.Connect))
	message.Bind(lambda.NewHandler(sock.Message))
	disconnect.Bind(lambda.NewHandler(sock.Disconnect))
	deliver.Bind(lambda.NewHandler(d.Handle))
	runner.Bind(lambda.NewHandler(agent.HandleRunner))

	filter, err := eventsource.ParseFilter(`{"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"tokens#"}]}}}}`)
	if err != nil {
		return nil, err
	}
	st.poller, err = eventsource.Start(life, db, dynamolocal.StreamsClient(st.DynamoDBEndpoint), st.Region, []eventsource.Mapping{
		{Function: "deliver", Handler: deliver, TableName: st.Tables["LogTable"], BatchSize: 100, MaxRetries: 10, BisectOnError: true, StartingPosition: eventsource.Latest, Timeout: deliverTimeout},
		{Function: "deliver", Handler: deliver, TableName: st.Tables["ConnectionsTable"], BatchSize: 100, MaxRetries: 10, BisectOnError: true, StartingPosition: eventsource.Latest, Timeout: deliverTimeout, Filters: []eventsource.Filter{filter}},
	}, eventsource.Options{PollInterval: o.PollInterval, Logger: logger, Faults: o.Faults})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// deliverTimeout is the deliver function's timeout, as in template.yaml.
const deliverTimeout = 5 * time.Minute

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
	if s.poller != nil {
		errs = append(errs, s.poller.Close())
	}
	if s.gw != nil {
		errs = append(errs, s.gw.Close())
	}
	if s.ddb != nil {
		errs = append(errs, s.ddb.Close())
	}
	return errors.Join(errs...)
}
