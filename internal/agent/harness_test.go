package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/dynamotest"
	hangbound "github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/invoke"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tables"
	"github.com/terret/terret-ws/internal/tools"
)

const runnerFunction = "terret-runner"

// testLease is short so that a crashed runner's lease expires quickly.
const testLease = time.Second

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

// hang bounds a wait for something the runner is certain to do — an event, a run's
// end, a hook reached — with internal/hang's bound: minutes, grown with the machine's
// load, a hang detector and no claim about speed.
func hang() time.Duration { return hangbound.Bound() }

// testTables creates the template's tables for one test; dynamotest drops them when
// the test ends.
func testTables(t *testing.T) tables.Names {
	t.Helper()
	return dynamotest.CreateTables(t)
}

// invoker stands in for the Lambda Invoke API: an Event invocation runs Runner.Run in
// a goroutine with a fresh context (deadline: the function's timeout), and an error
// is retried twice, as Lambda retries asynchronous events — among them a run whose
// deadline passed before it handed over (a loaded machine's DynamoDB Local can take
// longer than the margin), which leaves its turn open for the retry to resume. A run
// stopped by the crash hook is not retried: its process is gone.
type invoker struct {
	t        *testing.T
	runner   atomic.Pointer[agent.Runner]
	timeout  time.Duration
	retries  int
	calls    atomic.Int64
	active   atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	errs     []error
	finished chan struct{} // signalled after every run
	// hold, if set, keeps every run from starting until it is closed.
	hold chan struct{}
}

func (i *invoker) Invoke(_ context.Context, in *invoke.Input) (*invoke.Output, error) {
	if in.InvocationType != invoke.Event || in.FunctionName != runnerFunction {
		i.t.Errorf("invoke %s as %s, want %s as Event", in.FunctionName, in.InvocationType, runnerFunction)
	}
	var ev agent.RunnerEvent
	if err := json.Unmarshal(in.Payload, &ev); err != nil || ev.AgentID == "" {
		i.t.Errorf("runner payload %s: %v", in.Payload, err)
	}
	i.calls.Add(1)
	i.active.Add(1)
	i.wg.Add(1)
	go func() {
		defer i.wg.Done()
		if i.hold != nil {
			<-i.hold
		}
		defer func() {
			i.active.Add(-1)
			select {
			case i.finished <- struct{}{}:
			default:
			}
		}()
		for attempt := 0; attempt <= i.retries; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), i.timeout)
			err := i.runner.Load().Handle(ctx, ev)
			cancel()
			if err == nil {
				return
			}
			i.mu.Lock()
			i.errs = append(i.errs, err)
			i.mu.Unlock()
			if errors.Is(err, agent.ErrCrashed) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return &invoke.Output{StatusCode: 202}, nil
}

func (i *invoker) errors() []error {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]error(nil), i.errs...)
}

// opts tunes an env.
type opts struct {
	approvals bool
	crash     func(point string) bool
	pause     func(point, agentID string)
	names     tables.Names  // tables to share with other envs (each has its own agent); nil: fresh ones
	timeout   time.Duration // of one runner invocation; default 45 s
	margin    time.Duration
	models    *model.Registry
	tools     *tools.Registry
	profile   *tools.Profile
	wrapLog   func(agent.Log) agent.Log
	wrapDB    func(agent.DB) agent.DB
	retries   int // Lambda's retries of a failed invocation; 0: Lambda's 2
	onAppend  func(context.Context, sessionlog.Event)
	answer    agent.Answerer // the runner's answers to stale injects
	timer     agent.Timer    // approval expiries
	now       func() time.Time
	holdRuns  chan struct{} // runner invocations start once it is closed; nil: at once
}

// env is one agent on the shared tables, with a Service and a Runner wired as the
// message and runner functions are.
type env struct {
	t       *testing.T
	ctx     context.Context
	db      *dynamodb.Client
	log     *sessionlog.Log
	names   tables.Names
	agentID string
	svc     *agent.Service
	runner  *agent.Runner
	inv     *invoker
	cfg     agent.Config
}

func newEnv(t *testing.T, o opts) *env {
	t.Helper()
	names := o.names
	if names == nil {
		names = testTables(t)
	}
	db := dynamotest.Client(t)
	e := &env{t: t, ctx: context.Background(), db: db, log: sessionlog.New(db, names["LogTable"]), names: names,
		agentID: dynamotest.UniqueName("agent-")}
	if o.timeout == 0 {
		o.timeout = 45 * time.Second
	}
	if o.margin == 0 {
		o.margin = 5 * time.Second
	}
	if o.retries == 0 {
		o.retries = 2
	}
	e.inv = &invoker{t: t, timeout: o.timeout, retries: o.retries, finished: make(chan struct{}, 1), hold: o.holdRuns}
	var lg agent.Log = e.log
	if o.onAppend != nil { // as the functions wire delivery's fast path
		lg = sessionlog.Notify(e.log, o.onAppend)
	}
	if o.wrapLog != nil {
		lg = o.wrapLog(lg)
	}
	var adb agent.DB = db
	if o.wrapDB != nil {
		adb = o.wrapDB(adb)
	}
	e.cfg = agent.Config{
		Log: lg, DB: adb, AgentsTable: names["AgentsTable"], Invoker: e.inv, RunnerFunction: runnerFunction,
		Models: o.models, Tools: o.tools, Profile: o.profile, Approvals: o.approvals,
		LeaseDuration: testLease, DeadlineMargin: o.margin, Crash: o.crash, Pause: o.pause,
		Answer: o.answer, Timer: o.timer, Now: o.now,
	}
	var err error
	if e.svc, err = agent.New(e.cfg); err != nil {
		t.Fatal(err)
	}
	if e.runner, err = agent.NewRunner(e.cfg); err != nil {
		t.Fatal(err)
	}
	e.inv.runner.Store(e.runner)
	if _, err := e.log.Create(e.ctx, e.agentID); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { e.inv.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(hang()):
			t.Errorf("runner invocations still running at the end of the test")
		}
	})
	return e
}

// restart replaces the Service and the Runner with new instances of the same
// configuration, as a redeploy or a cold start would (nothing in process survives).
func (e *env) restart(change func(*agent.Config)) {
	e.t.Helper()
	cfg := e.cfg
	if change != nil {
		change(&cfg)
	}
	var err error
	if e.svc, err = agent.New(cfg); err != nil {
		e.t.Fatal(err)
	}
	if e.runner, err = agent.NewRunner(cfg); err != nil {
		e.t.Fatal(err)
	}
	e.inv.runner.Store(e.runner)
	e.cfg = cfg
}

func (e *env) inject(text string, wake bool) {
	e.t.Helper()
	if err := e.svc.Inject(e.ctx, e.agentID, text, wake); err != nil {
		e.t.Fatalf("inject %q: %v", text, err)
	}
}

func (e *env) events() []sessionlog.Event {
	e.t.Helper()
	evs, err := e.log.Read(e.ctx, e.agentID, 0, 1<<30)
	if err != nil {
		e.t.Fatalf("read log: %v", err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i) {
			e.t.Fatalf("log has a gap or duplicate at %d (seq %d)", i, ev.Seq)
		}
	}
	return evs
}

func (e *env) tip() int64 {
	e.t.Helper()
	tip, err := e.log.Tip(e.ctx, e.agentID)
	if err != nil {
		e.t.Fatal(err)
	}
	return tip
}

// waitFor polls the log until cond holds, and returns the events it held for. Only a
// hang ends the wait (hang).
func (e *env) waitFor(what string, cond func([]sessionlog.Event) bool) []sessionlog.Event {
	e.t.Helper()
	var evs []sessionlog.Event
	hangbound.UntilNil(e.t, what, func() error {
		if evs = e.events(); cond(evs) {
			return nil
		}
		return fmt.Errorf("runner errors %v; log:\n%s", e.inv.errors(), dump(evs))
	})
	return evs
}

func (e *env) waitTurnEnds(n int) []sessionlog.Event {
	e.t.Helper()
	return e.waitFor(fmt.Sprintf("%d turn/end", n), func(evs []sessionlog.Event) bool {
		return count(evs, agent.TypeTurnEnd) >= n
	})
}

// settle waits until no runner invocation is running.
func (e *env) settle() {
	e.t.Helper()
	deadline := time.Now().Add(hang())
	for e.inv.active.Load() > 0 {
		if time.Now().After(deadline) {
			e.t.Fatalf("runner invocations did not finish")
		}
		select {
		case <-e.inv.finished:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// noErrors fails the test if a runner invocation returned an error other than the
// crash hook's, or than its own deadline passing: on a loaded machine a step can take
// longer than the margin, and Lambda's retry (invoker) resumes the open turn — what the
// test checks of the log says whether anything was lost or doubled.
func (e *env) noErrors() {
	e.t.Helper()
	for _, err := range e.inv.errors() {
		if !errors.Is(err, agent.ErrCrashed) && !errors.Is(err, context.DeadlineExceeded) {
			e.t.Errorf("runner returned %v", err)
		}
	}
}

func count(evs []sessionlog.Event, typ string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func ofType(evs []sessionlog.Event, typ string) []sessionlog.Event {
	var out []sessionlog.Event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func typesOf(evs []sessionlog.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}

// seqOf is the seq of the first event of typ whose payload contains all of want.
func indexOf(evs []sessionlog.Event, typ string, want map[string]any) int {
	for i, ev := range evs {
		if ev.Type != typ {
			continue
		}
		p := payload(ev)
		ok := true
		for k, v := range want {
			if fmt.Sprint(p[k]) != fmt.Sprint(v) {
				ok = false
			}
		}
		if ok {
			return i
		}
	}
	return -1
}

func payload(ev sessionlog.Event) map[string]any {
	var p map[string]any
	_ = json.Unmarshal(ev.Payload, &p)
	return p
}

func str(ev sessionlog.Event, field string) string {
	v, _ := payload(ev)[field].(string)
	return v
}

// chunkText concatenates the assistant/chunk texts of evs.
func chunkText(evs []sessionlog.Event) string {
	var b strings.Builder
	for _, ev := range ofType(evs, agent.TypeAssistantChunk) {
		b.WriteString(str(ev, "text"))
	}
	return b.String()
}

func lastTurnEnd(t *testing.T, evs []sessionlog.Event) map[string]any {
	t.Helper()
	ends := ofType(evs, agent.TypeTurnEnd)
	if len(ends) == 0 {
		t.Fatalf("no turn/end in\n%s", dump(evs))
	}
	return payload(ends[len(ends)-1])
}

func dump(evs []sessionlog.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		p := string(ev.Payload)
		if len(p) > 200 {
			p = p[:200] + "…"
		}
		fmt.Fprintf(&b, "  %d %s %s\n", ev.Seq, ev.Type, p)
	}
	return b.String()
}

func script(steps ...string) string {
	return `{"script":[` + strings.Join(steps, ",") + `]}`
}

// crashOnce returns a crash hook that stops the runner the first time it reaches
// point, and reports through the channel when it did.
func crashOnce(point string) (func(string) bool, <-chan struct{}) {
	var once sync.Once
	crashed := make(chan struct{})
	return func(p string) bool {
		hit := false
		if p == point {
			once.Do(func() { hit = true; close(crashed) })
		}
		return hit
	}, crashed
}

func waitChan(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hang()):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func dumpAt(evs []sessionlog.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "  %d %s %s %.120s\n", ev.Seq, ev.At[11:], ev.Type, ev.Payload)
	}
	return b.String()
}
