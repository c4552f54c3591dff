package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// expecting is ctx carrying expect_seq seq, as the socket's serve sets it.
func expecting(ctx context.Context, seq int64) context.Context {
	return control.WithExpect(ctx, &seq)
}

// wantStale fails unless err is a stale answer naming the event at seq of type typ.
func wantStale(t *testing.T, what string, err error, seq int64, typ string) {
	t.Helper()
	var se *control.StaleError
	if !errors.As(err, &se) || !errors.Is(err, control.ErrStale) || se.Seq != seq || se.Type != typ {
		t.Errorf("%s: %v, want stale naming %s at seq %d", what, err, typ, seq)
		return
	}
	if !strings.Contains(se.Message(), fmt.Sprintf("seq %d", seq)) {
		t.Errorf("%s: message %q does not name seq %d", what, se.Message(), seq)
	}
}

func wantAhead(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, control.ErrAheadOfLog) {
		t.Errorf("%s: %v, want expect_seq above the tip (bad_frame)", what, err)
	}
}

func seqOfType(evs []sessionlog.Event, typ string, nth int) int64 {
	for _, ev := range evs {
		if ev.Type == typ {
			if nth == 0 {
				return ev.Seq
			}
			nth--
		}
	}
	return -1
}

// TestExpectSeqFrames: each frame's expect_seq rule — applied when nothing after it
// changes what the frame acts on, stale (naming the conflicting seq, appending
// nothing) otherwise, bad_frame above the tip.
func TestExpectSeqFrames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{approvals: true})
	ctx := e.ctx

	// Above the tip: bad_frame for every frame, nothing appended.
	tip := e.tip()
	wantAhead(t, "inject", e.svc.InjectFrom(expecting(ctx, tip+1), e.agentID, "x", true, ""))
	wantAhead(t, "cancel", e.svc.Cancel(expecting(ctx, tip+1), e.agentID, ""))
	wantAhead(t, "set_policy", e.svc.SetPolicy(expecting(ctx, tip+5), e.agentID, []string{"*"}))
	wantAhead(t, "approve", e.svc.Approve(expecting(ctx, tip+1), e.agentID, "c"))
	if e.tip() != tip {
		t.Fatalf("a frame above the tip appended:\n%s", dump(e.events()))
	}

	// Cancel on an agent idle at expect_seq and still idle: not_running.
	if err := e.svc.Cancel(expecting(ctx, tip), e.agentID, ""); !errors.Is(err, agent.ErrNotRunning) {
		t.Errorf("cancel of an idle agent: %v", err)
	}

	// set_policy: a compare-and-append. Two frames that saw the same tip: one wins.
	if err := e.svc.SetPolicy(expecting(ctx, tip), e.agentID, []string{"echo"}); err != nil {
		t.Fatal(err)
	}
	wantStale(t, "second set_policy at the same expect_seq", e.svc.SetPolicy(expecting(ctx, tip), e.agentID, []string{"sleep"}), tip+1, agent.TypePolicyUpdated)
	if err := e.svc.SetPolicy(expecting(ctx, tip+1), e.agentID, []string{"*"}); err != nil {
		t.Errorf("set_policy that saw the last policy: %v", err)
	}
	evs := e.events()
	if pols := ofType(evs, agent.TypePolicyUpdated); len(pols) != 2 || string(pols[1].Payload) != `{"patterns":["*"]}` {
		t.Errorf("policies:\n%s", dump(evs))
	}

	// A turn parked on an approval.
	e.inject(script(`{"call":[{"tool":"guarded_echo","args":{"text":"g1"}}]}`, `{"say":"fin"}`), true)
	evs = e.waitFor("approval/requested", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeApprovalRequested) == 1 })
	e.settle()
	start := seqOfType(evs, agent.TypeTurnStart, 0)
	req := seqOfType(evs, agent.TypeApprovalRequested, 0)
	callID := str(ofType(evs, agent.TypeToolCall)[0], "id")
	before := start - 1 // what a client saw before the turn started

	tip = e.tip()
	wantStale(t, "steer that saw the agent idle", e.svc.InjectFrom(expecting(ctx, before), e.agentID, "late", false, ""), start, agent.TypeTurnStart)
	wantStale(t, "cancel that saw the agent idle", e.svc.Cancel(expecting(ctx, before), e.agentID, ""), start, agent.TypeTurnStart)
	wantStale(t, "approve before the request", e.svc.Approve(expecting(ctx, req-1), e.agentID, callID), req, agent.TypeApprovalRequested)
	wantStale(t, "deny before the request", e.svc.Deny(expecting(ctx, req-1), e.agentID, callID, "no"), req, agent.TypeApprovalRequested)
	if e.tip() != tip {
		t.Fatalf("a stale frame appended:\n%s", dump(e.events()))
	}
	if err := e.svc.Approve(expecting(ctx, req), e.agentID, callID); err != nil {
		t.Fatalf("approve that saw the request: %v", err)
	}
	evs = e.waitTurnEnds(1)
	e.settle()
	end := seqOfType(evs, agent.TypeTurnEnd, 0)
	tip = e.tip()
	wantStale(t, "steer that saw the turn running", e.svc.InjectFrom(expecting(ctx, end-1), e.agentID, "late", true, ""), end, agent.TypeTurnEnd)
	wantStale(t, "cancel that saw the turn running", e.svc.Cancel(expecting(ctx, end-1), e.agentID, ""), end, agent.TypeTurnEnd)
	if err := e.svc.Cancel(expecting(ctx, end), e.agentID, ""); !errors.Is(err, agent.ErrNotRunning) {
		t.Errorf("cancel that saw the turn end: %v", err)
	}
	if e.tip() != tip {
		t.Fatalf("a stale frame appended:\n%s", dump(e.events()))
	}

	// A cancel that saw the running turn stops it.
	e.inject(script(`{"call":[{"tool":"guarded_echo","args":{"text":"g2"}}]}`, `{"say":"never"}`), true)
	evs = e.waitFor("second approval/requested", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeApprovalRequested) == 2 })
	e.settle()
	if err := e.svc.Cancel(expecting(ctx, e.tip()), e.agentID, "seen"); err != nil {
		t.Fatalf("cancel that saw the turn: %v", err)
	}
	evs = e.waitTurnEnds(2)
	e.settle()
	e.noErrors()
	if te := lastTurnEnd(t, evs); te["status"] != agent.StatusCancelled || te["reason"] != "seen" {
		t.Errorf("turn/end %v, want cancelled with the frame's reason", te)
	}
}

// answers records the runner's answers to stale injects (agent.Answerer).
type answers struct {
	mu  sync.Mutex
	got []string // "conn code message"
}

func (a *answers) Answer(_ context.Context, _, connID string, f protocol.Error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, connID+" "+string(f.Code)+" "+f.Message)
	return nil
}

func (a *answers) list() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.got...)
}

// claimOwner makes connID the agent's owner connection, as a connect's claim does.
func claimOwner(t *testing.T, e *env, connID string) {
	t.Helper()
	w := agent.OwnerClaim(e.names["AgentsTable"], e.agentID, connID)
	if _, err := e.db.TransactWriteItems(e.ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{w}}); err != nil {
		t.Fatal(err)
	}
}

// TestStaleInjectAtDrain: an inject accepted under expect_seq that a turn overtakes
// before the runner drains it is dropped by the runner — neither a user/message nor a
// context/injected — and its connection is answered stale, naming the turn event.
// Both ways in: a wake that would start a turn, and a steer drained into a later turn.
func TestStaleInjectAtDrain(t *testing.T) {
	t.Parallel()
	ans := &answers{}
	e := newEnv(t, opts{approvals: true, answer: ans})
	claimOwner(t, e, "conn-1")
	e.inject(script(`{"call":[{"tool":"guarded_echo","args":{"text":"g"}}]}`, `{"say":"never"}`), true)
	e.waitFor("approval/requested", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeApprovalRequested) == 1 })
	e.settle()
	seen := e.tip() // the client sees the turn parked
	if err := e.svc.InjectFrom(expecting(e.ctx, seen), e.agentID, "wake-a", true, "conn-1"); err != nil {
		t.Fatalf("inject while the turn it saw runs: %v", err)
	}
	if err := e.svc.InjectFrom(expecting(e.ctx, seen), e.agentID, "steer-b", false, "conn-1"); err != nil {
		t.Fatalf("steer while the turn it saw runs: %v", err)
	}
	e.settle()
	if err := e.svc.Cancel(e.ctx, e.agentID, "stop"); err != nil { // no expect_seq: today's cancel
		t.Fatal(err)
	}
	evs := e.waitTurnEnds(1)
	e.settle()
	end := seqOfType(evs, agent.TypeTurnEnd, 0)
	e.inject(`{"script":[{"say":"second"}]}`, true)
	evs = e.waitTurnEnds(2)
	e.settle()
	e.noErrors()
	for _, ev := range evs {
		if strings.Contains(string(ev.Payload), "wake-a") || strings.Contains(string(ev.Payload), "steer-b") {
			t.Errorf("a stale inject was logged: %d %s %s", ev.Seq, ev.Type, ev.Payload)
		}
	}
	if n := count(evs, agent.TypeTurnStart); n != 2 {
		t.Errorf("%d turns, want 2 (the stale wake starts none):\n%s", n, dump(evs))
	}
	got := ans.list()
	want := fmt.Sprintf("conn-1 stale inject: expect_seq %d is stale: turn/end at seq %d came after it; nothing was applied", seen, end)
	if len(got) != 2 || got[0] != want || got[1] != want {
		t.Errorf("answers %q, want twice %q", got, want)
	}
}

// TestCancelExpectRacingTurnEnd: a cancel that saw a turn running races that turn's
// end and a wake sent at the same moment — steered into the turn, or starting the
// next one as the turn ends — many rounds at varied timings. Each round the cancel
// either applied to the turn it saw or was answered stale (naming an event after its
// expect_seq); it never stops another turn, and it is never not_running.
func TestCancelExpectRacingTurnEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{})
	rounds := 30
	if testing.Short() {
		rounds = 8
	}
	stale, applied, next, seenEnd := 0, 0, 0, 0
	for r := range rounds {
		reason := fmt.Sprintf("round-%d", r)
		base := count(e.events(), agent.TypeTurnStart)
		// The turn: a short tool call, then a reply — it ends on its own, soon.
		e.inject(script(fmt.Sprintf(`{"call":[{"tool":"sleep","args":{"ms":%d}}]}`, r%4*5), `{"say":"done"}`), true)
		evs := e.waitFor(fmt.Sprintf("round %d turn/start", r), func(evs []sessionlog.Event) bool { return count(evs, agent.TypeTurnStart) > base })
		seen := evs[len(evs)-1].Seq
		turn := str(ofType(evs, agent.TypeTurnStart)[base], "turn_id")
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(r%5) * 4 * time.Millisecond)
			if err := e.svc.Inject(e.ctx, e.agentID, `{"script":[{"say":"next"}]}`, true); err != nil {
				t.Errorf("round %d: wake: %v", r, err)
			}
		}()
		time.Sleep(time.Duration(r%3) * 6 * time.Millisecond)
		err := e.svc.Cancel(expecting(e.ctx, seen), e.agentID, reason)
		wg.Wait()
		var se *control.StaleError
		switch {
		case err == nil:
			applied++
		case errors.As(err, &se):
			stale++
			if se.Seq <= seen {
				t.Fatalf("round %d: stale names seq %d, not after expect_seq %d", r, se.Seq, seen)
			}
		case errors.Is(err, agent.ErrNotRunning) && endedIn(evs, turn):
			// The snapshot the cancel was sent for already held the turn's turn/end:
			// the client saw it end, and no turn runs — not_running is the answer.
			seenEnd++
		default:
			t.Fatalf("round %d: cancel: %v", r, err)
		}
		e.settle()
		evs = e.waitFor(fmt.Sprintf("round %d: every turn ended", r), func(evs []sessionlog.Event) bool {
			return count(evs, agent.TypeTurnEnd) == count(evs, agent.TypeTurnStart)
		})
		if count(evs, agent.TypeTurnStart) > base+1 {
			next++
		}
		for _, ev := range ofType(evs, agent.TypeTurnEnd) {
			p := payload(ev)
			if p["reason"] == reason && p["turn_id"] != turn {
				t.Fatalf("round %d: the cancel stopped turn %v, not the turn it saw (%s):\n%s", r, p["turn_id"], turn, dump(evs))
			}
			if p["turn_id"] == turn && se != nil && p["reason"] == reason {
				t.Fatalf("round %d: answered stale, yet the turn ended cancelled by it:\n%s", r, dump(evs))
			}
		}
	}
	e.noErrors()
	t.Logf("%d rounds: %d applied, %d stale, %d sent after the turn/end was seen; %d rounds started a next turn", rounds, applied, stale, seenEnd, next)
}

// endedIn reports whether evs hold the turn/end of turn.
func endedIn(evs []sessionlog.Event, turn string) bool {
	for _, ev := range ofType(evs, agent.TypeTurnEnd) {
		if payload(ev)["turn_id"] == turn {
			return true
		}
	}
	return false
}
