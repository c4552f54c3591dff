package service_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestFunctionsCarryOnlyWhatTheyRun: each function links only what it runs, so its
// bootstrap stays small and its init does not build clients it never calls
// (docs/performance.md, "Cold start"). connect, disconnect and deliver link none of
// the agent runtime (one import of it for a single helper once put all of it back
// into the three binaries). message, http and schedule hand frames and fires to the
// runtime but run no turn and send no webhook: they link neither the model clients,
// the MCP SDK, the rule engine (package turns and CEL are the runner's alone) nor the
// SQS client (webhook's). No function links the SDK's SSM, Secrets Manager or Lambda
// clients (packages secret and invoke speak their protocols themselves).
func TestFunctionsCarryOnlyWhatTheyRun(t *testing.T) {
	keys := []string{
		"github.com/aws/aws-sdk-go-v2/service/ssm",
		"github.com/aws/aws-sdk-go-v2/service/secretsmanager",
		"github.com/aws/aws-sdk-go-v2/service/lambda",
	}
	turns := append([]string{
		"github.com/terret/terret-ws/internal/service/turns",
		"github.com/terret/terret-ws/internal/model/bedrock",
		"github.com/terret/terret-ws/internal/tools/mcptool",
		"github.com/terret/terret-ws/internal/rules",
		"github.com/aws/aws-sdk-go-v2/service/bedrockruntime",
		"github.com/modelcontextprotocol/go-sdk/mcp",
		"github.com/google/cel-go/cel",
	}, keys...)
	frames := append([]string{
		"github.com/terret/terret-ws/internal/webhook/sqsqueue",
		"github.com/aws/aws-sdk-go-v2/service/sqs",
	}, turns...)
	routes := append([]string{
		"github.com/terret/terret-ws/internal/agent",
		"github.com/terret/terret-ws/internal/service/agentservice",
	}, turns...)
	forbidden := map[string][]string{
		"connect": routes, "disconnect": routes, "deliver": routes,
		"message": frames, "http": frames, "schedule": frames, "webhook": turns,
		"runner": keys,
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	entries, err := os.ReadDir("../../functions")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fn := e.Name()
		t.Run(fn, func(t *testing.T) {
			never, ok := forbidden[fn]
			if !ok {
				t.Fatalf("functions/%s: say here what it may not link", fn)
			}
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
			for _, p := range never {
				if deps[p] {
					t.Errorf("functions/%s links %s", fn, p)
				}
			}
		})
	}
}
