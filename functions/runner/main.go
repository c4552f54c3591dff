// Command runner runs an agent's turn loop. It is invoked asynchronously with
// {"agent_id": "..."} by the message function (inject, cancel, approve, deny) and by
// itself (deadline handover); an error return makes Lambda retry the event.
package main

import (
	"github.com/terret/terret-ws/internal/rules"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/service/agentservice"
	"github.com/terret/terret-ws/internal/service/turns"
)

func main() {
	env := service.Boot("runner")
	d := service.Deliverer(env.Config, env.AWS, env.Logger, service.Tuning{})
	// Only the runner runs turns: it alone links the CEL interpreter (profiles' rules),
	// the Bedrock client and the MCP SDK.
	rt, err := agentservice.AgentWith(env.Config, env.AWS, d, env.Logger, agentservice.AgentOptions{Rules: rules.New().Rules, Turns: turns.Kit()})
	if err != nil {
		service.Exit(err)
	}
	service.Start(env, rt.HandleRunner)
}
