// Package config is the one reader of the environment. Every function's main calls
// Load once at cold start; everything else receives values, never reads os.Getenv.
package config

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/terret/terret-ws/internal/invoke"
)

// ErrInvalid reports a missing or malformed setting.
var ErrInvalid = errors.New("config: invalid setting")

// Config holds every setting of every function. A function uses the subset Vars names.
type Config struct {
	LogTable             string // LOG_TABLE
	ConnectionsTable     string // CONNECTIONS_TABLE
	AgentsTable          string // AGENTS_TABLE
	ManagementEndpoint   string // WS_MANAGEMENT_ENDPOINT: https://{api}.execute-api.{region}.amazonaws.com/{stage}
	DeliverFunction      string // DELIVER_FUNCTION
	RunnerFunction       string // RUNNER_FUNCTION
	ReplayLimit          int    // REPLAY_LIMIT, default 10000
	MaxConcurrentReplays int    // MAX_CONCURRENT_REPLAYS, default 4
	OutboundQueue        int    // OUTBOUND_QUEUE, default 1024
	MaxObservers         int    // MAX_OBSERVERS (connect), default 8: observer connections per agent
	Approvals            bool   // APPROVALS, default false
	MainModel            string // MAIN_MODEL, default "scripted"
	TitlerModel          string // TITLER_MODEL, default "scripted"
	AgentProfile         string // AGENT_PROFILE, optional
	// RetentionDays (RETENTION_DAYS, default 0: keep forever, at most MaxRetentionDays)
	// expires log events that many days after they were appended, once the runner's
	// checkpoint has passed them; a profile's retention_days wins over it
	// (docs/architecture.md, "Retention").
	RetentionDays int
	// Schedules on AWS (internal/schedule, EventBridge engine): the stack's schedule
	// group (SCHEDULE_GROUP), the schedule function's ARN (SCHEDULE_TARGET_ARN) and the
	// role EventBridge Scheduler assumes to invoke it (SCHEDULE_ROLE_ARN). Unset
	// (terret dev): schedules are records only, fired by terret dev's engine.
	ScheduleGroup, ScheduleTarget, ScheduleRole string
	DynamoDBEndpoint                            string // DYNAMODB_ENDPOINT, local only
	LambdaEndpoint                              string // LAMBDA_ENDPOINT, local only
	LogLevel                                    string // LOG_LEVEL, default "info"
	MetricsNamespace                            string // METRICS_NAMESPACE, default metrics.DefaultNamespace ("terret")
	// PauseEndpoint (PauseEndpointVar, tests only) is a test rig's pause server (package
	// pausehook): the agent runtime posts each pause point there and waits for the
	// answer. Load takes it only for a local stack: DYNAMODB_ENDPOINT set and the URL
	// http on a loopback address; anywhere else it is an error.
	PauseEndpoint string
	// CallBudget bounds each DynamoDB operation of the function, its retries included
	// (CallBudgets; docs/deploy.md, "Retry budgets"). LoadFrom sets it per function
	// for a deployed function (DYNAMODB_ENDPOINT unset); zero means no bound beyond
	// the caller's context.
	CallBudget time.Duration
	// OriginSecret (ORIGIN_SECRET, connect only, optional) is the value CloudFront adds
	// as the origin header; when set, $connect refuses a handshake without it. A secret:
	// never log it or print the Config.
	OriginSecret string
	// InvokeSecret (invokesecret.EnvVar, local only) is the secret the Lambda emulator
	// of `terret dev --lambda-emulator` sends with each invocation; a function refuses
	// any invocation without it (package invokesecret). Unset on AWS. A secret: never
	// log it or print the Config.
	InvokeSecret string
	// WebhookQueueURL (WEBHOOK_QUEUE_URL, webhook only) is the queue of webhook
	// attempts (package webhook): the template's WebhookQueue; locally the local
	// queue's URL, whose origin is also the SQS endpoint.
	WebhookQueueURL string
}

// Defaults are the spec's defaults.
const (
	DefaultReplayLimit          = 10000
	DefaultMaxConcurrentReplays = 4
	DefaultOutboundQueue        = 1024
	DefaultMaxObservers         = 8
	// MaxRetentionDays bounds RETENTION_DAYS, as the template's RetentionDays and a
	// profile's retention_days are bounded (ten years).
	MaxRetentionDays = 3650
)

// vars lists the environment each function reads; internal/stack checks that the
// template sets every one of them.
var vars = map[string][]string{
	"connect":    {"LOG_TABLE", "CONNECTIONS_TABLE", "AGENTS_TABLE", "DELIVER_FUNCTION", "WS_MANAGEMENT_ENDPOINT", "ORIGIN_SECRET", "MAX_OBSERVERS"},
	"message":    {"LOG_TABLE", "CONNECTIONS_TABLE", "AGENTS_TABLE", "WS_MANAGEMENT_ENDPOINT", "DELIVER_FUNCTION", "RUNNER_FUNCTION", "REPLAY_LIMIT", "MAX_CONCURRENT_REPLAYS", "OUTBOUND_QUEUE", "APPROVALS", "MAIN_MODEL", "TITLER_MODEL", "AGENT_PROFILE", "RETENTION_DAYS"},
	"disconnect": {"CONNECTIONS_TABLE"},
	"deliver":    {"LOG_TABLE", "CONNECTIONS_TABLE", "WS_MANAGEMENT_ENDPOINT", "DELIVER_FUNCTION", "REPLAY_LIMIT", "MAX_CONCURRENT_REPLAYS", "OUTBOUND_QUEUE"},
	"webhook":    {"LOG_TABLE", "AGENTS_TABLE", "AGENT_PROFILE", "WEBHOOK_QUEUE_URL"},
	"runner":     {"LOG_TABLE", "CONNECTIONS_TABLE", "AGENTS_TABLE", "WS_MANAGEMENT_ENDPOINT", "DELIVER_FUNCTION", "RUNNER_FUNCTION", "REPLAY_LIMIT", "MAX_CONCURRENT_REPLAYS", "OUTBOUND_QUEUE", "APPROVALS", "MAIN_MODEL", "TITLER_MODEL", "AGENT_PROFILE", "RETENTION_DAYS", "SCHEDULE_GROUP", "SCHEDULE_TARGET_ARN", "SCHEDULE_ROLE_ARN"},
	// http serves the agent paths over HTTP: frames through the message function's
	// runtime, the log (reads and replay slots), and the schedules as the runner sets them.
	"http": {"LOG_TABLE", "CONNECTIONS_TABLE", "AGENTS_TABLE", "WS_MANAGEMENT_ENDPOINT", "DELIVER_FUNCTION", "RUNNER_FUNCTION", "REPLAY_LIMIT", "MAX_CONCURRENT_REPLAYS", "OUTBOUND_QUEUE", "APPROVALS", "MAIN_MODEL", "TITLER_MODEL", "AGENT_PROFILE", "RETENTION_DAYS", "ORIGIN_SECRET", "SCHEDULE_GROUP", "SCHEDULE_TARGET_ARN", "SCHEDULE_ROLE_ARN"},
	// schedule: the target of EventBridge Scheduler's schedules (internal/schedule).
	"schedule": {"LOG_TABLE", "AGENTS_TABLE", "RUNNER_FUNCTION", "SCHEDULE_GROUP"},
}

// PauseEndpointVar names the test-only variable of Config.PauseEndpoint. No template
// sets it: `terret dev --lambda-emulator` passes it to the functions when a test holds
// the runtime at pause points.
const PauseEndpointVar = "TERRET_TEST_PAUSE_ENDPOINT"

// invokeSecretVar is invokesecret.EnvVar, spelled here so that the template's test
// sees which variable is read (config_test.go sets it by invokesecret.EnvVar, so the
// two cannot drift apart unnoticed).
const invokeSecretVar = "TERRET_INVOKE_SECRET"

// LambdaRuntimeVars are the variables LambdaAWS reads: Lambda sets them in every
// function's environment itself, so the template sets none of them (and may not:
// they are reserved).
var LambdaRuntimeVars = []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}

// Vars returns the environment variables function reads (besides the optional
// LOG_LEVEL, METRICS_NAMESPACE, DYNAMODB_ENDPOINT, LAMBDA_ENDPOINT and the test-only
// PauseEndpointVar), or nil for an unknown function.
func Vars(function string) []string { return append([]string(nil), vars[function]...) }

// Load reads the configuration of function from the environment and checks that every
// variable the function needs is set. It returns ErrInvalid naming the variable.
func Load(function string) (Config, error) { return LoadFrom(function, os.Getenv) }

// LoadFrom is Load with another source of variables.
func LoadFrom(function string, getenv func(string) string) (Config, error) {
	need, ok := vars[function]
	if !ok {
		return Config{}, fmt.Errorf("%w: unknown function %q", ErrInvalid, function)
	}
	required := map[string]bool{"WEBHOOK_QUEUE_URL": true, "LOG_TABLE": true, "CONNECTIONS_TABLE": true, "AGENTS_TABLE": true, "WS_MANAGEMENT_ENDPOINT": true, "DELIVER_FUNCTION": true, "RUNNER_FUNCTION": true}
	for _, v := range need {
		if required[v] && strings.TrimSpace(getenv(v)) == "" {
			return Config{}, fmt.Errorf("%w: %s is not set", ErrInvalid, v)
		}
	}
	c := Config{
		LogTable:           getenv("LOG_TABLE"),
		ConnectionsTable:   getenv("CONNECTIONS_TABLE"),
		AgentsTable:        getenv("AGENTS_TABLE"),
		ManagementEndpoint: getenv("WS_MANAGEMENT_ENDPOINT"),
		DeliverFunction:    getenv("DELIVER_FUNCTION"),
		RunnerFunction:     getenv("RUNNER_FUNCTION"),
		MainModel:          orDefault(getenv("MAIN_MODEL"), "scripted"),
		TitlerModel:        orDefault(getenv("TITLER_MODEL"), "scripted"),
		AgentProfile:       getenv("AGENT_PROFILE"),
		DynamoDBEndpoint:   getenv("DYNAMODB_ENDPOINT"),
		LambdaEndpoint:     getenv("LAMBDA_ENDPOINT"),
		LogLevel:           orDefault(getenv("LOG_LEVEL"), "info"),
		MetricsNamespace:   strings.TrimSpace(getenv("METRICS_NAMESPACE")),
		OriginSecret:       getenv("ORIGIN_SECRET"),
		InvokeSecret:       getenv(invokeSecretVar),
		WebhookQueueURL:    strings.TrimSpace(getenv("WEBHOOK_QUEUE_URL")),
		ScheduleGroup:      getenv("SCHEDULE_GROUP"),
		ScheduleTarget:     getenv("SCHEDULE_TARGET_ARN"),
		ScheduleRole:       getenv("SCHEDULE_ROLE_ARN"),
	}
	if c.DynamoDBEndpoint == "" {
		// Deployed only: DynamoDB Local on a loaded machine may stall for seconds, and
		// a local stack has no 29 s route timeout to answer within.
		c.CallBudget = CallBudgets[function]
	}
	var err error
	if c.ReplayLimit, err = positive(getenv, "REPLAY_LIMIT", DefaultReplayLimit); err != nil {
		return Config{}, err
	}
	if c.MaxConcurrentReplays, err = positive(getenv, "MAX_CONCURRENT_REPLAYS", DefaultMaxConcurrentReplays); err != nil {
		return Config{}, err
	}
	if c.OutboundQueue, err = positive(getenv, "OUTBOUND_QUEUE", DefaultOutboundQueue); err != nil {
		return Config{}, err
	}
	if c.MaxObservers, err = positive(getenv, "MAX_OBSERVERS", DefaultMaxObservers); err != nil {
		return Config{}, err
	}
	if v := strings.TrimSpace(getenv("RETENTION_DAYS")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxRetentionDays {
			return Config{}, fmt.Errorf("%w: RETENTION_DAYS=%q, want a whole number of days from 0 (keep forever) to %d", ErrInvalid, v, MaxRetentionDays)
		}
		c.RetentionDays = n
	}
	if c.PauseEndpoint, err = pauseEndpoint(getenv(PauseEndpointVar), c.DynamoDBEndpoint); err != nil {
		return Config{}, err
	}
	switch v := strings.ToLower(strings.TrimSpace(getenv("APPROVALS"))); v {
	case "", "false", "0", "off":
	case "true", "1", "on":
		c.Approvals = true
	default:
		return Config{}, fmt.Errorf("%w: APPROVALS=%q, want true or false", ErrInvalid, v)
	}
	return c, nil
}

// pauseEndpoint checks PauseEndpointVar's value v: a deployed function must never wait
// on it, so it is refused unless the stack is local (dynamoDB, the DYNAMODB_ENDPOINT
// only a local stack sets) and v is an http URL on a loopback IP.
func pauseEndpoint(v, dynamoDB string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	if strings.TrimSpace(dynamoDB) == "" {
		return "", fmt.Errorf("%w: %s is set without DYNAMODB_ENDPOINT; it is for tests of a local stack only", ErrInvalid, PauseEndpointVar)
	}
	u, err := url.Parse(v)
	if err != nil || u.Scheme != "http" {
		return "", fmt.Errorf("%w: %s=%q, want an http:// URL", ErrInvalid, PauseEndpointVar, v)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("%w: %s=%q, want a loopback IP address (127.0.0.1 or ::1)", ErrInvalid, PauseEndpointVar, v)
	}
	return v, nil
}

func orDefault(v, def string) string {
	if strings.TrimSpace(v) == "" {
		return def
	}
	return v
}

func positive(getenv func(string) string, name string, def int) (int, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: %s=%q, want a positive integer", ErrInvalid, name, v)
	}
	return n, nil
}

// LambdaAWS is the AWS configuration of a deployed function, read from the variables
// Lambda sets in every function's environment: the region (AWS_REGION, else
// AWS_DEFAULT_REGION) and the execution role's credentials (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) — what AWS's default chain resolves first
// there ([Lambda's defined runtime environment variables]). It reads no shared config
// or credentials file and builds no other credential provider (SSO, STS, instance
// metadata), so a function carries none of them and its cold start spends nothing on
// them. The service clients fill in the SDK's defaults for what is left unset (HTTP
// client, retryer: DynamoDB's is set by DynamoDB below). Missing credentials are an
// init error.
//
// [Lambda's defined runtime environment variables]: https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime
func LambdaAWS(getenv func(string) string) (aws.Config, error) {
	region := orDefault(getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION"))
	key, secret := getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY")
	if region == "" || key == "" || secret == "" {
		return aws.Config{}, fmt.Errorf("%w: AWS_REGION, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set (Lambda sets them)", ErrInvalid)
	}
	return aws.Config{
		Region:      region,
		Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(key, secret, getenv("AWS_SESSION_TOKEN"))),
	}, nil
}

// DynamoDBMaxAttempts is how many times a DynamoDB request is tried before its error
// reaches the caller: throttling on a hot partition or during on-demand scaling passes
// within the SDK's backoff, far cheaper than failing a stream batch or a client's
// frame. The SDK's default is 3.
const DynamoDBMaxAttempts = 8

// DynamoDBMaxBackoff caps the wait between two attempts (the SDK's default is 20 s, so
// that 8 attempts could outlast API Gateway's 29 s route timeout).
const DynamoDBMaxBackoff = 2 * time.Second

// CallBudgets bound each DynamoDB operation, retries included, per function: a route
// function's well inside API Gateway's 29 s (a frame makes a few calls, and the route
// context ends RouteMargin before the Lambda deadline anyway); deliver's inside half
// its sender lease (connections.DefaultLease, 30 s, renewed at half the term); the
// runner's inside a third of its 15 s lease, the interval it renews at, so that one
// stalled call never outlives the lease it holds. Past its budget an operation fails
// with context.DeadlineExceeded and the caller's error path runs.
var CallBudgets = map[string]time.Duration{
	"connect":    8 * time.Second,
	"message":    8 * time.Second,
	"disconnect": 8 * time.Second,
	"deliver":    10 * time.Second,
	"runner":     4 * time.Second,
	// webhook: a profile or epoch read, inside a stream batch or a queue batch of the
	// function's 60 s; a failed read is retried by the stream or the queue.
	"webhook":  10 * time.Second,
	"schedule": 8 * time.Second,
}

// RouteMargin is how long before its Lambda deadline a route handler's context ends
// (Route in internal/service), so that the handler answers — its error path included —
// before Lambda and API Gateway give up on it.
const RouteMargin = 3 * time.Second

// DynamoDB returns a DynamoDB client, pointed at DynamoDBEndpoint when set, that retries
// throttled and failed requests up to DynamoDBMaxAttempts times, at most
// DynamoDBMaxBackoff apart, and ends each operation, retries included, within
// CallBudget when it is set.
//
// It has no client-side retry quota: the standard retryer's token bucket (500 tokens,
// 5 per retry of a throttled request) would otherwise, after about 100 retries in one
// execution environment, fail every further throttled request at its first answer,
// without a retry (ratelimit.QuotaExceededError): sustained throttling would turn into
// immediate failures of frames, stream batches and turns. The attempts and CallBudget
// already bound what one operation spends.
func (c Config) DynamoDB(awsCfg aws.Config) *dynamodb.Client {
	return dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = DynamoDBMaxAttempts
			so.MaxBackoff = DynamoDBMaxBackoff
			so.RateLimiter = ratelimit.None
		})
		o.RetryMaxAttempts = DynamoDBMaxAttempts // else aws.Config's (AWS_MAX_ATTEMPTS) would win
		if c.CallBudget > 0 {
			o.APIOptions = append(o.APIOptions, budget(c.CallBudget))
		}
		if c.DynamoDBEndpoint != "" {
			o.BaseEndpoint = aws.String(c.DynamoDBEndpoint)
		}
	})
}

// budget bounds a whole operation — every attempt and every backoff — to d: it is an
// Initialize-step middleware, which runs once per operation, outside the retry loop.
func budget(d time.Duration) func(*middleware.Stack) error {
	return func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("terret/call-budget",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				ctx, cancel := context.WithTimeout(ctx, d)
				defer cancel()
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	}
}

// Management returns the @connections client for ManagementEndpoint.
func (c Config) Management(awsCfg aws.Config) *apigatewaymanagementapi.Client {
	return apigatewaymanagementapi.NewFromConfig(awsCfg, func(o *apigatewaymanagementapi.Options) {
		o.BaseEndpoint = aws.String(c.ManagementEndpoint)
	})
}

// Lambda returns the client of Lambda's Invoke API (package invoke), pointed at
// LambdaEndpoint when set.
func (c Config) Lambda(awsCfg aws.Config) *invoke.Client {
	if c.LambdaEndpoint != "" {
		awsCfg.BaseEndpoint = aws.String(c.LambdaEndpoint)
	}
	return invoke.NewFromConfig(awsCfg)
}

// CLIEnv is what the terret command line reads from the environment: defaults for its
// flags (dev-profile.md names TERRET_ADDR and TERRET_DYNAMODB_ENDPOINT).
type CLIEnv struct {
	Addr             string // TERRET_ADDR
	DynamoDBEndpoint string // TERRET_DYNAMODB_ENDPOINT
	StateDir         string // TERRET_STATE_DIR, default ~/.terret
	Token            string // TERRET_TOKEN
	URL              string // TERRET_URL
	// DevProgressEvery is how often `terret dev` says a start step still waits (a Go
	// duration, default 10s): TERRET_DEV_PROGRESS_EVERY, set only by tests, so that a
	// test sees the lines without waiting 10 s each.
	DevProgressEvery string
}

// LoadCLIEnv reads CLIEnv.
func LoadCLIEnv() CLIEnv {
	e := CLIEnv{
		Addr:             os.Getenv("TERRET_ADDR"),
		DynamoDBEndpoint: os.Getenv("TERRET_DYNAMODB_ENDPOINT"),
		StateDir:         os.Getenv("TERRET_STATE_DIR"),
		Token:            os.Getenv("TERRET_TOKEN"),
		URL:              os.Getenv("TERRET_URL"),
		DevProgressEvery: os.Getenv("TERRET_DEV_PROGRESS_EVERY"),
	}
	if e.StateDir == "" {
		if home, err := os.UserHomeDir(); err == nil {
			e.StateDir = home + "/.terret"
		}
	}
	return e
}
