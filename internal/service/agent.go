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

// Agent builds the runtime's two faces: the controller the message route hands agent
// frames to, and the runner function.
func Agent(cfg config.Config, awsCfg aws.Config, logger *slog.Logger) (*agent.Service, *agent.Runner, error) {
	acfg, err := AgentConfig(cfg, awsCfg, logger)
	if err != nil {
		return nil, nil, err
	}
	svc, err := agent.New(acfg)
	if err != nil {
		return nil, nil, err
	}
	runner, err := agent.NewRunner(acfg)
	if err != nil {
		return nil, nil, err
	}
	return svc, runner, nil
}
