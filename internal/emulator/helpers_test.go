package emulator_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/emulator"
)

// buildDir holds this test binary's builds: the template's functions (make build) and
// the probe function of testdata/probe.
var buildDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "terret-emulator-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := dynamolocal.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// rie returns the emulator binary scripts/deps.sh installs. Missing, it fails the test
// under CI (CI never passes by skipping) and skips it elsewhere.
func rie(t *testing.T) string {
	t.Helper()
	p := filepath.Join(repoRoot(t), "bin", "aws-lambda-rie")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required under CI: %v", p, err)
		}
		t.Skipf("%s not installed (run scripts/deps.sh)", p)
	}
	return p
}

var builds struct {
	functions, probe sync.Once
	fnErr, probeErr  error
}

// functionsDir builds the template's functions once and returns where.
func functionsDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(buildDir, "functions")
	builds.functions.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		builds.fnErr = emulator.Build(ctx, repoRoot(t), dir)
	})
	if builds.fnErr != nil {
		t.Fatal(builds.fnErr)
	}
	return dir
}

// probeDir builds testdata/probe once, as <dir>/probe/bootstrap, and returns dir.
func probeDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(buildDir, "probe")
	builds.probe.Do(func() {
		cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", filepath.Join(dir, "probe", "bootstrap"), "./internal/emulator/testdata/probe")
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH, "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			builds.probeErr = fmt.Errorf("build probe: %v\n%s", err, out)
		}
	})
	if builds.probeErr != nil {
		t.Fatal(builds.probeErr)
	}
	return dir
}

// console is an emulator's Console, safe for concurrent writes.
type console struct {
	mu sync.Mutex
	b  strings.Builder
}

func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.Write(p)
}

func (c *console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// startProbe runs the probe function under the emulator with fn's settings; its cold
// start lines go to con, if given.
func startProbe(t *testing.T, fn emulator.Function, maxEnvs int, con ...*console) *emulator.Emulator {
	t.Helper()
	fn.Name = "probe"
	if fn.FunctionName == "" {
		fn.FunctionName = "probe"
	}
	if fn.Timeout == 0 {
		fn.Timeout = time.Minute
	}
	if fn.MemoryMB == 0 {
		fn.MemoryMB = 128
	}
	if fn.Async == (emulator.AsyncConfig{}) {
		fn.Async = emulator.DefaultAsync
	}
	o := emulator.Options{
		Root: repoRoot(t), RIE: rie(t), BuildDir: probeDir(t), MaxEnvironments: maxEnvs,
		Logger: slog.New(slog.DiscardHandler),
	}
	if len(con) > 0 {
		o.Console = con[0]
	}
	em, err := emulator.Start(o, []emulator.Function{fn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	return em
}

// withRequestID is the context of an invocation under the given request id, as the
// local gateway gives each attempt of one asynchronous event.
func withRequestID(id string) context.Context {
	return lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: id})
}
