// Command schedule is the target of EventBridge Scheduler's schedules: it fires one
// schedule of one agent (internal/schedule), once per due time.
package main

import (
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/service/agentservice"
)

func main() {
	env := service.Boot("schedule")
	svc, err := agentservice.ScheduleFirer(env.Config, env.AWS, env.Logger, agentservice.ScheduleEngine(env.Config, env.AWS))
	if err != nil {
		service.Exit(err)
	}
	service.Start(env, agentservice.ScheduleHandler(svc, env.Logger))
}
