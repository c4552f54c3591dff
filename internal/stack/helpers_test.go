package stack

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/dynamolocal"
)

// The five functions of the service, by logical id, and the route each API route
// reaches. The template must declare exactly these.
var (
	wantFunctions = []string{"ConnectFunction", "DeliverFunction", "DisconnectFunction", "HttpFunction", "MessageFunction", "RunnerFunction", "ScheduleFunction", "WebhookFunction"}
	routeFunction = map[string]string{"$connect": "ConnectFunction", "$default": "MessageFunction", "$disconnect": "DisconnectFunction"}
)

// tableVar names the environment variable that carries each table's name.
var tableVar = map[string]string{"LogTable": "LOG_TABLE", "ConnectionsTable": "CONNECTIONS_TABLE", "AgentsTable": "AGENTS_TABLE"}

// repoRoot returns the repository root (the directory of go.mod).
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := dynamolocal.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// loadStack parses the embedded template.yaml, the same bytes `terret dev` reads.
func loadStack(t testing.TB) *Stack {
	t.Helper()
	s, err := Parse(terretws.Template)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// functions returns the template's functions by logical id.
func functions(t testing.TB, s *Stack) map[string]Function {
	t.Helper()
	fs, err := s.Functions()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Function{}
	for _, f := range fs {
		out[f.LogicalID] = f
	}
	return out
}

// tool returns the path of an executable the check needs. Missing, it fails the test
// under CI (CI never passes by skipping) and skips it elsewhere.
func tool(t testing.TB, name, why string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI (%s): %v", name, why, err)
	}
	t.Skipf("%s not found (%s); run `make deps`", name, why)
	return ""
}

// run runs a command in dir with extra environment, bounded by timeout, and returns its
// combined output; it fails the test when the command fails.
func run(t testing.TB, dir string, env []string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := runErr(dir, env, timeout, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(dir string, env []string, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	return buf.String(), err
}

// functionDirs lists the directories under functions/.
func functionDirs(t testing.TB) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(repoRoot(t), "functions"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	sort.Strings(dirs)
	return dirs
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

func equalSets(a, b []string) bool {
	return strings.Join(sorted(a), "\x00") == strings.Join(sorted(b), "\x00")
}
