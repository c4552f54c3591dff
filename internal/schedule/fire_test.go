package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/invoke"
	"github.com/terret/terret-ws/internal/schedule"
	"github.com/terret/terret-ws/internal/sessiondata"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
)

// invokes counts the runner invocations a fire asks for (no runner runs here: the
// inbox is what a test reads).
type invokes struct{ n atomic.Int64 }

func (i *invokes) Invoke(context.Context, *invoke.Input) (*invoke.Output, error) {
	i.n.Add(1)
	return &invoke.Output{StatusCode: 202}, nil
}

// clock is a time the test sets.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

type rig struct {
	svc   *schedule.Service
	log   *sessionlog.Log
	inv   *invokes
	clock *clock
	db    agent.DB
	table string
	// the other tables, for session operations
	logTable, connTable string
}

func newRig(t *testing.T, defaultProfile string) rig {
	t.Helper()
	names := dynamotest.CreateTables(t)
	db := dynamotest.Client(t)
	lg := sessionlog.New(db, names["LogTable"])
	inv := &invokes{}
	clk := &clock{t: time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)}
	ag, err := agent.New(agent.Config{Log: lg, DB: db, AgentsTable: names["AgentsTable"], Invoker: inv, RunnerFunction: "runner", Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	svc := schedule.New(schedule.Config{DB: db, Table: names["AgentsTable"], Log: lg, Injector: ag, Now: clk.now,
		Bounds: schedule.Bounds{MinEvery: time.Second, MaxText: 1 << 16}, DefaultProfile: defaultProfile})
	return rig{svc: svc, log: lg, inv: inv, clock: clk, db: db, table: names["AgentsTable"], logTable: names["LogTable"], connTable: names["ConnectionsTable"]}
}

func (r rig) events(t *testing.T, agentID string) []sessionlog.Event {
	t.Helper()
	evs, err := r.log.Read(context.Background(), agentID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func types(evs []sessionlog.Event) string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return strings.Join(out, " ")
}

// TestFireOnceUnderDuplicates: the same (schedule, due time) delivered by many
// goroutines at once queues one inject and starts the runner once; a later due time
// fires again. Run with -race.
func TestFireOnceUnderDuplicates(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "")
	sc, err := r.svc.Set(ctx, "a1", schedule.Spec{Text: "tick", Every: "10s", ID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	due, _ := schedule.ParseTime(sc.NextAt)
	r.clock.set(due)
	for round, due := range []time.Time{due, due.Add(10 * time.Second)} {
		r.clock.set(due)
		var wg sync.WaitGroup
		var fired atomic.Int64
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := r.svc.Fire(ctx, "a1", "t", due)
				if err != nil {
					t.Errorf("Fire: %v", err)
				}
				if out == schedule.Fired {
					fired.Add(1)
				}
			}()
		}
		wg.Wait()
		if fired.Load() != 1 || r.inv.n.Load() != int64(round+1) {
			t.Fatalf("round %d: %d fires reported, %d runner invocations; want 1 and %d", round, fired.Load(), r.inv.n.Load(), round+1)
		}
	}
	// An older due time, delivered late, is one already covered.
	if out, err := r.svc.Fire(ctx, "a1", "t", due); err != nil || out != schedule.Duplicate {
		t.Fatalf("late delivery of an old due time: %v, %v; want duplicate", out, err)
	}
	got, err := r.svc.Get(ctx, "a1", "t")
	if err != nil {
		t.Fatal(err)
	}
	if want := due.Add(20 * time.Second).UTC().Format(schedule.TimeFormat); got.NextAt != want {
		t.Fatalf("next_at %s, want %s", got.NextAt, want)
	}
}

// TestFireCoalescesMissed: a schedule down for an hour fires once for the oldest due
// time and its next due time is after the present.
func TestFireCoalescesMissed(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "")
	sc, err := r.svc.Set(ctx, "a1", schedule.Spec{Text: "tick", Every: "10s", ID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	due, _ := schedule.ParseTime(sc.NextAt)
	r.clock.set(due.Add(time.Hour + 5*time.Second))
	if out, err := r.svc.Fire(ctx, "a1", "t", due); err != nil || out != schedule.Fired {
		t.Fatalf("Fire: %v, %v", out, err)
	}
	got, _ := r.svc.Get(ctx, "a1", "t")
	if want := due.Add(time.Hour + 10*time.Second).Format(schedule.TimeFormat); got.NextAt != want {
		t.Fatalf("next_at after an hour down %s, want %s (the missed ones as one)", got.NextAt, want)
	}
	if r.inv.n.Load() != 1 {
		t.Fatalf("%d runner invocations, want 1", r.inv.n.Load())
	}
}

// TestOneShotGoes: a one-shot fires once and its record and count go with it.
func TestOneShotGoes(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, `{"quotas":{"schedules":1}}`)
	sc, err := r.svc.Set(ctx, "a1", schedule.Spec{Text: "once", In: "90s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.svc.Set(ctx, "a1", schedule.Spec{Text: "two", In: "90s"}); !errors.Is(err, schedule.ErrQuota) {
		t.Fatalf("a second schedule past quotas.schedules 1: %v, want ErrQuota", err)
	}
	due, _ := schedule.ParseTime(sc.NextAt)
	r.clock.set(due.Add(time.Second))
	if out, err := r.svc.Fire(ctx, "a1", sc.ID, due); err != nil || out != schedule.Fired {
		t.Fatalf("Fire: %v, %v", out, err)
	}
	if out, _ := r.svc.Fire(ctx, "a1", sc.ID, due); out != schedule.Duplicate {
		t.Fatalf("second delivery: %v, want duplicate", out)
	}
	if list, _ := r.svc.List(ctx, "a1"); len(list) != 0 {
		t.Fatalf("schedules after the one-shot fired: %+v", list)
	}
	if _, err := r.svc.Set(ctx, "a1", schedule.Spec{Text: "two", In: "90s"}); err != nil {
		t.Fatalf("the count went with the one-shot, a new one fits: %v", err)
	}
}

// TestSetListCancel: the durable events of a schedule's life, and the quota default.
func TestSetListCancel(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "")
	for i := range schedule.DefaultMaxSchedules {
		if _, err := r.svc.Set(ctx, "a1", schedule.Spec{Text: "x", Every: "1h", ID: "s" + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.svc.Set(ctx, "a1", schedule.Spec{Text: "x", Every: "1h"}); !errors.Is(err, schedule.ErrQuota) {
		t.Fatalf("schedule %d: %v, want ErrQuota", schedule.DefaultMaxSchedules+1, err)
	}
	if _, err := r.svc.Set(ctx, "a1", schedule.Spec{Text: "replaced", Every: "2h", ID: "sa"}); err != nil {
		t.Fatalf("replacing an id at the quota: %v", err)
	}
	if err := r.svc.Cancel(ctx, "a1", "sb"); err != nil {
		t.Fatal(err)
	}
	if err := r.svc.Cancel(ctx, "a1", "sb"); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("cancel twice: %v, want ErrNotFound", err)
	}
	list, err := r.svc.List(ctx, "a1")
	if err != nil || len(list) != schedule.DefaultMaxSchedules-1 || list[0].ID != "sa" || list[0].Text != "replaced" {
		t.Fatalf("list: %d schedules, first %+v, %v", len(list), list[0], err)
	}
	evs := r.events(t, "a1")
	last := evs[len(evs)-2:]
	if types(last) != "schedule/set schedule/cancelled" {
		t.Fatalf("log tail %s", types(last))
	}
	var set map[string]any
	_ = json.Unmarshal(last[0].Payload, &set)
	if set["schedule_id"] != "sa" || set["text"] != "replaced" || set["every"] != "2h" || set["next_at"] == "" {
		t.Fatalf("schedule/set payload %s", last[0].Payload)
	}
	if string(last[1].Payload) != `{"schedule_id":"sb"}` {
		t.Fatalf("schedule/cancelled payload %s", last[1].Payload)
	}
}

// TestRefusedFireLogged: a fire the agent refuses (its inbox full) is logged as
// schedule/refused, once.
func TestRefusedFireLogged(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "")
	ag, err := agent.New(agent.Config{Log: r.log, DB: r.db, AgentsTable: r.table, Invoker: r.inv, RunnerFunction: "runner"})
	if err != nil {
		t.Fatal(err)
	}
	for range agent.MaxInboxItems + agent.WakeReserve + agent.MaxInline {
		if err := ag.Inject(ctx, "a1", strings.Repeat("x", agent.InlineTextBytes+1), true); err != nil {
			break
		}
	}
	sc, err := r.svc.Set(ctx, "a1", schedule.Spec{Text: "tick", Every: "10s", ID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	due, _ := schedule.ParseTime(sc.NextAt)
	r.clock.set(due)
	for i := range 2 {
		out, err := r.svc.Fire(ctx, "a1", "t", due)
		if want := []schedule.Outcome{schedule.Refused, schedule.Duplicate}[i]; err != nil || out != want {
			t.Fatalf("delivery %d: %v, %v; want %v", i, out, err, want)
		}
	}
	evs := r.events(t, "a1")
	if ev := evs[len(evs)-1]; ev.Type != schedule.TypeRefused || !strings.Contains(string(ev.Payload), `"schedule_id":"t"`) || !strings.Contains(string(ev.Payload), "inbox is full") {
		t.Fatalf("last event %s %s, want schedule/refused naming the schedule and why", ev.Type, ev.Payload)
	}
}

// TestResetCancels: `terret session reset` erases the agent's schedules with its other
// items; a fire the engine still delivers finds none and logs nothing, and the new
// log's export has no schedule. The old log's export held the schedule's history.
func TestResetCancels(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "")
	sc, err := r.svc.Set(ctx, "a1", schedule.Spec{Text: "tick", Every: "10s", ID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ops := sessiondata.New(r.db.(sessiondata.API), sessiondata.Tables{Log: r.logTable, Connections: r.connTable, Agents: r.table}, sessiondata.Options{})
	var before strings.Builder
	if _, err := ops.Export(ctx, "a1", 0, -1, &before); err != nil || !strings.Contains(before.String(), `"type":"schedule/set"`) {
		t.Fatalf("export before the reset (%v) lacks schedule/set:\n%s", err, before.String())
	}
	if _, err := ops.Reset(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if list, _ := r.svc.List(ctx, "a1"); len(list) != 0 {
		t.Fatalf("schedules after reset: %+v", list)
	}
	due, _ := schedule.ParseTime(sc.NextAt)
	r.clock.set(due)
	if out, err := r.svc.Fire(ctx, "a1", "t", due); err != nil || out != schedule.Duplicate {
		t.Fatalf("a fire after the reset: %v, %v; want nothing done", out, err)
	}
	if evs := r.events(t, "a1"); types(evs) != "session/created" {
		t.Fatalf("log after the reset and a stale fire: %s", types(evs))
	}
	// The count went too: a full quota of new schedules fits.
	for i := range schedule.DefaultMaxSchedules {
		if _, err := r.svc.Set(ctx, "a1", schedule.Spec{Text: "x", Every: "1h", ID: fmt.Sprint("n", i)}); err != nil {
			t.Fatalf("schedule %d after reset: %v", i, err)
		}
	}
}

// TestTool: the schedule tool acts on the agent of its call: set, list, cancel, and a
// bad spec's error names the field.
func TestTool(t *testing.T) {
	ctx := tools.WithAgent(context.Background(), "a1")
	r := newRig(t, "")
	tool := r.svc.Tool()
	if tool.Definition().Name != "schedule" {
		t.Fatalf("tool name %q", tool.Definition().Name)
	}
	out, err := tool.Call(ctx, json.RawMessage(`{"action":"set","text":"remind me","in":"2h","id":"rem"}`))
	if err != nil || !strings.Contains(string(out), `"id":"rem"`) {
		t.Fatalf("set: %s, %v", out, err)
	}
	out, err = tool.Call(ctx, json.RawMessage(`{"action":"list"}`))
	if err != nil || !strings.Contains(string(out), `"text":"remind me"`) {
		t.Fatalf("list: %s, %v", out, err)
	}
	if _, err := tool.Call(ctx, json.RawMessage(`{"action":"set","text":"x","every":"10ms"}`)); err == nil || !strings.HasPrefix(err.Error(), "every: ") {
		t.Fatalf("bad spec: %v, want an error naming every", err)
	}
	if _, err := tool.Call(ctx, json.RawMessage(`{"action":"cancel","id":"rem"}`)); err != nil {
		t.Fatal(err)
	}
	if list, _ := r.svc.List(context.Background(), "a1"); len(list) != 0 {
		t.Fatalf("after cancel: %+v", list)
	}
	if list, _ := r.svc.List(context.Background(), "other"); len(list) != 0 {
		t.Fatalf("another agent's schedules: %+v", list)
	}
}
