package service_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestRoutesCarryNoRuntime: connect, disconnect and deliver link none of the agent
// runtime — its package, its model clients, its secret stores, its tool kinds, the rule
// engine — so their bootstraps stay small and their init does not build those clients
// (docs/performance.md, "Cold start"). One import of the runtime for a single helper
// (the claim's agent-state write) once put all of it back into the three binaries.
func TestRoutesCarryNoRuntime(t *testing.T) {
	forbidden := []string{
		"github.com/terret/terret-ws/internal/agent",
		"github.com/terret/terret-ws/internal/service/agentservice",
		"github.com/terret/terret-ws/internal/rules",
		"github.com/aws/aws-sdk-go-v2/service/bedrockruntime",
		"github.com/aws/aws-sdk-go-v2/service/ssm",
		"github.com/aws/aws-sdk-go-v2/service/secretsmanager",
		"github.com/modelcontextprotocol/go-sdk/mcp",
		"github.com/google/cel-go/cel",
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	for _, fn := range []string{"connect", "disconnect", "deliver"} {
		t.Run(fn, func(t *testing.T) {
			cmd := exec.Command(goBin, "list", "-deps", "-tags", "lambda.norpc", "../../functions/"+fn)
			cmd.Env = append(cmd.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -deps ./functions/%s: %v", fn, err)
			}
			deps := map[string]bool{}
			for _, p := range strings.Fields(string(out)) {
				deps[p] = true
			}
			for _, p := range forbidden {
				if deps[p] {
					t.Errorf("functions/%s links %s", fn, p)
				}
			}
		})
	}
}
