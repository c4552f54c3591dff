// Command schedule is the target of EventBridge Scheduler's schedules: it fires one
// schedule of one agent (internal/schedule), once per due time.
package main

import "github.com/terret/terret-ws/internal/service"

func main() {
	env := service.Boot("schedule")
	svc, err := service.ScheduleFirer(env.Config, env.AWS, env.Logger, service.ScheduleEngine(env.Config, env.AWS))
	if err != nil {
		service.Exit(err)
	}
	service.Start(env, service.ScheduleHandler(svc, env.Logger))
}
