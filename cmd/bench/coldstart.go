package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
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
	"github.com/terret/terret-ws/internal/httpapi"
	"github.com/terret/terret-ws/internal/schedule"
	"github.com/terret/terret-ws/internal/sessionlog"
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
	for _, n := range names {
		if !contains(coldOrder, n) {
			return fmt.Errorf("cold start: no sample event for function %s (coldOrder, coldEvents)", n)
		}
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
	if err := b.setColdSchedule(ctx); err != nil {
		return err
	}
	origin, err := originSecret()
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
	var fireAt time.Time
	for r := 0; r < b.o.coldRuns; r++ {
		// Each round a new connection id and a later due time, so that every round's
		// schedule fire is a fire, not a duplicate.
		if now := time.Now().UTC().Truncate(time.Second); now.After(fireAt) {
			fireAt = now
		} else {
			fireAt = fireAt.Add(time.Second)
		}
		subs := coldSubs{ConnID: fmt.Sprintf("bench%02dcold=", r), Token: token, Origin: origin, FireAt: fireAt.Format(time.RFC3339)}
		for _, n := range coldOrder {
			res, ok := results[n]
			if !ok {
				continue
			}
			event, err := coldEvent(n, subs)
			if err != nil {
				return err
			}
			env, err := b.lambdaEnv(n, stub.URL, origin)
			if err != nil {
				return err
			}
			bootstrap, _ := filepath.Abs(filepath.Join(dir, runtime.GOARCH, n, "bootstrap"))
			wall, init, first, err := b.coldOnce(ctx, rie, bootstrap, env, event, func(body []byte) error { return coldAnswer(n, body) })
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
	return nil
}

// coldOrder is the order the functions start in, each round. Connect first (it creates
// the session and the connection record the others use), disconnect last.
var coldOrder = []string{"connect", "message", "deliver", "runner", "http", "schedule", "webhook", "disconnect", "hello"}

// coldEvents names each function's sample event in events/ (hello gets {}).
//
//   - connect, message (a subscribe), disconnect: API Gateway's WebSocket route events,
//     with this round's connection id; connect's with a valid token.
//   - deliver: a log stream batch of agent-1; runner: agent-1's run (an empty inbox).
//   - http: a function URL request, as CloudFront forwards it, for a page of agent-1's
//     log (GET /agents/agent-1/events?from_seq=0): the origin header and the bearer token
//     checked, the token's hash read, then the log.
//   - schedule: EventBridge Scheduler's fire of agent-2's schedule daily-digest, which
//     setColdSchedule sets: the record read, then the inject queued (a transaction on
//     the agents table) and the runner invoked (the stub). agent-2, not agent-1: a fire
//     is an inject that wakes the agent, and the next round's runner would run its turn.
//   - webhook: an attempt off the webhook queue (SQS) for agent-1, whose profile names
//     no webhook: the profile read, and the attempt dropped as no longer wanted — no
//     receiver is called.
var coldEvents = map[string]string{
	"connect": "connect.json", "message": "message-subscribe.json", "disconnect": "disconnect.json",
	"deliver": "deliver-log-stream.json", "runner": "runner.json", "http": "http-events-page.json",
	"schedule": "schedule-fire.json", "webhook": "webhook-attempt.json",
}

// coldScheduleText is the text of the schedule the schedule function fires.
const coldScheduleText = "Summarize what changed in the deploy dashboard since yesterday and flag anything red."

// setColdSchedule sets the schedule events/schedule-fire.json fires: every 24 hours, so
// that no engine fires it while the bench runs, and it stays (a one-shot's fire deletes
// it). Records only, as terret dev's are: the schedule function's fire needs no engine.
func (b *bench) setColdSchedule(ctx context.Context) error {
	raw, err := os.ReadFile(filepath.Join("events", coldEvents["schedule"]))
	if err != nil {
		return err
	}
	var in schedule.FireInput
	if err := json.Unmarshal(raw, &in); err != nil {
		return fmt.Errorf("cold start: %s: %w", coldEvents["schedule"], err)
	}
	c := b.st.cfg
	svc := schedule.New(schedule.Config{DB: b.st.raw, Table: c.AgentsTable, Log: sessionlog.New(b.st.raw, c.LogTable),
		Bounds: schedule.Bounds{MinEvery: schedule.EventBridgeMinEvery}, Logger: b.st.logger})
	_, err = svc.Set(ctx, in.AgentID, schedule.Spec{ID: in.ScheduleID, Text: coldScheduleText, Every: "24h"})
	if err != nil {
		return fmt.Errorf("cold start: set the schedule %s of %s: %w", in.ScheduleID, in.AgentID, err)
	}
	return nil
}

// originSecret is this run's ORIGIN_SECRET (as template.yaml's OriginSecret: 32–128 of
// A-Z a-z 0-9 _ -), which connect's and http's sample events carry as CloudFront's
// origin header.
func originSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
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

// coldSubs are what a round substitutes in the sample events.
type coldSubs struct {
	ConnID string // the WebSocket events' connection id
	Token  string // a current token of agent-1 (connect's and http's Authorization)
	Origin string // ORIGIN_SECRET, as CloudFront's origin header (connect, http)
	FireAt string // the schedule fire's due time
}

// coldEvent is the first event a function gets: its sample of events/ (coldEvents),
// with this round's substitutions.
func coldEvent(name string, s coldSubs) ([]byte, error) {
	if name == "hello" {
		return []byte(`{}`), nil
	}
	file, ok := coldEvents[name]
	if !ok {
		return nil, fmt.Errorf("cold start: no sample event for function %s", name)
	}
	raw, err := os.ReadFile(filepath.Join("events", file))
	if err != nil {
		return nil, err
	}
	switch name {
	case "connect", "message", "disconnect":
		var ev events.APIGatewayWebsocketProxyRequest
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		ev.RequestContext.ConnectionID = s.ConnID
		if name == "connect" {
			ev.Headers["Authorization"] = "Bearer " + s.Token
			ev.MultiValueHeaders["Authorization"] = []string{"Bearer " + s.Token}
			ev.Headers[httpapi.OriginHeader] = s.Origin
			ev.MultiValueHeaders[httpapi.OriginHeader] = []string{s.Origin}
		}
		return json.Marshal(ev)
	case "http":
		var ev events.LambdaFunctionURLRequest
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		ev.Headers["authorization"] = "Bearer " + s.Token
		ev.Headers[strings.ToLower(httpapi.OriginHeader)] = s.Origin
		return json.Marshal(ev)
	case "schedule":
		var in schedule.FireInput
		if err := json.Unmarshal(raw, &in); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		in.FireAt = s.FireAt
		return json.Marshal(in)
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("%s: not JSON", file)
	}
	return raw, nil
}

// coldAnswer checks a first invocation's answer beyond the emulator's error: a
// function that answers a refusal, or reports failed records, did not do the work its
// cold start is timed on.
func coldAnswer(name string, body []byte) error {
	switch name {
	case "connect":
		var resp events.APIGatewayProxyResponse
		if err := json.Unmarshal(body, &resp); err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("connect answered %s", body)
		}
	case "http":
		// A streamed function URL answer: the prelude (status and headers as JSON),
		// eight NUL bytes, then the body.
		prelude, rest, ok := bytes.Cut(body, make([]byte, 8))
		var p struct {
			StatusCode int `json:"statusCode"`
		}
		if !ok || json.Unmarshal(prelude, &p) != nil || p.StatusCode != http.StatusOK {
			return fmt.Errorf("http answered %q", body)
		}
		var page httpapi.EventsPage
		if err := json.Unmarshal(rest, &page); err != nil || len(page.Events) == 0 {
			return fmt.Errorf("http answered no page of the log: %q", rest)
		}
	case "deliver", "webhook":
		var resp struct {
			Failures []json.RawMessage `json:"batchItemFailures"`
		}
		if err := json.Unmarshal(body, &resp); err != nil || len(resp.Failures) > 0 {
			return fmt.Errorf("%s answered %s", name, body)
		}
	}
	return nil
}

// lambdaEnv is the environment of a function under the emulator: every variable
// config.Vars names for it, from this run's configuration, with the @connections and
// Lambda APIs pointed at stub.
//
// The schedule engine's variables name a group, target and role that do not exist:
// no function calls EventBridge Scheduler on its sample event's path (the scheduler
// client has no local endpoint; a call would fail the cold start). The webhook queue's
// URL is on the stub (a local queue's origin is its SQS endpoint); the sample attempt
// sends nothing to it.
func (b *bench) lambdaEnv(name, stub, origin string) ([]string, error) {
	c := b.st.cfg
	account, region := "123456789012", dynamolocal.Region
	values := map[string]string{
		"LOG_TABLE": c.LogTable, "CONNECTIONS_TABLE": c.ConnectionsTable, "AGENTS_TABLE": c.AgentsTable,
		"WS_MANAGEMENT_ENDPOINT": stub + "/prod", "DELIVER_FUNCTION": "deliver", "RUNNER_FUNCTION": "runner",
		"REPLAY_LIMIT": strconv.Itoa(c.ReplayLimit), "MAX_CONCURRENT_REPLAYS": strconv.Itoa(c.MaxConcurrentReplays),
		"OUTBOUND_QUEUE": strconv.Itoa(c.OutboundQueue), "APPROVALS": "false", "MAIN_MODEL": "scripted",
		"TITLER_MODEL": "scripted", "AGENT_PROFILE": "", "RETENTION_DAYS": strconv.Itoa(c.RetentionDays),
		"MAX_OBSERVERS": strconv.Itoa(cmp.Or(c.MaxObservers, config.DefaultMaxObservers)), "ORIGIN_SECRET": origin,
		"SCHEDULE_GROUP":      "bench-schedules",
		"SCHEDULE_TARGET_ARN": "arn:aws:lambda:" + region + ":" + account + ":function:bench-schedule",
		"SCHEDULE_ROLE_ARN":   "arn:aws:iam::" + account + ":role/bench-scheduler",
		"WEBHOOK_QUEUE_URL":   stub + "/" + account + "/bench-webhooks",
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
		val, ok := values[v]
		if !ok {
			return nil, fmt.Errorf("cold start: no value for %s, which function %s reads", v, name)
		}
		env = append(env, v+"="+val)
	}
	return env, nil
}

var (
	initReport   = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)
	invokeReport = regexp.MustCompile(`REPORT RequestId: \S+\s+(?:Init Duration: [0-9.]+ ms\s+)?Duration: ([0-9.]+) ms`)
)

// coldOnce starts the emulator with bootstrap and invokes it once with event as soon as
// it listens.
func (b *bench) coldOnce(ctx context.Context, rie, bootstrap string, env []string, event []byte, check func([]byte) error) (wall, init, first time.Duration, err error) {
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
	if err := check(body); err != nil {
		return 0, 0, 0, err
	}
	// The emulator logs its reports right after answering.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		out := logs.String()
		im, rm := initReport.FindStringSubmatch(out), invokeReport.FindStringSubmatch(out)
		if im != nil && rm != nil {
			// What the function did, for -log at -log-level info.
			answer := string(body)
			if len(answer) > 2048 {
				answer = answer[:2048] + "…"
			}
			b.st.logger.InfoContext(ctx, "cold start: first invocation", "function", filepath.Base(filepath.Dir(bootstrap)),
				"answer", answer, "output", strings.Split(strings.TrimSpace(out), "\n"))
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
