package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/model/bedrock"
	"github.com/terret/terret-ws/internal/model/openai"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/tools/lambdatool"
	"github.com/terret/terret-ws/internal/tools/mcptool"
)

// AgentConfig builds the runtime's configuration: the deployment profile
// (AGENT_PROFILE), the model providers it names (Bedrock always, OpenAI-compatible when
// configured) and the tool kinds (lambda, mcp). The message and runner functions share
// it, so set_model accepts exactly the specs the runner can run.
func AgentConfig(cfg config.Config, awsCfg aws.Config, logger *slog.Logger) (agent.Config, error) {
	profile, err := tools.ParseProfile(cfg.AgentProfile)
	if err != nil {
		return agent.Config{}, fmt.Errorf("service: AGENT_PROFILE: %w", err)
	}
	models := model.NewRegistry()
	bcfg, err := bedrock.ParseConfig(profile.Providers["bedrock"])
	if err != nil {
		return agent.Config{}, err
	}
	if err := models.Register("bedrock", bedrock.NewProvider(bedrockruntime.NewFromConfig(awsCfg), bcfg)); err != nil {
		return agent.Config{}, err
	}
	if raw, ok := profile.Providers["openai"]; ok {
		ocfg, err := openai.ParseConfig(raw)
		if err != nil {
			return agent.Config{}, err
		}
		p, err := openai.NewProvider(nil, ocfg)
		if err != nil {
			return agent.Config{}, err
		}
		if err := models.Register("openai", p); err != nil {
			return agent.Config{}, err
		}
	}
	lam := cfg.Lambda(awsCfg)
	kinds := tools.NewRegistry()
	if err := kinds.RegisterKind(lambdatool.Kind, lambdatool.Builder(lam)); err != nil {
		return agent.Config{}, err
	}
	if err := kinds.RegisterSetKind(mcptool.Kind, func(tc tools.ToolConfig) ([]tools.Tool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return mcptool.Build(ctx, tc.Spec, nil)
	}); err != nil {
		return agent.Config{}, err
	}
	db := cfg.DynamoDB(awsCfg)
	return agent.Config{
		Log:            sessionlog.New(db, cfg.LogTable),
		DB:             db,
		AgentsTable:    cfg.AgentsTable,
		Invoker:        lam,
		RunnerFunction: cfg.RunnerFunction,
		Models:         models,
		Tools:          kinds,
		Profile:        &profile,
		MainModel:      cfg.MainModel,
		TitlerModel:    cfg.TitlerModel,
		Approvals:      cfg.Approvals,
		Logger:         logger,
	}, nil
}

// Runtime is the agent runtime as the functions use it: the controller the message route
// hands agent frames to, and the runner function's handler. Both deliver what they append
// through the fast path and wait for it before their invocation returns.
type Runtime struct {
	svc    *agent.Service
	runner *agent.Runner
	fast   *delivery.Notifier
}

// Agent builds the runtime.
func Agent(cfg config.Config, awsCfg aws.Config, logger *slog.Logger) (*Runtime, error) {
	acfg, err := AgentConfig(cfg, awsCfg, logger)
	if err != nil {
		return nil, err
	}
	rt := &Runtime{fast: delivery.NewNotifier(Deliverer(cfg, awsCfg, logger, Tuning{}), fastPathBudget)}
	acfg.OnAppend = rt.fast.OnAppend
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
	defer rt.fast.Flush()
	return rt.runner.Handle(ctx, ev)
}

// Inject and the other Controller methods serve the agent frames.
func (rt *Runtime) Inject(ctx context.Context, sessionID, text string, wake bool) error {
	defer rt.fast.Flush()
	return rt.svc.Inject(ctx, sessionID, text, wake)
}

// Cancel serves cancel.
func (rt *Runtime) Cancel(ctx context.Context, sessionID, reason string) error {
	defer rt.fast.Flush()
	return rt.svc.Cancel(ctx, sessionID, reason)
}

// Approve serves approve.
func (rt *Runtime) Approve(ctx context.Context, sessionID, callID string) error {
	defer rt.fast.Flush()
	return rt.svc.Approve(ctx, sessionID, callID)
}

// Deny serves deny.
func (rt *Runtime) Deny(ctx context.Context, sessionID, callID, reason string) error {
	defer rt.fast.Flush()
	return rt.svc.Deny(ctx, sessionID, callID, reason)
}

// SetModel serves set_model.
func (rt *Runtime) SetModel(ctx context.Context, sessionID, role, spec string) error {
	defer rt.fast.Flush()
	return rt.svc.SetModel(ctx, sessionID, role, spec)
}

// SetPolicy serves set_policy.
func (rt *Runtime) SetPolicy(ctx context.Context, sessionID string, patterns []string) error {
	defer rt.fast.Flush()
	return rt.svc.SetPolicy(ctx, sessionID, patterns)
}
