// Command webhook delivers agents' log events to the receivers their profiles name:
// it consumes the log table's stream (filtered to the events a webhook may want) and
// enqueues one attempt per matching webhook, and consumes that queue, making the
// attempts and retrying failed ones with backoff (package webhook).
package main

import (
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/service/webhookservice"
)

func main() {
	env := service.Boot("webhook")
	c, err := webhookservice.Consumer(env.Config, env.AWS, env.Logger, webhookservice.Options{})
	if err != nil {
		service.Exit(err)
	}
	service.Start(env, c.Handle)
}
