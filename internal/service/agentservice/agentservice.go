// Package agentservice builds the agent runtime as the message and runner functions
// run it (and `terret dev` with its options): profiles, models, tools, the runner. It
// is package service's part that only those two functions need — the runtime carries
// every model client and tool kind — so that connect, disconnect and deliver, which
// import service alone, do not carry it in their binaries or set it up at cold start.
package agentservice

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/pausehook"
	"github.com/terret/terret-ws/internal/profile"
	"github.com/terret/terret-ws/internal/secret"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/socket"
	"github.com/terret/terret-ws/internal/timer"
	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/tools/lambdatool"
	"github.com/terret/terret-ws/internal/tools/mcpspec"
)

// QuotaSweepInput is the payload of the scheduled invocation of runner that starts the
// wakes quotas deferred (template.yaml, RunnerFunction's QuotaSweep event;
// agent.Runner.SweepQuotas).
const QuotaSweepInput = agent.QuotaSweepInput

// The message route hands agent frames to the runtime.
var (
	_ socket.Controller = (*agent.Service)(nil)
	_ socket.Controller = (*Runtime)(nil)
)

// AgentOptions are what `terret dev` sets differently from the deployed functions.
// The zero value is the functions'.
type AgentOptions struct {
	// ProfileFile, if set, is the default profile, read again whenever it changes
	// (a broken edit keeps the last good profile and is logged at error level).
	ProfileFile string
	// Profiles, if set, is the default profile's source, already built and checked
	// (`terret dev` checks its file before it starts anything); it wins over
	// ProfileFile.
	Profiles *profile.Source
	// ModelAWS, if set, is the AWS configuration of Bedrock and of secret fetches —
	// the user's own credentials — instead of the one the tables are reached with.
	ModelAWS *aws.Config
	// Rules compiles profiles' rules over tool arguments (package rules' Rules): set
	// by the processes that run turns or check profiles (the runner, `terret dev`,
	// `terret agent put`), so the others do not link the CEL interpreter. nil: a
	// profile's rules are decoded but not compiled, and its tool calls cannot run here.
	Rules agent.RuleCompiler
	// Local runs the profile on this machine: api_key_env is also read from .env in
	// the working directory, and MCP servers may be started from a command.
	Local bool
	// Stderr receives command MCP servers' stderr (nil: os.Stderr).
	Stderr io.Writer
	// Pause is agent.Config.Pause, for tests; nil with cfg.PauseEndpoint set (a test's
	// emulated functions), pausehook.Remote posts the pause points there.
	Pause func(point, agentID string)
	// Now is the runtime's clock (nil: time.Now): quota periods, leases, the quota
	// sweep. For tests.
	Now func() time.Time
	// Turns, if set, is what running turns takes (package turns' Kit): set by the
	// processes that run turns (the runner, `terret dev`). nil: a bedrock spec
	// resolves but no model client is built, and the mcp kind is not registered —
	// this process hands frames to the runtime and runs no turn.
	Turns *Turns
	// Timer fires approval requests' expiries (agent.Config.Timer); nil: LocalTimer
	// when the functions run locally (LAMBDA_ENDPOINT set), AWSTimer where the
	// template sets the schedule group (the runner, message and http functions).
	Timer agent.Timer
}

// LocalTimer is the approval-expiry timer of a local deployment (package timer): its
// records in the agents table, its fires through the local Lambda endpoint.
func LocalTimer(cfg config.Config, awsCfg aws.Config, logger *slog.Logger) *timer.Local {
	return timer.New(cfg.DynamoDB(awsCfg), cfg.AgentsTable, cfg.Lambda(awsCfg), cfg.RunnerFunction, logger, nil)
}

// AWSTimer is the approval-expiry timer on AWS (timer.Scheduler): the runner's ARN is
// the schedule target's (the schedule function, in the same account and region) with
// the runner's function name.
func AWSTimer(cfg config.Config, awsCfg aws.Config) *timer.Scheduler {
	target := cfg.ScheduleTarget
	runner := target[:strings.LastIndex(target, ":")+1] + cfg.RunnerFunction
	return &timer.Scheduler{API: cfg.Scheduler(awsCfg), Group: cfg.ScheduleGroup, RunnerARN: runner, RoleARN: cfg.ScheduleRole}
}

// ProfileEnv is where profiles run with these options: keys from the environment
// (and .env locally) or from Secrets Manager / SSM, the tool kinds builtin, lambda and
// mcp, and — with o.Turns — a Bedrock client by region (without: DeclaredBedrock).
// `terret agent put` checks profiles against it.
func ProfileEnv(modelAWS aws.Config, o AgentOptions) profile.Env {
	env := profile.Env{
		LookupEnv: func(name string) (string, bool) { return config.LookupKey(name, o.Local) },
		Secrets:   secret.NewFromConfig(modelAWS),
		Kinds:     []string{tools.KindBuiltin, lambdatool.Kind, mcpspec.Kind},
		NoCommand: !o.Local,
		// Webhook receivers on loopback (http too) only for terret dev.
		LocalWebhooks: o.Local,
		Rules:         o.Rules,
	}
	if o.Turns != nil {
		env.Bedrock = o.Turns.Bedrock(modelAWS)
	}
	return env
}

// Turns is what only a process that runs turns builds (package turns' Kit: the
// runner, `terret dev`): the Bedrock clients and the MCP tool kind, with the SDK
// client and the MCP client they link. The functions that hand frames, fires and
// webhooks to the runtime (message, http, schedule, webhook) run no turn, and
// without it carry neither in their bootstraps nor set them up at cold start.
type Turns struct {
	// Bedrock returns profile.Env.Bedrock over modelAWS.
	Bedrock func(modelAWS aws.Config) func(region string, c profile.BedrockConfig) model.Provider
	// MCP builds the mcp tool kind's servers: stderr receives command servers'
	// stderr, env resolves header references, local allows command servers.
	MCP func(stderr io.Writer, env profile.Env, local bool) tools.SetBuilder
}

// AgentConfigWith builds the runtime's configuration: the default profile
// (AGENT_PROFILE, or o.ProfileFile), checked where it runs — its providers' keys
// fetched now, at cold start, and cached — and the tool kinds (lambda, mcp). The
// message and runner functions share it, so set_model accepts exactly the specs the
// runner can run. A profile that does not pass is an error naming its JSON paths.
func AgentConfigWith(cfg config.Config, awsCfg aws.Config, logger *slog.Logger, o AgentOptions) (agent.Config, error) {
	modelAWS := awsCfg
	if o.ModelAWS != nil {
		modelAWS = *o.ModelAWS
	}
	env := ProfileEnv(modelAWS, o)
	// Webhooks: the runtime signs none (the webhook function fetches their secrets),
	// and a local stack's emulated functions admit loopback receivers as terret dev does.
	env.SkipWebhookSecrets = true
	env.LocalWebhooks = env.LocalWebhooks || cfg.DynamoDBEndpoint != ""
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := o.Profiles
	switch {
	case src != nil:
	case o.ProfileFile != "":
		var err error
		if src, err = profile.NewFileSource(ctx, o.ProfileFile, env, logger); err != nil {
			return agent.Config{}, err
		}
	default:
		def, err := tools.ParseProfile(cfg.AgentProfile)
		if err != nil {
			return agent.Config{}, fmt.Errorf("agentservice: AGENT_PROFILE: %w", err)
		}
		if src, err = profile.NewSource(ctx, def, env, logger); err != nil {
			return agent.Config{}, fmt.Errorf("agentservice: AGENT_PROFILE: %w", err)
		}
	}
	lam := cfg.Lambda(awsCfg)
	kinds := tools.NewRegistry()
	if err := kinds.RegisterKind(lambdatool.Kind, lambdatool.Builder(lam)); err != nil {
		return agent.Config{}, err
	}
	stderr := o.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	if o.Turns != nil {
		if err := kinds.RegisterSetKind(mcpspec.Kind, o.Turns.MCP(stderr, env, o.Local)); err != nil {
			return agent.Config{}, err
		}
	}
	// The schedule tool: a profile that names it lets the model set, list and cancel its
	// own agent's schedules (internal/schedule).
	kinds.RegisterBuiltin(Schedules(cfg, awsCfg, logger, ScheduleEngine(cfg, awsCfg), nil).Tool())
	pause := o.Pause
	if pause == nil && cfg.PauseEndpoint != "" {
		logger.Warn("agent: pause points post to a test rig and wait for it", "endpoint", cfg.PauseEndpoint)
		pause = pausehook.Remote(cfg.PauseEndpoint, pausehook.DefaultMaxHold, logger)
	}
	db := cfg.DynamoDB(awsCfg)
	tm := o.Timer
	switch {
	case tm != nil:
	case cfg.LambdaEndpoint != "":
		// Functions emulated by terret dev: a local timer in this process (terret dev
		// itself arms the records again at start).
		tm = LocalTimer(cfg, awsCfg, logger)
	case cfg.ScheduleGroup != "" && cfg.ScheduleRole != "" && cfg.ScheduleTarget != "":
		// On AWS: a one-time EventBridge Scheduler schedule per request, in the stack's
		// group, invoking the runner through the scheduler's role.
		tm = AWSTimer(cfg, awsCfg)
	}
	return agent.Config{
		Timer:          tm,
		Log:            sessionlog.New(db, cfg.LogTable),
		DB:             db,
		AgentsTable:    cfg.AgentsTable,
		Invoker:        lam,
		RunnerFunction: cfg.RunnerFunction,
		Tools:          kinds,
		Profiles:       src,
		MainModel:      cfg.MainModel,
		TitlerModel:    cfg.TitlerModel,
		Approvals:      cfg.Approvals,
		Rules:          o.Rules,
		RetentionDays:  cfg.RetentionDays,
		Logger:         logger,
		Pause:          pause,
		Now:            o.Now,
	}, nil
}

// Runtime is the agent runtime as the functions use it: the controller the message route
// hands agent frames to, and the runner function's handler. Both deliver what they append
// through the fast path and, before their invocation returns, wait for the sends of
// what they appended — not for other invocations' (delivery.Notifier.Invocation).
type Runtime struct {
	svc    *agent.Service
	runner *agent.Runner
	fast   *delivery.Notifier
}

// Agent builds the runtime as the functions do. d is the process's Deliverer (the
// message function shares it with its socket routes).
func Agent(cfg config.Config, awsCfg aws.Config, d *delivery.Deliverer, logger *slog.Logger) (*Runtime, error) {
	return AgentWith(cfg, awsCfg, d, logger, AgentOptions{})
}

// AgentWith builds the runtime with o (see AgentOptions). Its log hands every event
// the runtime appends to the fast path, a Notifier over d.
func AgentWith(cfg config.Config, awsCfg aws.Config, d *delivery.Deliverer, logger *slog.Logger, o AgentOptions) (*Runtime, error) {
	acfg, err := AgentConfigWith(cfg, awsCfg, logger, o)
	if err != nil {
		return nil, err
	}
	rt := &Runtime{fast: delivery.NewNotifier(d, fastPathBudget)}
	if d != nil {
		acfg.Answer = d // a stale inject found by the runner is answered on its socket
	}
	acfg.Log = sessionlog.Notify(sessionlog.New(cfg.DynamoDB(awsCfg), cfg.LogTable), rt.fast.OnAppend)
	if rt.svc, err = agent.New(acfg); err != nil {
		return nil, err
	}
	if rt.runner, err = agent.NewRunner(acfg); err != nil {
		return nil, err
	}
	return rt, nil
}

// fastPathBudget bounds a fast-path send; a backlog goes to the deliver function.
const fastPathBudget = time.Second

// HandleRunner serves the runner function.
func (rt *Runtime) HandleRunner(ctx context.Context, ev agent.RunnerEvent) error {
	ctx, flush := rt.fast.Invocation(ctx)
	defer flush()
	return rt.runner.Handle(ctx, ev)
}

// Inject and the other Controller methods serve the agent frames.
func (rt *Runtime) Inject(ctx context.Context, agentID, text string, wake bool) error {
	ctx, flush := rt.fast.Invocation(ctx)
	defer flush()
	return rt.svc.Inject(ctx, agentID, text, wake)
}

// InjectFrom serves an inject frame (agent.Service.InjectFrom).
func (rt *Runtime) InjectFrom(ctx context.Context, agentID, text string, wake bool, connID string) error {
	ctx, flush := rt.fast.Invocation(ctx)
	defer flush()
	return rt.svc.InjectFrom(ctx, agentID, text, wake, connID)
}

// Cancel serves cancel.
func (rt *Runtime) Cancel(ctx context.Context, agentID, reason string) error {
	ctx, flush := rt.fast.Invocation(ctx)
	defer flush()
	return rt.svc.Cancel(ctx, agentID, reason)
}

// Approve serves approve.
func (rt *Runtime) Approve(ctx context.Context, agentID, callID string) error {
	ctx, flush := rt.fast.Invocation(ctx)
	defer flush()
	return rt.svc.Approve(ctx, agentID, callID)
}

// Deny serves deny.
func (rt *Runtime) Deny(ctx context.Context, agentID, callID, reason string) error {
	ctx, flush := rt.fast.Invocation(ctx)
	defer flush()
	return rt.svc.Deny(ctx, agentID, callID, reason)
}

// SetModel serves set_model.
func (rt *Runtime) SetModel(ctx context.Context, agentID, role, spec string) error {
	ctx, flush := rt.fast.Invocation(ctx)
	defer flush()
	return rt.svc.SetModel(ctx, agentID, role, spec)
}

// SetPolicy serves set_policy.
func (rt *Runtime) SetPolicy(ctx context.Context, agentID string, patterns []string) error {
	ctx, flush := rt.fast.Invocation(ctx)
	defer flush()
	return rt.svc.SetPolicy(ctx, agentID, patterns)
}
