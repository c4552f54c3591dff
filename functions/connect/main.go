// Command connect is the $connect route: authenticate, claim the agent, create the session.
package main

import (
	"github.com/terret/terret-ws/internal/service"
)

func main() {
	env := service.Boot("connect")
	h := service.Socket(env.Config, env.AWS, service.Deliverer(env.Config, env.AWS, env.Logger, service.Tuning{}), nil, env.Logger)
	h.RequireOrigin(env.Config.OriginSecret)
	service.Start(env, service.Route(h.Connect))
}
