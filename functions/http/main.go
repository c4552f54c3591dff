// Command http serves the agent paths over HTTP (package httpapi) behind a Lambda
// function URL in RESPONSE_STREAM mode, reached through CloudFront on the socket's host:
// control frames (through the same runtime as the message function), the log as JSON
// pages, long-polls and Server-Sent Events, and the schedules.
package main

import (
	"github.com/terret/terret-ws/internal/httpapi"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/service/agentservice"
)

func main() {
	env := service.Boot("http")
	d := service.Deliverer(env.Config, env.AWS, env.Logger, service.Tuning{})
	rt, err := agentservice.Agent(env.Config, env.AWS, d, env.Logger)
	if err != nil {
		service.Exit(err)
	}
	h := agentservice.HTTP(env.Config, env.AWS, env.Logger, rt)
	service.Start(env, httpapi.FunctionURL(httpapi.RequireOrigin(env.Config.OriginSecret, h)))
}
