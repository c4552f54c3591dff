package agentservice

import (
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/httpapi"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/socket"
)

// HTTP builds the agent paths over HTTP (package httpapi): terret dev's gateway serves
// them, and on AWS the http function. Each feature's paths are added here.
//
// agent serves the control frames posted to /agents/{agent_id}/frames (the runtime the
// message function mounts; nil: they answer unsupported), each inject conditional on
// its token still being current.
func HTTP(cfg config.Config, awsCfg aws.Config, logger *slog.Logger, agent socket.Controller) *httpapi.Server {
	db := cfg.DynamoDB(awsCfg)
	tokens := auth.New(db, cfg.ConnectionsTable)
	s := httpapi.New(tokens, logger)
	s.Frames(agent, tokens, sessionlog.New(db, cfg.LogTable))
	// The log over HTTP (GET /agents/{agent_id}/events): pages, long-polls and
	// Server-Sent Events through a Deliverer of its own, whose replay slots are the
	// cluster's.
	events := httpapi.Events{Log: service.Deliverer(cfg, awsCfg, logger, service.Tuning{}), ReplayLimit: cfg.ReplayLimit}
	if cfg.DynamoDBEndpoint != "" {
		// Locally (terret dev, and its emulated functions) a peek is a read of DynamoDB
		// Local, which costs nothing: waiting readers peek every FirstPeek besides the
		// bell, so that a stream poller slowed down by a loaded machine never holds
		// them up by seconds. On AWS the peeks back off (docs/cost.md).
		events.MaxPeek = httpapi.FirstPeek
	}
	events.Route(s)
	s.RouteSchedules(Schedules(cfg, awsCfg, logger, ScheduleEngine(cfg, awsCfg), nil))
	return s
}
