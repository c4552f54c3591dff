package agentservice

import (
	"context"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"

	agentpkg "github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/schedule"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// ScheduleEngine is the engine of a deployment's schedules: EventBridge Scheduler
// when the stack's schedule group is configured (AWS), else nil — records only,
// which terret dev's local engine sweeps.
func ScheduleEngine(cfg config.Config, awsCfg aws.Config) schedule.Engine {
	if cfg.ScheduleGroup == "" {
		return nil
	}
	return &schedule.EventBridge{API: cfg.Scheduler(awsCfg), Group: cfg.ScheduleGroup, Target: cfg.ScheduleTarget, Role: cfg.ScheduleRole}
}

// Schedules builds the schedule service on the agents table and the log, with engine
// (ScheduleEngine's, or terret dev's local one) and inj for fires (nil where nothing
// fires: the HTTP paths, the schedule tool).
func Schedules(cfg config.Config, awsCfg aws.Config, logger *slog.Logger, engine schedule.Engine, inj schedule.Injector) *schedule.Service {
	db := cfg.DynamoDB(awsCfg)
	minEvery := schedule.LocalMinEvery
	if cfg.ScheduleGroup != "" {
		minEvery = schedule.EventBridgeMinEvery
	}
	return schedule.New(schedule.Config{
		DB: db, Table: cfg.AgentsTable, Log: sessionlog.New(db, cfg.LogTable),
		Engine: engine, Injector: inj, DefaultProfile: cfg.AgentProfile, Logger: logger,
		Bounds: schedule.Bounds{MinEvery: minEvery, MaxText: control.MaxTextBytes},
	})
}

// ScheduleFirer builds the schedule service that fires: the schedule function's on
// AWS, the local engine's under terret dev. Its injector is the agent runtime's
// InjectFire alone — a fire queues an inject and starts the runner, and appends
// nothing but a refusal — so it needs no profile, model or connection.
func ScheduleFirer(cfg config.Config, awsCfg aws.Config, logger *slog.Logger, engine schedule.Engine) (*schedule.Service, error) {
	db := cfg.DynamoDB(awsCfg)
	inj, err := agentpkg.New(agentpkg.Config{Log: sessionlog.New(db, cfg.LogTable), DB: db, AgentsTable: cfg.AgentsTable,
		Invoker: cfg.Lambda(awsCfg), RunnerFunction: cfg.RunnerFunction, Logger: logger})
	if err != nil {
		return nil, err
	}
	return Schedules(cfg, awsCfg, logger, engine, inj), nil
}

// ScheduleHandler serves the schedule function: EventBridge Scheduler's fire of one
// schedule (schedule.FireInput). A fire already logged, or of a schedule gone, does
// nothing; an error makes Lambda retry the asynchronous invocation.
func ScheduleHandler(svc *schedule.Service, logger *slog.Logger) func(context.Context, schedule.FireInput) error {
	return func(ctx context.Context, in schedule.FireInput) error {
		due, err := schedule.ParseTime(in.FireAt)
		if err != nil || in.AgentID == "" || in.ScheduleID == "" {
			logger.ErrorContext(ctx, "schedule: malformed fire", "agent_id", in.AgentID, "schedule_id", in.ScheduleID, "fire_at", in.FireAt)
			return nil // retrying cannot mend it
		}
		out, err := svc.Fire(ctx, in.AgentID, in.ScheduleID, due)
		if err != nil {
			return err
		}
		logger.InfoContext(ctx, "schedule fire", "agent_id", in.AgentID, "schedule_id", in.ScheduleID, "fire_at", in.FireAt, "outcome", string(out))
		return nil
	}
}
