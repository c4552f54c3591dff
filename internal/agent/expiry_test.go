package agent_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/timer"
	"github.com/terret/terret-ws/internal/tools"
)

// expiringProfile runs guarded_echo with its approval requests expiring after d.
func expiringProfile(d string) *tools.Profile {
	return &tools.Profile{Tools: []tools.ToolConfig{{Name: "guarded_echo", Approval: &tools.Approval{ExpiresIn: d}}, {Name: "echo"}}}
}

// TestApprovalExpires: end to end in real time with the local timer — a request with
// no verdict is resolved denied, reason expired, once, with no client and no polling;
// the turn goes on. Then a second request, with its process stopped before the moment
// and a new one started (terret dev restarted): the expiry still comes, from the
// durable record.
func TestApprovalExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{approvals: true, profile: expiringProfile("2s")})
	tm := timer.New(e.db, e.names["AgentsTable"], e.inv, runnerFunction, nil, nil)
	e.restart(func(c *agent.Config) { c.Timer = tm })
	e.inject(script(`{"call":[{"tool":"guarded_echo","args":{"text":"a"}}]}`, `{"say":"went on"}`), true)
	evs := e.waitTurnEnds(1)
	e.settle()
	req := ofType(evs, agent.TypeApprovalRequested)
	res := ofType(evs, agent.TypeApprovalResolved)
	if len(req) != 1 || str(req[0], "expires_at") == "" || len(res) != 1 || str(res[0], "verdict") != agent.VerdictDenied || str(res[0], "reason") != agent.ReasonExpired {
		t.Fatalf("want one request with expires_at, resolved denied/expired:\n%s", dump(evs))
	}
	at, _ := time.Parse(sessionlog.TimeFormat, str(req[0], "expires_at"))
	resolved, _ := time.Parse(sessionlog.TimeFormat, res[0].At)
	if resolved.Before(at) {
		t.Errorf("resolved at %s, before its expires_at %s", res[0].At, str(req[0], "expires_at"))
	}
	if te := lastTurnEnd(t, evs); te["status"] != agent.StatusCompleted || chunkText(evs) != "went on" {
		t.Errorf("the turn goes on after the expiry:\n%s", dump(evs))
	}
	if r := ofType(evs, agent.TypeToolResult); len(r) == 0 || str(r[0], "error") != "denied: expired" {
		t.Errorf("tool/result:\n%s", dump(evs))
	}

	// A restart before the moment: the first timer's process stops, a new one starts.
	e.inject(script(`{"call":[{"tool":"guarded_echo","args":{"text":"b"}}]}`, `{"say":"again"}`), true)
	e.waitFor("second request", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeApprovalRequested) == 2 })
	tm.Stop()
	tm2 := timer.New(e.db, e.names["AgentsTable"], e.inv, runnerFunction, nil, nil)
	e.restart(func(c *agent.Config) { c.Timer = tm2 })
	if err := tm2.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tm2.Stop)
	evs = e.waitTurnEnds(2)
	e.settle()
	e.noErrors()
	if res := ofType(evs, agent.TypeApprovalResolved); len(res) != 2 || str(res[1], "reason") != agent.ReasonExpired {
		t.Errorf("after the restart, want the second request expired:\n%s", dump(evs))
	}
}

// armed records a Timer's arms; the test fires them itself (agent.Timer).
type armed struct {
	mu  sync.Mutex
	ats map[string]time.Time
}

func (a *armed) Arm(_ context.Context, _, callID string, at time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ats[callID] = at
	return nil
}

// TestApproveRacingExpiry: on a controllable clock, an approve and the expiry's fire
// race, many rounds: exactly one approval/resolved is logged for the call; when the
// approve is answered without error it is the approved one, and when it is answered
// stale_call the expired one. An expiry fired early (the clock before expires_at) logs
// nothing and arms again.
func TestApproveRacingExpiry(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	tm := &armed{ats: map[string]time.Time{}}
	e := newEnv(t, opts{approvals: true, profile: expiringProfile("30m"), timer: tm, now: now})
	approved, expired := 0, 0
	for r := range 12 {
		e.inject(script(`{"call":[{"tool":"guarded_echo","args":{"text":"r"}}]}`, `{"say":"ok"}`), true)
		evs := e.waitFor("request", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeApprovalRequested) == r+1 })
		e.settle()
		call := str(ofType(evs, agent.TypeApprovalRequested)[r], "call_id")
		tm.mu.Lock()
		at, ok := tm.ats[call]
		tm.mu.Unlock()
		if !ok || !at.Equal(now().Add(30*time.Minute)) {
			t.Fatalf("round %d: armed %v (%v), want now+30m", r, at, ok)
		}
		if r == 0 { // early: nothing logged, armed again
			if done, err := e.runner.Expire(e.ctx, e.agentID, call); done || err != nil {
				t.Fatalf("an early fire: %v %v", done, err)
			}
		}
		clock.Add((30*time.Minute + time.Millisecond).Milliseconds())
		var wg sync.WaitGroup
		var aerr, xerr error
		wg.Add(2)
		go func() { defer wg.Done(); aerr = e.svc.Approve(e.ctx, e.agentID, call) }()
		go func() {
			defer wg.Done()
			xerr = e.runner.Handle(e.ctx, agent.RunnerEvent{AgentID: e.agentID, Expire: call})
		}()
		wg.Wait()
		if xerr != nil {
			t.Fatalf("round %d: expiry: %v", r, xerr)
		}
		evs = e.waitTurnEnds(r + 1)
		e.settle()
		var verdicts []sessionlog.Event
		for _, ev := range ofType(evs, agent.TypeApprovalResolved) {
			if str(ev, "call_id") == call {
				verdicts = append(verdicts, ev)
			}
		}
		switch {
		case len(verdicts) != 1:
			t.Fatalf("round %d: %d verdicts logged for the call:\n%s", r, len(verdicts), dump(evs))
		case aerr == nil && str(verdicts[0], "verdict") == agent.VerdictApproved:
			approved++
		case errors.Is(aerr, agent.ErrStaleCall) && str(verdicts[0], "reason") == agent.ReasonExpired:
			expired++
		default:
			t.Fatalf("round %d: approve answered %v, logged %s", r, aerr, verdicts[0].Payload)
		}
	}
	e.noErrors()
	t.Logf("12 rounds: %d approved, %d expired", approved, expired)
}
