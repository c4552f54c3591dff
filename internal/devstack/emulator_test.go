package devstack_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/emulator"
	hangbound "github.com/terret/terret-ws/internal/hang"
)

// emulatorEnv, set to 1, makes the test rig start every stack in emulated mode: the
// built bootstraps under aws-lambda-rie (scripts/test.sh runs a subset so).
const emulatorEnv = "TERRET_TEST_LAMBDA_EMULATOR"

func emulated() bool { return os.Getenv(emulatorEnv) == "1" }

// inProcess, as Options.LambdaEmulator, keeps a stack in-process whatever the rig's mode.
var inProcess = &devstack.LambdaEmulator{}

// bootstraps builds the functions once per test binary, into build/emulator-test.
var bootstraps struct {
	once sync.Once
	dir  string
	err  error
}

// emulatorOptions is the rig's emulated mode: one build for every stack of the run.
func emulatorOptions(t *testing.T) *devstack.LambdaEmulator {
	t.Helper()
	bootstraps.once.Do(func() {
		root, err := dynamolocal.RepoRoot()
		if err != nil {
			bootstraps.err = err
			return
		}
		bootstraps.dir = filepath.Join(root, "build", "emulator-test")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		bootstraps.err = emulator.Build(ctx, root, bootstraps.dir)
	})
	if bootstraps.err != nil {
		t.Fatalf("build the functions for the emulator: %v", bootstraps.err)
	}
	return &devstack.LambdaEmulator{BuildDir: bootstraps.dir, SkipBuild: true, Console: testLogOut()}
}

// requireEmulated skips a test of emulated mode unless the rig runs in it.
func requireEmulated(t *testing.T) {
	t.Helper()
	if !emulated() {
		t.Skipf("runs in emulated mode only (%s=1; scripts/test.sh sets it for its second pass)", emulatorEnv)
	}
}

// TestDisconnectForgetsConnection: closing the socket runs $disconnect, which deletes
// the connection's record and the agent's ownership record.
func TestDisconnectForgetsConnection(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	c := e.dial(t, "a1", e.token(t, "a1"))
	c.hello("a1")
	store := connStore(e)
	ctx := context.Background()
	owner, err := store.Owner(ctx, "a1")
	if err != nil {
		t.Fatalf("owner of a1 after hello: %v", err)
	}
	if _, err := store.Conn(ctx, owner.ConnID); err != nil {
		t.Fatalf("connection %s after hello: %v", owner.ConnID, err)
	}
	c.c.CloseNow()
	hangbound.Until(t, "a1's ownership record deleted after its socket closed", func() bool {
		_, err := store.Owner(ctx, "a1")
		if err != nil && !errors.Is(err, connections.ErrNotFound) {
			t.Fatal(err)
		}
		return errors.Is(err, connections.ErrNotFound)
	})
	if _, err := store.Conn(ctx, owner.ConnID); !errors.Is(err, connections.ErrNotFound) {
		t.Fatalf("connection %s after $disconnect: %v, want not found", owner.ConnID, err)
	}
}

// TestEmulatorRunnerKilledMidInvocation: the runner's environment is killed while it is
// held at the run of the turn's sleep tool (agent.PauseRun through the stack's pause
// server: its tool/call logged, its tool/result not): the asynchronous
// invocation fails, the local Lambda retries it in a new environment, and the retry
// takes over the dead lease and finishes the turn — with no further stimulus, every
// event exactly once, in seq order.
func TestEmulatorRunnerKilledMidInvocation(t *testing.T) {
	t.Parallel()
	requireEmulated(t)
	e := startRuntimeStack(t, devstack.Options{})
	emu := e.stack.Emulator()
	runFlows(t, e, flow{"runner killed", func(a *agentConn) {
		script := sleepThenSay("after the kill")
		run := a.arm(agent.PauseRun)
		a.inject(script, true)
		run.wait(a)
		a.delivered()
		if !emu.Kill("runner") {
			a.failf("no runner environment was running the turn")
		}
		run.release() // the killed runner's post is gone; this lets its hook call return
		evs, err := a.e.log.Read(context.Background(), a.agent, 0, 1000)
		if err != nil {
			a.failf("read log: %v", err)
		}
		for _, ev := range evs {
			if ev.Type == "tool/result" {
				a.failf("the sleep ended before the kill: the test missed its window")
			}
		}
		id := a.startTurn(script)
		a.follow(id, callW("sleep", windowArgs), resultW(windowResult), answerW("after the kill", 2), endW("completed", ""))
		a.titled()
		a.settled(1) // the killed attempt failed; its retry returned
		for typ, n := range map[string]int{"turn/start": 1, "tool/call": 1, "tool/result": 1, "turn/end": 1} {
			if got := a.count(typ); got != n {
				a.failf("%s %d times, want %d", typ, got, n)
			}
		}
		a.matchLog()
	}})
	st := emu.Stats()["runner"]
	if st.Replaced < 1 || st.Dropped != 0 || len(st.ColdStarts) < 2 {
		t.Fatalf("runner: %d environments replaced, %d events dropped, %d cold starts; want the killed one replaced by a new one and nothing dropped",
			st.Replaced, st.Dropped, len(st.ColdStarts))
	}
}

// delivered waits until every event in the log has been posted and its sender has let
// the connection's lease go: a sender killed between a post and the write recording it
// makes its successor post those frames again (docs/architecture.md, "a sender dies"),
// which is not what a runner crash test is about.
func (a *agentConn) delivered() {
	store := connStore(a.e)
	err := hangbound.Wait("delivery of "+a.agent+" settled", func() error {
		o, err := store.Owner(context.Background(), a.agent)
		if err != nil {
			return fmt.Errorf("owner: %w", err)
		}
		if tip := a.tip(); o.Next <= tip || o.Lease != "" {
			return fmt.Errorf("cursor %d, lease %q, tip %d", o.Next, o.Lease, tip)
		}
		return nil
	})
	if err != nil {
		a.failf("%v", err)
	}
}

// invocationLog collects the gateway's and the pollers' "invoked" debug lines: per
// function, how long each invocation took as its caller saw it.
type invocationLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *invocationLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// durations returns the invocations by function (the template's name with the stack
// prefix stripped), in order.
func (l *invocationLog) durations(prefix string) map[string][]time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]time.Duration{}
	sc := bufio.NewScanner(bytes.NewReader(l.buf.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec struct {
			Msg      string  `json:"msg"`
			Function string  `json:"function"`
			Duration float64 `json:"duration_ms"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Msg != "invoked" || rec.Function == "" {
			continue
		}
		fn := strings.TrimPrefix(rec.Function, prefix)
		if fn == "default" { // the gateway names a route's function after its key
			fn = "message"
		}
		out[fn] = append(out[fn], time.Duration(rec.Duration*float64(time.Millisecond)))
	}
	return out
}

// TestEmulatorColdAndWarmTimes measures each function's first (cold) and later (warm)
// invocations, as the gateway and the pollers see them, under the same workload in
// emulated mode and in-process, and logs the two side by side (go test -v). Each agent
// connects, sends a bad frame, runs one plain-text turn and disconnects.
func TestEmulatorColdAndWarmTimes(t *testing.T) {
	requireEmulated(t)
	const agents = 6
	type run struct {
		times map[string][]time.Duration
		stats map[string]emulator.Stats
	}
	measure := func(o devstack.Options) run {
		logs := &invocationLog{}
		o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		e := startRuntimeStack(t, o)
		for i := range agents {
			// One agent after the other, so that later invocations find warm environments.
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("agent %d: %v", i, r)
					}
				}()
				a := &agentConn{t: t, e: e, agent: fmt.Sprintf("m%d", i)}
				a.open()
				a.send(`not json`)
				if f := a.frame(hang()); f.Type != "error" || f.Code != "bad_frame" {
					a.fatalf("answer to a bad frame: %s", f)
				}
				a.inject("measure me", true)
				id := a.startTurn("measure me")
				a.follow(id, answerW("measure me", 0), endW("completed", ""), titledW("measure me"))
				a.c.c.CloseNow()
			}()
		}
		r := run{times: logs.durations(e.stack.Tables["LogTable"][:len(e.stack.Tables["LogTable"])-len("log")])}
		if emu := e.stack.Emulator(); emu != nil {
			r.stats = emu.Stats()
		}
		return r
	}
	in := measure(devstack.Options{LambdaEmulator: inProcess})
	em := measure(devstack.Options{LambdaEmulator: emulatorOptions(t)})

	var b strings.Builder
	fmt.Fprintf(&b, "\n%-11s %29s   %s\n", "", "in-process", "emulated (aws-lambda-rie)")
	fmt.Fprintf(&b, "%-11s %9s %9s %9s   %9s %9s %9s %9s %5s\n", "function", "first", "warm p50", "n", "cold p50", "init p50", "warm p50", "n", "envs")
	for _, fn := range []string{"connect", "message", "disconnect", "deliver", "runner"} {
		ti, te, st := in.times[fn], em.times[fn], em.stats[fn]
		if len(ti) < 2 || len(te) < 2 {
			t.Errorf("%s: %d invocations in-process, %d emulated; want at least 2 each", fn, len(ti), len(te))
			continue
		}
		if len(st.ColdStarts) == 0 {
			t.Errorf("%s: no cold start recorded in emulated mode", fn)
			continue
		}
		var cold, inits []time.Duration
		for _, c := range st.ColdStarts {
			if c.Err != nil || c.Init <= 0 {
				t.Errorf("%s: cold start of environment %d: init %v, error %v", fn, c.Environment, c.Init, c.Err)
			}
			cold, inits = append(cold, c.Total), append(inits, c.Init)
		}
		fmt.Fprintf(&b, "%-11s %9s %9s %9d   %9s %9s %9s %9d %5d\n", fn,
			round(ti[0]), round(median(ti[1:])), len(ti),
			round(median(cold)), round(median(inits)), round(median(st.Warm)), len(te), st.Peak)
	}
	t.Log(b.String())
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func round(d time.Duration) string {
	if d < 10*time.Millisecond {
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}
