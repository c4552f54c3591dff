package emulator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/emulator"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/invokesecret"
	"github.com/terret/terret-ws/internal/localgw"
)

var local = emulator.Local{
	StackName:          "st",
	Region:             "us-east-1",
	AccountID:          "000000000000",
	Tables:             map[string]string{"LogTable": "st-log", "ConnectionsTable": "st-connections", "AgentsTable": "st-agents"},
	ManagementEndpoint: "http://127.0.0.1:3001/local",
	Parameters:         map[string]string{"ReplayLimit": "7", "Approvals": "true"},
	Queues:             map[string]string{"WebhookQueue": "http://127.0.0.1:3002/000000000000/webhook"},
}

// TestFunctionsResolveTemplate: every function of template.yaml gets its environment
// with tables, function names, parameters and the management endpoint resolved
// locally, its timeout and its retry policy.
func TestFunctionsResolveTemplate(t *testing.T) {
	fns, err := emulator.Functions(terretws.Template, local)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]emulator.Function{}
	for _, fn := range fns {
		byName[fn.Name] = fn
		for k, v := range fn.Env {
			if strings.Contains(v, "${") {
				t.Errorf("%s: %s=%q still holds a reference", fn.Name, k, v)
			}
		}
		if want := "st-" + fn.Name; fn.FunctionName != want {
			t.Errorf("%s: FunctionName %q, want %q", fn.Name, fn.FunctionName, want)
		}
	}
	for _, tc := range []struct {
		fn, key, want string
	}{
		{"connect", "LOG_TABLE", "st-log"},
		{"connect", "WS_MANAGEMENT_ENDPOINT", local.ManagementEndpoint},
		{"connect", "DELIVER_FUNCTION", "st-deliver"},
		{"connect", "LOG_LEVEL", "info"}, // Globals, the parameter's default
		{"message", "AGENTS_TABLE", "st-agents"},
		{"message", "RUNNER_FUNCTION", "st-runner"},
		{"message", "REPLAY_LIMIT", "7"},           // a local value
		{"message", "MAX_CONCURRENT_REPLAYS", "4"}, // the default
		{"runner", "APPROVALS", "true"},            // a local value
		{"runner", "MAIN_MODEL", "scripted"},       // the default
		{"disconnect", "CONNECTIONS_TABLE", "st-connections"},
		{"webhook", "WEBHOOK_QUEUE_URL", "http://127.0.0.1:3002/000000000000/webhook"}, // a local queue
		{"webhook", "AGENTS_TABLE", "st-agents"},
		{"http", "LOG_TABLE", "st-log"},
		{"http", "REPLAY_LIMIT", "7"},
	} {
		if got := byName[tc.fn].Env[tc.key]; got != tc.want {
			t.Errorf("%s: %s=%q, want %q", tc.fn, tc.key, got, tc.want)
		}
	}
	for _, tc := range []struct {
		fn      string
		timeout time.Duration
		async   emulator.AsyncConfig
	}{
		{"connect", 29 * time.Second, emulator.DefaultAsync},
		{"message", 29 * time.Second, emulator.DefaultAsync},
		{"disconnect", 29 * time.Second, emulator.DefaultAsync},
		{"deliver", 300 * time.Second, emulator.AsyncConfig{MaxRetryAttempts: 2, MaxEventAge: 300 * time.Second}},
		{"runner", 900 * time.Second, emulator.AsyncConfig{MaxRetryAttempts: 2, MaxEventAge: time.Hour}},
		{"webhook", 60 * time.Second, emulator.DefaultAsync},
		{"http", 900 * time.Second, emulator.DefaultAsync},
	} {
		fn := byName[tc.fn]
		if fn.Timeout != tc.timeout || fn.Async != tc.async {
			t.Errorf("%s: timeout %v, async %+v; want %v, %+v", tc.fn, fn.Timeout, fn.Async, tc.timeout, tc.async)
		}
	}
}

// TestFunctionsRefuseUnknownReference: a variable whose reference has no local value
// is an error naming the function, the variable and the reference.
func TestFunctionsRefuseUnknownReference(t *testing.T) {
	tpl := []byte(`
Resources:
  NewFunction:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          QUEUE_URL: !Ref SomeQueue
`)
	_, err := emulator.Functions(tpl, local)
	if err == nil || !strings.Contains(err.Error(), "NewFunction") || !strings.Contains(err.Error(), "QUEUE_URL") || !strings.Contains(err.Error(), "SomeQueue") {
		t.Fatalf("error %v, want one naming NewFunction, QUEUE_URL and SomeQueue", err)
	}
}

// TestTemplateEnvironmentInits runs every function's bootstrap under the emulator with
// exactly the environment template.yaml gives it (resolved locally): each must pass its
// init phase, where internal/config checks its variables. Without one variable config
// requires, the same bootstrap must fail init naming it — which is what this test
// would report of a template that lacked it.
func TestTemplateEnvironmentInits(t *testing.T) {
	t.Parallel()
	rieBin := rie(t)
	dir := functionsDir(t)
	tables := dynamotest.CreateTables(t)
	accept := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/2015-03-31/functions/") {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(accept.Close)
	loc := local
	loc.Tables = tables
	loc.ManagementEndpoint = accept.URL + "/local"
	fns, err := emulator.Functions(terretws.Template, loc)
	if err != nil {
		t.Fatal(err)
	}
	if len(fns) != 8 {
		t.Fatalf("template.yaml has %d functions, want 8", len(fns))
	}
	opts := emulator.Options{
		Root: repoRoot(t), RIE: rieBin, BuildDir: dir, Logger: slog.New(slog.DiscardHandler),
		Env: map[string]string{
			"DYNAMODB_ENDPOINT": dynamotest.Endpoint(t), "LAMBDA_ENDPOINT": accept.URL,
			"AWS_REGION": dynamolocal.Region, "AWS_ACCESS_KEY_ID": dynamolocal.AccessKey, "AWS_SECRET_ACCESS_KEY": dynamolocal.SecretKey,
		},
	}
	var cases []emulator.Function
	for _, fn := range fns {
		cases = append(cases, fn)
		// The negative control: the template's environment minus the first variable
		// config requires of this function (a table, always required).
		missing := config.Vars(fn.Name)[0]
		broken := fn
		broken.Env = map[string]string{}
		for k, v := range fn.Env {
			if k != missing {
				broken.Env[k] = v
			}
		}
		cases = append(cases, broken)
	}
	var wg sync.WaitGroup
	for _, fn := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			missing := ""
			for _, v := range config.Vars(fn.Name) {
				if _, ok := fn.Env[v]; !ok && missing == "" {
					missing = v
				}
			}
			em, err := emulator.Start(opts, []emulator.Function{fn})
			if err != nil {
				t.Error(err)
				return
			}
			defer em.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// Any event: init runs before it, and the handler's answer to it does not matter.
			_, err = em.Handler(fn.Name).Invoke(ctx, []byte(`{}`))
			switch {
			case missing == "" && errors.Is(err, emulator.ErrInit):
				t.Errorf("%s does not start with the environment template.yaml gives it: %v", fn.Name, err)
			case missing != "" && !errors.Is(err, emulator.ErrInit):
				t.Errorf("%s without %s: invocation error %v, want an init failure", fn.Name, missing, err)
			case missing != "" && !strings.Contains(err.Error(), missing+" is not set"):
				t.Errorf("%s without %s: init failure %q does not name it", fn.Name, missing, err)
			}
			cs := em.Stats()[fn.Name].ColdStarts
			if len(cs) != 1 {
				t.Errorf("%s: %d cold starts, want 1", fn.Name, len(cs))
			} else if missing == "" && cs[0].Init <= 0 {
				t.Errorf("%s: init duration %v, want the emulator's INIT REPORT", fn.Name, cs[0].Init)
			}
		}()
	}
	wg.Wait()
}

// barrier holds probe invocations that ask it (the event's wait URL) until released,
// and checks that no environment (process) serves two invocations at once.
type barrier struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	inside  map[string]int // by pid
	arrived int
	release chan struct{}
}

func newBarrier(t *testing.T) *barrier {
	b := &barrier{t: t, inside: map[string]int{}, release: make(chan struct{})}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pid := r.URL.Query().Get("pid")
		b.mu.Lock()
		b.inside[pid]++
		b.arrived++
		if b.inside[pid] > 1 {
			t.Errorf("environment %s serves two invocations at once", pid)
		}
		b.mu.Unlock()
		select {
		case <-b.release:
		case <-r.Context().Done(): // its environment was killed
		}
		b.mu.Lock()
		b.inside[pid]--
		b.mu.Unlock()
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *barrier) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.arrived
}

type probeResult struct {
	PID int `json:"pid"`
}

// TestPoolGrowsToItsLimit: concurrent invocations each get an environment of their
// own up to the limit; beyond it an invocation waits for one to free up; freed
// environments are reused warm.
func TestPoolGrowsToItsLimit(t *testing.T) {
	t.Parallel()
	con := &console{}
	em := startProbe(t, emulator.Function{}, 2, con)
	h := em.Handler("probe")
	b := newBarrier(t)
	held, _ := json.Marshal(map[string]any{"wait": b.srv.URL})
	var wg sync.WaitGroup
	pids := make(chan int, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := h.Invoke(context.Background(), held)
			var r probeResult
			if err != nil || json.Unmarshal(out, &r) != nil {
				t.Errorf("invoke: %s, %v", out, err)
			}
			pids <- r.PID
		}()
	}
	hang.Until(t, "two invocations inside and one waiting", func() bool { return b.count() == 2 && em.Stats()["probe"].Waits == 1 })
	close(b.release)
	wg.Wait()
	close(pids)
	distinct := map[int]bool{}
	for p := range pids {
		distinct[p] = true
	}
	st := em.Stats()["probe"]
	if len(distinct) != 2 || st.Peak != 2 || len(st.ColdStarts) != 2 || len(st.Warm) != 1 || st.Invocations != 3 {
		t.Fatalf("%d environments served 3 invocations (peak %d, %d cold, %d warm); want 2, 2 cold and 1 warm", len(distinct), st.Peak, len(st.ColdStarts), len(st.Warm))
	}
	// One console line per cold start, with its init time, written once init ended.
	hang.Until(t, "two cold start lines", func() bool { return strings.Count(con.String(), "\n") >= 2 })
	lines := strings.Split(strings.TrimSpace(con.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("console:\n%s\nwant one line per cold start (2)", con)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "lambda emulator: cold start probe environment ") || !strings.Contains(l, ": init ") || !strings.HasSuffix(l, " after the process started") {
			t.Errorf("console line %q, want a cold start of probe with its init time", l)
		}
	}
}

// TestPoolReplacesFailedEnvironments: a timeout, a runtime that exits and a kill each
// fail their invocation the way Lambda reports it and end the environment; the next
// invocation gets a new one. A handler's own error keeps the environment warm.
func TestPoolReplacesFailedEnvironments(t *testing.T) {
	t.Parallel()
	em := startProbe(t, emulator.Function{Timeout: time.Second}, 1)
	h := em.Handler("probe")
	ctx := context.Background()
	pid := func() int {
		t.Helper()
		out, err := h.Invoke(ctx, []byte(`{}`))
		var r probeResult
		if err != nil || json.Unmarshal(out, &r) != nil || r.PID == 0 {
			t.Fatalf("invoke: %s, %v", out, err)
		}
		return r.PID
	}
	first := pid()
	_, err := h.Invoke(ctx, []byte(`{"fail":"no luck"}`))
	var fe *localgw.FunctionError
	if !errors.As(err, &fe) || fe.Message != "no luck" || fe.Type != "errorString" {
		t.Fatalf("handler error: %v, want errorString no luck", err)
	}
	if p := pid(); p != first {
		t.Fatalf("a handler error replaced the environment (pid %d, then %d)", first, p)
	}

	for _, tc := range []struct {
		name   string
		event  string
		kill   bool
		is     error
		fnType string
	}{
		{"timeout", `{"sleep_ms":5000}`, false, emulator.ErrTimeout, "Sandbox.Timedout"},
		{"runtime exit", `{"exit":true}`, false, emulator.ErrEnvironment, "Runtime.ExitError"},
		{"kill", fmt.Sprintf(`{"wait":%q}`, newBarrier(t).srv.URL), true, emulator.ErrEnvironment, "Runtime.ExitError"},
	} {
		before := pid()
		replaced := em.Stats()["probe"].Replaced
		done := make(chan error, 1)
		go func() {
			_, err := h.Invoke(ctx, []byte(tc.event))
			done <- err
		}()
		if tc.kill {
			hang.Until(t, "a busy environment", func() bool { return em.Kill("probe") })
		}
		err := <-done
		if !errors.Is(err, tc.is) || !errors.As(err, &fe) || fe.Type != tc.fnType {
			t.Fatalf("%s: error %v, want %v carrying %s", tc.name, err, tc.is, tc.fnType)
		}
		if after := pid(); after == before {
			t.Fatalf("%s: the environment (pid %d) was kept", tc.name, before)
		}
		if got := em.Stats()["probe"].Replaced; got != replaced+1 {
			t.Fatalf("%s: %d environments replaced, want %d", tc.name, got, replaced+1)
		}
	}
}

// TestAsyncRetryPolicy: attempts of one asynchronous event (one request id) run until
// it has been retried MaximumRetryAttempts times or is older than
// MaximumEventAgeInSeconds; later attempts are dropped without running.
func TestAsyncRetryPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		async emulator.AsyncConfig
		runs  int // attempts that reach the function
	}{
		{"retries", emulator.AsyncConfig{MaxRetryAttempts: 2, MaxEventAge: time.Hour}, 3},
		{"no retry", emulator.AsyncConfig{MaxRetryAttempts: 0, MaxEventAge: time.Hour}, 1},
		{"event too old", emulator.AsyncConfig{MaxRetryAttempts: 2, MaxEventAge: time.Millisecond}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			em := startProbe(t, emulator.Function{Async: tc.async}, 1)
			h := em.Handler("probe")
			ctx := withRequestID("event-1")
			for attempt := 1; attempt <= 4; attempt++ {
				_, err := h.Invoke(ctx, []byte(`{"fail":"again"}`))
				dropped := errors.Is(err, emulator.ErrDropped)
				if want := attempt > tc.runs; dropped != want {
					t.Fatalf("attempt %d: error %v; dropped %v, want %v", attempt, err, dropped, want)
				}
			}
			st := em.Stats()["probe"]
			if st.Invocations != tc.runs || st.Dropped != 4-tc.runs {
				t.Fatalf("%d invocations ran, %d dropped; want %d, %d", st.Invocations, st.Dropped, tc.runs, 4-tc.runs)
			}
			// Another event is not affected, and a success forgets the event.
			if _, err := h.Invoke(withRequestID("event-2"), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestInitFailureNamesTheReason: a bootstrap that exits during init fails the
// invocation with ErrInit and its last words.
func TestInitFailureNamesTheReason(t *testing.T) {
	t.Parallel()
	em := startProbe(t, emulator.Function{Env: map[string]string{"PROBE_FAIL_INIT": "no config"}}, 1)
	_, err := em.Handler("probe").Invoke(context.Background(), []byte(`{}`))
	if !errors.Is(err, emulator.ErrInit) || !strings.Contains(err.Error(), "probe: init refused: no config") {
		t.Fatalf("error %v, want ErrInit with the bootstrap's message", err)
	}
}

// TestExitOnFirstInvocationIsNoInitFailure: a runtime that passed init and exits during
// its first invocation is a runtime failure, not an init failure.
func TestExitOnFirstInvocationIsNoInitFailure(t *testing.T) {
	t.Parallel()
	em := startProbe(t, emulator.Function{}, 1)
	_, err := em.Handler("probe").Invoke(context.Background(), []byte(`{"exit":true}`))
	if !errors.Is(err, emulator.ErrEnvironment) || errors.Is(err, emulator.ErrInit) {
		t.Fatalf("error %v, want ErrEnvironment and not ErrInit", err)
	}
}

// TestInvokeEndpointRefusesStrangers: an environment's rie invoke port is a plain
// loopback port; a POST there without the run's secret (a local process, a web page's
// text/plain POST, a DNS-rebinding page) or with another secret is refused before the
// handler runs, while the pool's own invocations, which carry it, run.
func TestInvokeEndpointRefusesStrangers(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	reached := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(reached.Close)
	em := startProbe(t, emulator.Function{}, 1)
	h := em.Handler("probe")
	event := []byte(fmt.Sprintf(`{"wait":%q}`, reached.URL))
	if _, err := h.Invoke(withRequestID("own-1"), event); err != nil {
		t.Fatalf("the pool's own invocation: %v", err)
	}
	if n := hits.Load(); n != 1 {
		t.Fatalf("the pool's own invocation ran the handler %d times, want 1", n)
	}
	urls := emulator.IdleURLs(em, "probe")
	if len(urls) != 1 {
		t.Fatalf("%d idle environments, want 1", len(urls))
	}
	for _, c := range []struct{ name, clientContext string }{
		{"no client context", ""},
		{"another secret", invokesecret.ClientContext(invokesecret.New())},
	} {
		req, err := http.NewRequest(http.MethodPost, urls[0], bytes.NewReader(event))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Origin", "http://attacker.example")
		if c.clientContext != "" {
			req.Header.Set("X-Amz-Client-Context", c.clientContext)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "invocation refused") {
			t.Errorf("%s: answered %d %s, want the function's refusal", c.name, resp.StatusCode, body)
		}
		if n := hits.Load(); n != 1 {
			t.Errorf("%s: the handler ran (%d runs in all, want 1)", c.name, n)
		}
	}
	// The environment is still the pool's: its next own invocation runs.
	if _, err := h.Invoke(withRequestID("own-2"), event); err != nil {
		t.Fatalf("the pool's invocation after the strangers': %v", err)
	}
	if n := hits.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2", n)
	}
}
