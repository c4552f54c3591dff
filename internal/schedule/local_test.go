package schedule_test

import (
	"context"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/schedule"
)

// fakeClock is a schedule.Clock the test moves: a wait armed with AfterFunc runs,
// in the goroutine that calls advance, once advance has moved the time to its end.
// It sets the rig's clock too, so that the Service reads the same time.
type fakeClock struct {
	c       *clock
	mu      sync.Mutex
	waits   []*fakeWait
	stopped int
}

type fakeWait struct {
	at      time.Time
	f       func()
	fc      *fakeClock
	stopped bool
	ran     bool
}

func (w *fakeWait) Stop() bool {
	w.fc.mu.Lock()
	defer w.fc.mu.Unlock()
	was := !w.stopped && !w.ran
	w.stopped = true
	return was
}

func (fc *fakeClock) Now() time.Time { return fc.c.now() }

func (fc *fakeClock) AfterFunc(d time.Duration, f func()) schedule.Timer {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	w := &fakeWait{at: fc.c.now().Add(d), f: f, fc: fc}
	fc.waits = append(fc.waits, w)
	return w
}

// advance moves the time by d and runs every wait that ends by then, in the order of
// their ends (a wait armed by one that runs is run too if it ends by then).
func (fc *fakeClock) advance(d time.Duration) {
	end := fc.c.now().Add(d)
	for {
		fc.mu.Lock()
		sort.SliceStable(fc.waits, func(i, j int) bool { return fc.waits[i].at.Before(fc.waits[j].at) })
		var next *fakeWait
		for _, w := range fc.waits {
			if !w.stopped && !w.ran && !w.at.After(end) {
				next = w
				break
			}
		}
		if next == nil {
			fc.mu.Unlock()
			fc.c.set(end)
			return
		}
		next.ran = true
		if next.at.After(fc.c.now()) {
			fc.c.set(next.at)
		}
		fc.mu.Unlock()
		next.f()
	}
}

// fires records the fires a Local delivers, each passed on to the Service (Fire).
type fires struct {
	mu  sync.Mutex
	got []string // "<schedule id> <fire_at> <outcome>"
}

func (f *fires) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

// localRig is a Service whose engine is a Local on a fake clock, over the rig's tables;
// the Local's fires are recorded in f (then fired through the Service, as terret dev's
// schedule function does).
func localRig(t *testing.T, r rig, fc *fakeClock, f *fires) (*schedule.Local, *schedule.Service) {
	t.Helper()
	ag, err := agent.New(agent.Config{Log: r.log, DB: r.db, AgentsTable: r.table, Invoker: r.inv, RunnerFunction: "runner", Now: r.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	l := schedule.NewLocal(nil)
	l.Clock = fc
	l.SweepInterval = time.Hour // the sweep runs at Start only: the test arms through the Service
	svc := schedule.New(schedule.Config{DB: dynamotest.Client(t), Table: r.table, Log: r.log, Injector: ag, Now: r.clock.now, Engine: l,
		Bounds: schedule.Bounds{MinEvery: time.Second, MaxText: 1 << 16}})
	l.Deliver = func(ctx context.Context, in schedule.FireInput) error {
		due, err := schedule.ParseTime(in.FireAt)
		if err != nil {
			return err
		}
		out, err := svc.Fire(ctx, in.AgentID, in.ScheduleID, due)
		f.mu.Lock()
		f.got = append(f.got, in.ScheduleID+" "+in.FireAt+" "+string(out))
		f.mu.Unlock()
		return err
	}
	return l, svc
}

// TestLocalFiresOnTime: terret dev's engine fires a schedule when its due time comes
// on the engine's clock, not before, and each due time of a repeating one once; a fire
// that came due while no engine ran fires as soon as an engine starts again on the
// same records, once. The clock is the test's.
func TestLocalFiresOnTime(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, "")
	if _, err := r.log.Create(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	start := r.clock.now()
	fc := &fakeClock{c: r.clock}
	f := &fires{}
	l, svc := localRig(t, r, fc, f)
	if err := l.Start(ctx, svc); err != nil {
		t.Fatal(err)
	}
	once, err := svc.Set(ctx, "a1", schedule.Spec{Text: "once", In: "10s", ID: "once"})
	if err != nil {
		t.Fatal(err)
	}
	every, err := svc.Set(ctx, "a1", schedule.Spec{Text: "tick", Every: "4s", ID: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	fc.advance(4*time.Second - time.Millisecond)
	if got := f.list(); len(got) != 0 {
		t.Fatalf("fires before any due time: %v", got)
	}
	at := func(d time.Duration) string { return start.Add(d).Format("2006-01-02T15:04:05.000Z") }
	fc.advance(time.Millisecond) // tick's first due time
	if got := f.list(); len(got) != 1 || got[0] != "tick "+every.NextAt+" fired" {
		t.Fatalf("fires at tick's due time %s: %v", every.NextAt, got)
	}
	fc.advance(6 * time.Second) // tick's second due time (8 s), then once's (10 s)
	want := []string{"tick " + at(4*time.Second) + " fired", "tick " + at(8*time.Second) + " fired", "once " + once.NextAt + " fired"}
	if got := f.list(); !slices.Equal(got, want) {
		t.Fatalf("fires after 10 s: %v, want %v", got, want)
	}
	l.Close()

	// Down: tick comes due twice (12 s, 16 s) while no engine runs.
	fc.advance(7 * time.Second)
	if got := f.list(); len(got) != 3 {
		t.Fatalf("fired while no engine ran: %v", got)
	}
	l2, svc2 := localRig(t, r, fc, f)
	if err := l2.Start(ctx, svc2); err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	fc.advance(0) // what Start armed as due now: the missed ones as one
	got := f.list()
	if len(got) != 4 || got[3] != "tick "+at(12*time.Second)+" fired" {
		t.Fatalf("fires at the restart (17 s): %v, want one for the missed 12 s and 16 s", got)
	}
	fc.advance(4 * time.Second) // 21 s: the due time after the restart, 20 s
	if got := f.list(); len(got) != 5 || got[4] != "tick "+at(20*time.Second)+" fired" {
		t.Fatalf("fires by 21 s: %v, want tick at 20 s", got)
	}
	if n := r.inv.n.Load(); n != 5 {
		t.Fatalf("%d runner invocations, want one per fire (5)", n)
	}
}
