// Command http serves the agent paths over HTTP (package httpapi) behind a Lambda
// function URL in RESPONSE_STREAM mode, reached through CloudFront on the socket's host:
// the log as JSON pages, long-polls and Server-Sent Events, and the other features'
// paths.
package main

import (
	"github.com/terret/terret-ws/internal/httpapi"
	"github.com/terret/terret-ws/internal/service"
)

func main() {
	env := service.Boot("http")
	h := service.HTTP(env.Config, env.AWS, env.Logger)
	service.Start(env, httpapi.FunctionURL(httpapi.RequireOrigin(env.Config.OriginSecret, h)))
}
