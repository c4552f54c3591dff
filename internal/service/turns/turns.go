// Package turns is the part of the agent runtime's wiring that only the processes
// that run turns link (the runner function, `terret dev`): Bedrock clients by region
// and the MCP tool kind. It is kept out of package agentservice so that the functions
// that only hand frames, fires and webhooks to the runtime (message, http, schedule,
// webhook) carry neither the Bedrock client nor the MCP SDK in their bootstraps
// (docs/performance.md, "Cold start").
package turns

import (
	"io"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"

	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/model/bedrock"
	"github.com/terret/terret-ws/internal/profile"
	"github.com/terret/terret-ws/internal/service/agentservice"
	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/tools/mcptool"
)

// Kit is agentservice.AgentOptions.Turns for a process that runs turns.
func Kit() *agentservice.Turns {
	return &agentservice.Turns{Bedrock: Bedrock, MCP: MCP}
}

// Bedrock returns profile.Env.Bedrock over modelAWS: model/bedrock providers over
// one Bedrock client per region, made on first use and shared.
func Bedrock(modelAWS aws.Config) func(region string, c profile.BedrockConfig) model.Provider {
	var mu sync.Mutex
	clients := map[string]bedrock.API{}
	client := func(region string) bedrock.API {
		mu.Lock()
		defer mu.Unlock()
		if c, ok := clients[region]; ok {
			return c
		}
		c := bedrockruntime.NewFromConfig(modelAWS, func(opt *bedrockruntime.Options) {
			if region != "" {
				opt.Region = region
			}
		})
		clients[region] = c
		return c
	}
	return func(region string, c profile.BedrockConfig) model.Provider {
		return bedrock.NewProvider(client(region), bedrock.Config{MaxTokens: c.MaxTokens, Temperature: c.Temperature})
	}
}

// MCP is the mcp tool kind (mcptool.Sets) with env's lookups for header references.
func MCP(stderr io.Writer, env profile.Env, local bool) tools.SetBuilder {
	return mcptool.Sets(mcptool.Options{Stderr: stderr, LookupEnv: env.LookupEnv, Secrets: env.Secrets}, local)
}
