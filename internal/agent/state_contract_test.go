package agent

// One contract suite over runnerState, the runner's lease, claim and stimulus rules,
// run against the in-memory double (memState) and against store on DynamoDB Local,
// both on one fake clock: each scenario drives the state item through the interface
// and asserts the same outcomes on both, so that the double cannot drift from the
// store's conditional writes. A lease is live through its last millisecond
// (lease.LiveMs), and nothing sleeps. It is modelled on delivery's contract suite over
// the ownership record.

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/dynamotest"
)

// stateT0 is where every scenario's clock starts: a whole millisecond, years in the
// past, so that a rule reading the wall clock instead of the scenario's would find
// every lease run out.
var stateT0 = time.UnixMilli(1_600_000_000_000)

// stateTTL is the lease term the scenarios take.
const stateTTL = 10 * time.Second

// stateEnv is one scenario's view of one implementation: the rules, the clock and an
// agent of its own.
type stateEnv struct {
	runnerState
	ctx context.Context
	now time.Time
	A   string
}

func (e *stateEnv) advance(d time.Duration) { e.now = e.now.Add(d) }

// take is acquire at the scenario's clock for a term of stateTTL.
func (e *stateEnv) take(t *testing.T, me string, c *claim) (state, bool) {
	t.Helper()
	st, ok, err := e.acquire(e.ctx, e.A, me, e.now, e.now.Add(stateTTL), c)
	if err != nil {
		t.Fatalf("acquire by %s: %v", me, err)
	}
	return st, ok
}

// queueWake queues a short waking inject on the state item and returns it as read.
func (e *stateEnv) queueWake(t *testing.T, id string) inboxItem {
	t.Helper()
	if counted, err := e.putInbox(e.ctx, e.A, inboxItem{ID: id, Text: "hi", Wake: true, At: "t"}); err != nil || !counted {
		t.Fatalf("queue %s: counted %v, %v", id, counted, err)
	}
	st, err := e.getState(e.ctx, e.A)
	if err != nil {
		t.Fatal(err)
	}
	it, ok := st.Inbox[id]
	if !ok {
		t.Fatalf("%s is not queued on the state item: %+v", id, st.Inbox)
	}
	return it
}

// stateView is a state item as the rules see it; the lease's end is an offset from
// stateT0 (0: none).
type stateView struct {
	Runner     string
	Until      time.Duration
	Stimuli    int64
	TurnID     string
	TurnSeq    int64
	TurnKey    string
	TurnRules  string
	Wake       string   // the recorded turn's inline wake, by id
	Inbox      []string // the injects queued inline, by id
	CancelTurn string
	Turns      int64
	Tokens     int64 // input + output
	QuotaTurns int64
	CkSeq      int64 // -1: no checkpoint
}

func viewOf(st state) stateView {
	v := stateView{Runner: st.Runner, Stimuli: st.Stimuli, TurnID: st.TurnID, TurnSeq: st.TurnSeq, TurnKey: st.TurnKey,
		TurnRules: st.TurnRules, CancelTurn: st.CancelTurn, Turns: st.Turns, Tokens: st.InputTokens + st.OutputTokens,
		QuotaTurns: st.QuotaTurns, CkSeq: -1}
	if st.LeaseUntil != 0 {
		v.Until = time.UnixMilli(st.LeaseUntil).Sub(stateT0)
	}
	if st.TurnWake != nil {
		v.Wake = st.TurnWake.ID
	}
	for id := range st.Inbox {
		v.Inbox = append(v.Inbox, id)
	}
	slices.Sort(v.Inbox)
	if st.Ck != nil {
		v.CkSeq = st.Ck.Seq
	}
	return v
}

// is checks a state returned or read against want.
func is(t *testing.T, what string, st state, want stateView) {
	t.Helper()
	if got := viewOf(st); !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n  got  %+v\n  want %+v", what, got, want)
	}
}

// stored reads the state item and checks it against want.
func (e *stateEnv) stored(t *testing.T, want stateView) {
	t.Helper()
	st, err := e.getState(e.ctx, e.A)
	if err != nil {
		t.Fatal(err)
	}
	is(t, "the state item", st, want)
}

const wakeID = "1600000000000-ab" // a queued wake's id: its stamp key, then a suffix

var stateScenarios = []struct {
	name string
	run  func(t *testing.T, e *stateEnv)
}{
	{"a free lease is taken", func(t *testing.T, e *stateEnv) {
		st, ok := e.take(t, "r1", nil)
		if !ok {
			t.Fatal("the free lease was not taken")
		}
		is(t, "acquire", st, stateView{Runner: "r1", Until: stateTTL, CkSeq: -1})
	}},
	{"a live lease is held through its last millisecond, and taken over after it", func(t *testing.T, e *stateEnv) {
		e.take(t, "r1", nil)
		e.advance(stateTTL)
		st, ok := e.take(t, "r2", nil)
		if ok {
			t.Fatal("r2 took a lease live through this millisecond")
		}
		is(t, "the held lease found", st, stateView{Runner: "r1", Until: stateTTL, CkSeq: -1})
		e.advance(time.Millisecond)
		if st, ok = e.take(t, "r2", nil); !ok {
			t.Fatal("r2 did not take the lease a millisecond after it ran out")
		}
		is(t, "the takeover", st, stateView{Runner: "r2", Until: 2*stateTTL + time.Millisecond, CkSeq: -1})
	}},
	{"the holder takes its own lease again", func(t *testing.T, e *stateEnv) {
		e.take(t, "r1", nil)
		e.advance(time.Second)
		if _, ok := e.take(t, "r1", nil); !ok {
			t.Fatal("the holder could not take its own lease")
		}
		e.stored(t, stateView{Runner: "r1", Until: stateTTL + time.Second, CkSeq: -1})
	}},
	{"only the holder renews, even past the lease's end", func(t *testing.T, e *stateEnv) {
		e.take(t, "r1", nil)
		if err := e.renew(e.ctx, e.A, "r2", e.now.Add(time.Hour)); !errors.Is(err, errLeaseLost) {
			t.Errorf("renew by another: %v, want errLeaseLost", err)
		}
		e.advance(2 * stateTTL)
		if err := e.renew(e.ctx, e.A, "r1", e.now.Add(stateTTL)); err != nil {
			t.Errorf("renew by the holder after its lease ran out: %v", err)
		}
		e.stored(t, stateView{Runner: "r1", Until: 3 * stateTTL, CkSeq: -1})
	}},
	{"a renewal after a takeover finds the lease lost", func(t *testing.T, e *stateEnv) {
		e.take(t, "r1", nil)
		e.advance(stateTTL + time.Millisecond)
		e.take(t, "r2", nil)
		if err := e.renew(e.ctx, e.A, "r1", e.now.Add(stateTTL)); !errors.Is(err, errLeaseLost) {
			t.Errorf("the old holder's renewal: %v, want errLeaseLost", err)
		}
	}},
	{"a release at the stimulus count seen lets the lease go, with its checkpoint", func(t *testing.T, e *stateEnv) {
		if err := e.bump(e.ctx, e.A); err != nil {
			t.Fatal(err)
		}
		st, _ := e.take(t, "r1", nil)
		cur, released, wrote, err := e.release(e.ctx, e.A, "r1", some(st.Stimuli), nil, &checkpoint{Seq: 4})
		if err != nil || !released || !wrote {
			t.Fatalf("release: released %v wrote %v %v, want both", released, wrote, err)
		}
		is(t, "release", cur, stateView{Stimuli: 1, CkSeq: 4})
	}},
	{"a stimulus since the count seen keeps the lease, and stores no checkpoint", func(t *testing.T, e *stateEnv) {
		st, _ := e.take(t, "r1", nil)
		if err := e.bump(e.ctx, e.A); err != nil {
			t.Fatal(err)
		}
		cur, released, wrote, err := e.release(e.ctx, e.A, "r1", some(st.Stimuli), nil, &checkpoint{Seq: 4})
		if err != nil || released || wrote {
			t.Fatalf("release: released %v wrote %v %v, want neither", released, wrote, err)
		}
		is(t, "the state found", cur, stateView{Runner: "r1", Until: stateTTL, Stimuli: 1, CkSeq: -1})
		if _, released, _, _ = e.release(e.ctx, e.A, "r1", some(cur.Stimuli), nil, nil); !released {
			t.Error("the release at the new count did not happen")
		}
	}},
	{"a lease taken over counts as released, and writes nothing", func(t *testing.T, e *stateEnv) {
		e.take(t, "r1", nil)
		e.advance(stateTTL + time.Millisecond)
		e.take(t, "r2", nil)
		cur, released, wrote, err := e.release(e.ctx, e.A, "r1", optional[int64]{}, nil, &checkpoint{Seq: 9})
		if err != nil || !released || wrote {
			t.Fatalf("release by the old holder: released %v wrote %v %v, want released, not written", released, wrote, err)
		}
		is(t, "the state found", cur, stateView{Runner: "r2", Until: 2*stateTTL + time.Millisecond, CkSeq: -1})
	}},
	{"the lease write claims the turn of an inline wake and takes it off the queue", func(t *testing.T, e *stateEnv) {
		w := e.queueWake(t, wakeID)
		st, ok := e.take(t, "r1", &claim{turnID: "turn_1", seq: 3, wake: w, rules: `{"r":1}`})
		if !ok {
			t.Fatal("the lease write with the claim failed")
		}
		want := stateView{Runner: "r1", Until: stateTTL, Stimuli: 1, TurnID: "turn_1", TurnSeq: 3, TurnKey: "1600000000000",
			TurnRules: `{"r":1}`, Wake: wakeID, CkSeq: -1}
		is(t, "acquire with the claim", st, want)
		e.stored(t, want)
	}},
	{"a claim fails with a turn recorded; the lease is then taken alone", func(t *testing.T, e *stateEnv) {
		w := e.queueWake(t, wakeID)
		e.take(t, "r1", &claim{turnID: "turn_1", seq: 3, wake: w})
		e.advance(stateTTL + time.Millisecond)
		w2 := e.queueWake(t, "1600000000500-cd")
		st, ok := e.take(t, "r2", &claim{turnID: "turn_2", seq: 5, wake: w2})
		if ok {
			t.Fatal("a second turn was claimed over the recorded one")
		}
		if st.TurnID != "turn_1" || st.Runner != "r1" {
			t.Errorf("the state found names runner %q and turn %q, want r1's turn_1", st.Runner, st.TurnID)
		}
		if st, ok = e.take(t, "r2", nil); !ok {
			t.Fatal("the expired lease was not taken alone")
		}
		is(t, "the lease alone", st, stateView{Runner: "r2", Until: 2*stateTTL + time.Millisecond, Stimuli: 2, TurnID: "turn_1",
			TurnSeq: 3, TurnKey: "1600000000000", Wake: wakeID, Inbox: []string{"1600000000500-cd"}, CkSeq: -1})
	}},
	{"a claim fails when its inline wake is no longer queued", func(t *testing.T, e *stateEnv) {
		w := e.queueWake(t, wakeID)
		st, _ := e.take(t, "r1", &claim{turnID: "turn_1", seq: 0, wake: w})
		if _, _, _, err := e.release(e.ctx, e.A, "r1", some(st.Stimuli), &endedTurn{id: "turn_1"}, nil); err != nil {
			t.Fatal(err)
		}
		if _, ok := e.take(t, "r2", &claim{turnID: "turn_2", seq: 4, wake: w}); ok {
			t.Fatal("a wake taken off the queue started a second turn")
		}
		if _, err := e.claimTurn(e.ctx, e.A, "r2", claim{turnID: "turn_2", seq: 4, wake: w}); !errors.Is(err, errLeaseLost) {
			t.Errorf("claimTurn of a wake no longer queued: %v, want errLeaseLost", err)
		}
	}},
	{"only the holder claims a turn", func(t *testing.T, e *stateEnv) {
		w := e.queueWake(t, wakeID)
		e.take(t, "r1", nil)
		if _, err := e.claimTurn(e.ctx, e.A, "r2", claim{turnID: "turn_x", seq: 0, wake: w}); !errors.Is(err, errLeaseLost) {
			t.Errorf("claimTurn by another: %v, want errLeaseLost", err)
		}
		st, err := e.claimTurn(e.ctx, e.A, "r1", claim{turnID: "turn_1", seq: 2, wake: w})
		if err != nil {
			t.Fatal(err)
		}
		is(t, "claimTurn", st, stateView{Runner: "r1", Until: stateTTL, Stimuli: 1, TurnID: "turn_1", TurnSeq: 2,
			TurnKey: "1600000000000", Wake: wakeID, CkSeq: -1})
	}},
	{"a turn is metered exactly once", func(t *testing.T, e *stateEnv) {
		w := e.queueWake(t, wakeID)
		e.take(t, "r1", &claim{turnID: "turn_1", seq: 0, wake: w})
		u := TurnUsage{InputTokens: 5, OutputTokens: 7, ModelCalls: 1}
		want := stateView{Runner: "r1", Until: stateTTL, Stimuli: 1, Turns: 1, Tokens: 12, QuotaTurns: 1, CkSeq: -1}
		st, err := e.finishTurn(e.ctx, e.A, "r1", "turn_1", u)
		if err != nil {
			t.Fatal(err)
		}
		is(t, "finishTurn", st, want)
		if st, err = e.finishTurn(e.ctx, e.A, "r1", "turn_1", u); err != nil {
			t.Fatalf("finishTurn again: %v, want the state as found", err)
		}
		is(t, "finishTurn again", st, want)
		if _, err = e.finishTurn(e.ctx, e.A, "r2", "turn_1", u); !errors.Is(err, errLeaseLost) {
			t.Errorf("finishTurn by another: %v, want errLeaseLost", err)
		}
	}},
	{"a release finishes the ended turn in its write, or does not happen", func(t *testing.T, e *stateEnv) {
		w := e.queueWake(t, wakeID)
		st, _ := e.take(t, "r1", &claim{turnID: "turn_1", seq: 0, wake: w})
		_, released, wrote, err := e.release(e.ctx, e.A, "r1", some(st.Stimuli), &endedTurn{id: "turn_other"}, nil)
		if err != nil || released || wrote {
			t.Fatalf("release finishing a turn not recorded: released %v wrote %v %v, want neither", released, wrote, err)
		}
		cur, released, wrote, err := e.release(e.ctx, e.A, "r1", some(st.Stimuli), &endedTurn{id: "turn_1", usage: TurnUsage{InputTokens: 1}}, &checkpoint{Seq: 6})
		if err != nil || !released || !wrote {
			t.Fatalf("release finishing the turn: released %v wrote %v %v", released, wrote, err)
		}
		is(t, "the release", cur, stateView{Stimuli: 1, Turns: 1, Tokens: 1, QuotaTurns: 1, CkSeq: 6})
	}},
	{"a claimed turn is cleared by its holder only, and a cleared one again is no error", func(t *testing.T, e *stateEnv) {
		w := e.queueWake(t, wakeID)
		e.take(t, "r1", &claim{turnID: "turn_1", seq: 0, wake: w})
		if _, err := e.clearTurn(e.ctx, e.A, "r2", "turn_1"); !errors.Is(err, errLeaseLost) {
			t.Errorf("clearTurn by another: %v, want errLeaseLost", err)
		}
		want := stateView{Runner: "r1", Until: stateTTL, Stimuli: 1, CkSeq: -1}
		for i := range 2 {
			st, err := e.clearTurn(e.ctx, e.A, "r1", "turn_1")
			if err != nil {
				t.Fatalf("clearTurn #%d: %v", i+1, err)
			}
			is(t, "clearTurn", st, want)
		}
	}},
	{"a stimulus is counted on an agent with no state item yet", func(t *testing.T, e *stateEnv) {
		if err := e.bump(e.ctx, e.A); err != nil {
			t.Fatal(err)
		}
		e.stored(t, stateView{Stimuli: 1, CkSeq: -1})
	}},
}

// TestStateContract runs every scenario against the double and against the store on
// DynamoDB Local (skipped without it: the double's half needs none).
func TestStateContract(t *testing.T) {
	t.Parallel()
	impls := []struct {
		name string
		mk   func(t *testing.T) runnerState
	}{
		{"memory", func(*testing.T) runnerState { return newMemState() }},
		{"dynamodb", func(t *testing.T) runnerState {
			names := dynamotest.CreateTables(t)
			return &store{db: dynamotest.Client(t), table: names["AgentsTable"]}
		}},
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			rs := impl.mk(t)
			for _, sc := range stateScenarios {
				t.Run(sc.name, func(t *testing.T) {
					t.Parallel()
					sc.run(t, &stateEnv{runnerState: rs, ctx: context.Background(), now: stateT0, A: dynamotest.UniqueName("agent-")})
				})
			}
		})
	}
}
