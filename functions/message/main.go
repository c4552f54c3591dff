// Command message is the $default route: every client frame. subscribe is served by
// delivery; the agent frames go to the runtime.
package main

import (
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/service/agentservice"
)

func main() {
	env := service.Boot("message")
	d := service.Deliverer(env.Config, env.AWS, env.Logger, service.Tuning{})
	rt, err := agentservice.Agent(env.Config, env.AWS, d, env.Logger)
	if err != nil {
		service.Exit(err)
	}
	h := service.Socket(env.Config, env.AWS, d, rt, env.Logger)
	service.Start(env, service.Route(h.Message))
}
