package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/dynamolocal"
)

// helloSource is the floor function: the smallest Go Lambda, built the same way.
const helloSource = "cmd/bench/hellolambda.go"

// coldResult is one function's bootstrap size and start-up under the emulator.
type coldResult struct {
	Name  string
	Size  int64           // linux/arm64 bootstrap, bytes
	Wall  []time.Duration // emulator process start → first invocation's response
	Init  []time.Duration // the emulator's INIT REPORT: bootstrap start → ready for its first event
	First []time.Duration // the first invocation's duration (REPORT Duration)
}

func (c coldResult) median(ds []time.Duration) time.Duration { return percentile(ds, 50) }

// runColdStart builds every functions/X (and the hello floor) for linux/arm64 as `make
// build` does, for the size, and for this machine's architecture, to time each under the
// Lambda Runtime Interface Emulator: from starting the emulator to the response of the
// first invocation (a sample event of events/), with the function's environment
// pointing at this run's tables on DynamoDB Local and at a local stand-in for the
// @connections and Lambda APIs that accepts every call.
func (b *bench) runColdStart(ctx context.Context) error {
	if b.builds == nil {
		b.startBuilds(ctx)
	}
	if err := <-b.builds; err != nil {
		return err
	}
	rie, err := filepath.Abs("bin/aws-lambda-rie")
	if err != nil {
		return err
	}
	if _, err := os.Stat(rie); err != nil {
		return fmt.Errorf("cold start: %s missing (scripts/deps.sh installs it): %w", rie, err)
	}
	names, err := functionNames()
	if err != nil {
		return err
	}
	dir := b.lambdaDir()
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.HasPrefix(r.URL.Path, "/2015-03-31/functions/") {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer stub.Close()
	token, err := b.st.tokens.Create(ctx, "agent-1")
	if err != nil {
		return err
	}
	results := map[string]*coldResult{}
	for _, n := range names {
		st, err := os.Stat(filepath.Join(dir, "arm64", n, "bootstrap"))
		if err != nil {
			return err
		}
		results[n] = &coldResult{Name: n, Size: st.Size()}
	}
	// Connect first (it creates the session and the connection record the others use),
	// disconnect last; each round a new connection id.
	order := []string{"connect", "message", "deliver", "runner", "disconnect", "hello"}
	for r := 0; r < b.o.coldRuns; r++ {
		connID := fmt.Sprintf("bench%02dcold=", r)
		for _, n := range order {
			res, ok := results[n]
			if !ok {
				continue
			}
			event, err := coldEvent(n, connID, token)
			if err != nil {
				return err
			}
			bootstrap, _ := filepath.Abs(filepath.Join(dir, runtime.GOARCH, n, "bootstrap"))
			wall, init, first, err := b.coldOnce(ctx, rie, bootstrap, b.lambdaEnv(n, stub.URL), event)
			if err != nil {
				return fmt.Errorf("cold start of %s: %w", n, err)
			}
			res.Wall = append(res.Wall, wall)
			res.Init = append(res.Init, init)
			res.First = append(res.First, first)
		}
	}
	for _, n := range names {
		if n != "hello" {
			b.res.cold = append(b.res.cold, *results[n])
		}
	}
	b.res.coldFloor = *results["hello"]
	for _, n := range names {
		if _, ok := results[n]; !ok || (n != "hello" && !contains(order, n)) {
			return fmt.Errorf("cold start: no sample event for function %s", n)
		}
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (b *bench) lambdaDir() string { return filepath.Join(b.o.buildDir, "bench-lambda") }

// functionNames lists functions/ and the hello floor.
func functionNames() ([]string, error) {
	entries, err := os.ReadDir("functions")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return append(names, "hello"), nil
}

// startBuilds builds, in the background, every bootstrap the cold-start phase needs: for
// linux/arm64 (the size, as `make build` builds it) and for this machine's architecture
// (the timing). They overlap the seeding, which waits on DynamoDB Local.
func (b *bench) startBuilds(ctx context.Context) {
	b.builds = make(chan error, 1)
	go func() {
		began := time.Now()
		names, err := functionNames()
		if err != nil {
			b.builds <- err
			return
		}
		src := func(name string) string {
			if name == "hello" {
				return helloSource
			}
			return "./functions/" + name
		}
		type job struct{ name, arch string }
		var jobs []job
		for _, n := range names {
			jobs = append(jobs, job{n, "arm64"})
			if runtime.GOARCH != "arm64" {
				jobs = append(jobs, job{n, runtime.GOARCH})
			}
		}
		err = parallel(2, len(jobs), func(i int) error {
			j := jobs[i]
			out := filepath.Join(b.lambdaDir(), j.arch, j.name, "bootstrap")
			cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", out, src(j.name))
			cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+j.arch, "CGO_ENABLED=0")
			if msg, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("build %s for %s: %v\n%s", j.name, j.arch, err, msg)
			}
			return nil
		})
		if err == nil {
			b.progress("cold start: built %d bootstraps in %v", len(jobs), time.Since(began).Round(time.Millisecond))
		}
		b.builds <- err
	}()
}

// coldEvent is the first event a function gets: the sample of events/, with this
// round's connection id and, for connect, a valid token.
func coldEvent(name, connID, token string) ([]byte, error) {
	file := map[string]string{
		"connect": "connect.json", "message": "message-subscribe.json", "disconnect": "disconnect.json",
		"deliver": "deliver-log-stream.json", "runner": "runner.json",
	}[name]
	if name == "hello" {
		return []byte(`{}`), nil
	}
	raw, err := os.ReadFile(filepath.Join("events", file))
	if err != nil {
		return nil, err
	}
	switch name {
	case "connect", "message", "disconnect":
		var ev events.APIGatewayWebsocketProxyRequest
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, err
		}
		ev.RequestContext.ConnectionID = connID
		if name == "connect" {
			ev.Headers["Authorization"] = "Bearer " + token
			ev.MultiValueHeaders["Authorization"] = []string{"Bearer " + token}
		}
		return json.Marshal(ev)
	}
	return raw, nil
}

// lambdaEnv is the environment of a function under the emulator: every variable
// config.Vars names for it, from this run's configuration, with the @connections and
// Lambda APIs pointed at stub.
func (b *bench) lambdaEnv(name, stub string) []string {
	c := b.st.cfg
	values := map[string]string{
		"LOG_TABLE": c.LogTable, "CONNECTIONS_TABLE": c.ConnectionsTable, "AGENTS_TABLE": c.AgentsTable,
		"WS_MANAGEMENT_ENDPOINT": stub + "/prod", "DELIVER_FUNCTION": "deliver", "RUNNER_FUNCTION": "runner",
		"REPLAY_LIMIT": strconv.Itoa(c.ReplayLimit), "MAX_CONCURRENT_REPLAYS": strconv.Itoa(c.MaxConcurrentReplays),
		"OUTBOUND_QUEUE": strconv.Itoa(c.OutboundQueue), "APPROVALS": "false", "MAIN_MODEL": "scripted",
		"TITLER_MODEL": "scripted", "AGENT_PROFILE": "",
	}
	memory := "256"
	if name == "runner" {
		memory = "512"
	}
	env := []string{
		"DYNAMODB_ENDPOINT=" + c.DynamoDBEndpoint, "LAMBDA_ENDPOINT=" + stub, "LOG_LEVEL=info",
		"AWS_ACCESS_KEY_ID=" + dynamolocal.AccessKey, "AWS_SECRET_ACCESS_KEY=" + dynamolocal.SecretKey,
		"AWS_REGION=" + dynamolocal.Region, "AWS_EC2_METADATA_DISABLED=true",
		"AWS_LAMBDA_FUNCTION_NAME=" + name, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=" + memory,
		"HOME=" + os.TempDir(),
	}
	for _, v := range config.Vars(name) {
		env = append(env, v+"="+values[v])
	}
	return env
}

var (
	initReport   = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)
	invokeReport = regexp.MustCompile(`REPORT RequestId: \S+\s+(?:Init Duration: [0-9.]+ ms\s+)?Duration: ([0-9.]+) ms`)
)

// coldOnce starts the emulator with bootstrap and invokes it once with event as soon as
// it listens.
func (b *bench) coldOnce(ctx context.Context, rie, bootstrap string, env []string, event []byte) (wall, init, first time.Duration, err error) {
	port, err := dynamolocal.FreePort()
	if err != nil {
		return 0, 0, 0, err
	}
	apiPort, err := dynamolocal.FreePort()
	if err != nil {
		return 0, 0, 0, err
	}
	logs := &lockedBuffer{}
	cmd := exec.Command(rie,
		"--runtime-interface-emulator-address", fmt.Sprintf("127.0.0.1:%d", port),
		"--runtime-api-address", fmt.Sprintf("127.0.0.1:%d", apiPort),
		"--log-level", "info", bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	url := fmt.Sprintf("http://127.0.0.1:%d/2015-03-31/functions/function/invocations", port)
	client := &http.Client{Timeout: 60 * time.Second}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, 0, err
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if err != nil {
			err = fmt.Errorf("%w\nemulator output:\n%s", err, logs.String())
		}
	}()
	var body []byte
	for {
		resp, perr := client.Post(url, "application/json", bytes.NewReader(event))
		if perr == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			wall = time.Since(t0)
			if resp.StatusCode != http.StatusOK {
				return 0, 0, 0, fmt.Errorf("invoke answered %d: %s", resp.StatusCode, body)
			}
			break
		}
		if time.Since(t0) > 30*time.Second {
			return 0, 0, 0, fmt.Errorf("emulator never answered: %v", perr)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if strings.Contains(string(body), `"errorType"`) {
		return 0, 0, 0, fmt.Errorf("function failed: %s", body)
	}
	// The emulator logs its reports right after answering.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		out := logs.String()
		im, rm := initReport.FindStringSubmatch(out), invokeReport.FindStringSubmatch(out)
		if im != nil && rm != nil {
			return wall, ms(im[1]), ms(rm[1]), nil
		}
	}
	return 0, 0, 0, fmt.Errorf("no INIT REPORT/REPORT line from the emulator")
}

func ms(s string) time.Duration {
	f, _ := strconv.ParseFloat(s, 64)
	return time.Duration(f * float64(time.Millisecond))
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
