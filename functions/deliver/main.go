// Command deliver pushes session logs to sockets: it consumes the log table's stream
// (tail), the connections table's token changes (revocation) and asynchronous kicks
// (hello after $connect, handover of a long replay).
package main

import (
	"github.com/terret/terret-ws/internal/service"
)

func main() {
	env := service.Boot("deliver")
	d := service.Deliverer(env.Config, env.AWS, env.Logger, service.Tuning{})
	service.Start(env, service.DeliverHandler(d, service.Tokens(env.Config, env.AWS), env.Logger))
}
