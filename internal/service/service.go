// Package service is the composition root: it builds each function's handler — the
// service that function provides — from its configuration and AWS clients. The
// functions' mains and `terret dev` share it, so the handlers that run locally are
// wired exactly as the deployed ones. It is the one package that imports every other;
// nothing imports it but mains, devstack and the bench.
//
// The name stays: what it returns are the deployed services, and the obvious
// alternatives are taken or vaguer (internal/stack is the CloudFormation stack;
// "wiring" names an activity, not a thing).
package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/invokesecret"
	"github.com/terret/terret-ws/internal/metrics"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/socket"
)

// Logger returns the JSON logger every function writes to stdout (CloudWatch reads it).
// An unknown level logs at info. A line logged with a context that carries a Lambda
// invocation (the *Context methods: InfoContext, WarnContext, …) gets that invocation's
// request_id, unless the logger already has one (With("request_id", …)): each line of
// an invocation can be found by it, whichever package wrote it.
func Logger(w io.Writer, level string) *slog.Logger {
	l, _ := Level(level)
	return slog.New(requestIDs{Handler: slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})})
}

// requestIDs adds the request_id of the Lambda invocation in a record's context.
type requestIDs struct {
	slog.Handler
	has bool // a request_id was added with With: do not add another
}

func (h requestIDs) Handle(ctx context.Context, r slog.Record) error {
	if !h.has && ctx != nil {
		if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
			r.AddAttrs(slog.String("request_id", lc.AwsRequestID))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDs) WithAttrs(as []slog.Attr) slog.Handler {
	has := h.has
	for _, a := range as {
		has = has || a.Key == "request_id"
	}
	return requestIDs{Handler: h.Handler.WithAttrs(as), has: has}
}

func (h requestIDs) WithGroup(name string) slog.Handler {
	return requestIDs{Handler: h.Handler.WithGroup(name), has: h.has}
}

// Level parses a log level name (debug, info, warn, error; any case). It reports false,
// with info, for any other name.
func Level(name string) (slog.Level, bool) {
	switch strings.ToLower(name) {
	case "debug":
		return slog.LevelDebug, true
	case "info":
		return slog.LevelInfo, true
	case "warn":
		return slog.LevelWarn, true
	case "error":
		return slog.LevelError, true
	}
	return slog.LevelInfo, false
}

// Tuning holds knobs that are not deployment settings: observers for metrics and
// tests, and sizes tests shrink. The zero value is production's.
type Tuning struct {
	Observer   delivery.Observer
	ReplayPage int
}

// Deliverer builds the delivery core. Build one per process and share it: the message
// function's socket routes and its agent runtime's fast path use the same one.
func Deliverer(cfg config.Config, awsCfg aws.Config, logger *slog.Logger, tune Tuning) *delivery.Deliverer {
	db := cfg.DynamoDB(awsCfg)
	return delivery.New(delivery.Config{
		ReplayLimit:          cfg.ReplayLimit,
		MaxConcurrentReplays: cfg.MaxConcurrentReplays,
		OutboundQueue:        cfg.OutboundQueue,
		DeliverFunction:      cfg.DeliverFunction,
		Logger:               logger,
		Observer:             observer(tune.Observer),
		ReplayPage:           tune.ReplayPage,
	}, sessionlog.New(db, cfg.LogTable), connections.New(db, cfg.ConnectionsTable), cfg.Management(awsCfg), cfg.Lambda(awsCfg))
}

// The routes' use-site interfaces (package socket declares them; socket imports none
// of these packages' stores, and no delivery at all) and what wires them here.
var (
	_ socket.Tokens     = (*auth.Store)(nil)
	_ socket.Records    = (*connections.Store)(nil)
	_ socket.SessionLog = (*sessionlog.Log)(nil)
	_ socket.Outbound   = (*delivery.Deliverer)(nil)
)

// Socket builds the connect, message and disconnect routes over the process's
// Deliverer d. agent may be nil, in which case agent frames answer unsupported.
func Socket(cfg config.Config, awsCfg aws.Config, d *delivery.Deliverer, agent socket.Controller, logger *slog.Logger) *socket.Server {
	db := cfg.DynamoDB(awsCfg)
	s := socket.New(
		auth.New(db, cfg.ConnectionsTable),
		connections.New(db, cfg.ConnectionsTable),
		sessionlog.New(db, cfg.LogTable),
		d,
		agent,
		logger,
	)
	s.WithMaxObservers(cfg.MaxObservers)
	if cfg.AgentsTable != "" { // connect's and message's; disconnect's never connects
		s.WithOwnerClaim(func(agentID, connID string) types.TransactWriteItem {
			return control.OwnerClaim(cfg.AgentsTable, agentID, connID)
		})
	}
	return s
}

// Route bounds a route handler h (connect, message, disconnect) by its Lambda deadline:
// h runs with a context that ends config.RouteMargin before the deadline of the
// invocation's, so that its calls — DynamoDB retries included — give up in time for
// h's error path to answer (an error frame, a refused handshake) before Lambda and API
// Gateway's 29 s give up on the invocation. A context without a deadline is passed on
// as it is.
func Route[Req, Resp any](h func(context.Context, Req) (Resp, error)) func(context.Context, Req) (Resp, error) {
	return func(ctx context.Context, req Req) (Resp, error) {
		if deadline, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline.Add(-config.RouteMargin))
			defer cancel()
		}
		return h(ctx, req)
	}
}

// Env is what a function's main loads once at cold start.
type Env struct {
	Config config.Config
	AWS    aws.Config
	Logger *slog.Logger
}

// Boot loads function's configuration (config.Load) and the AWS configuration, and
// builds the JSON logger. A function that cannot start exits here, before lambda.Start,
// with the reason on stderr (Lambda reports it as an init error).
func Boot(function string) Env {
	cfg, err := config.Load(function)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	awsCfg, err := config.LambdaAWS(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	metrics.SetDefault(metrics.New(os.Stdout, cfg.MetricsNamespace, metrics.Dim{Name: "function", Value: function}))
	return Env{Config: cfg, AWS: awsCfg, Logger: Logger(os.Stdout, cfg.LogLevel)}
}

// Start runs handler as the function's Lambda handler (what lambda.Start accepts)
// behind invokesecret.Guard: under `terret dev --lambda-emulator` an invocation that
// does not carry the run's secret is refused before handler runs; deployed (no secret
// in env) nothing is checked. Every function's main starts here.
func Start(env Env, handler any) {
	lambda.Start(invokesecret.Guard(lambda.NewHandler(handler), env.Config.InvokeSecret))
}

// Exit ends a function whose handler could not be built, before lambda.Start.
func Exit(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
