// Command disconnect is the $disconnect route: forget the connection; turns go on.
package main

import (
	"github.com/terret/terret-ws/internal/service"
)

func main() {
	env := service.Boot("disconnect")
	h := service.Socket(env.Config, env.AWS, service.Deliverer(env.Config, env.AWS, env.Logger, service.Tuning{}), nil, env.Logger)
	service.Start(env, service.Route(h.Disconnect))
}
