package agent_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/terret/terret-ws/internal/agent"
)

// crashAt stops the runner the first time it reaches point.
func crashAt(point string) (func(string) bool, *atomic.Bool) {
	var fired atomic.Bool
	return func(p string) bool { return p == point && fired.CompareAndSwap(false, true) }, &fired
}

// run makes one runner invocation and returns its error.
func (a *aged) run() error {
	return a.runner.Run(a.ctx, a.id)
}

// TestCheckpointCrashPoints kills the runner around the checkpoint's write and the
// compaction's append on an aged agent (its first invocation builds the checkpoint
// and compacts): after the crash the checkpoint has not moved; the next invocation
// resumes the turn, and the log holds each event of it once — one user/message, one
// turn/start, one context/compacted, one answer, one turn/end — and the turn is metered
// once.
func TestCheckpointCrashPoints(t *testing.T) {
	t.Parallel()
	names := testTables(t)
	for _, point := range []string{agent.CrashCompacted, agent.CrashBeforeRelease, agent.CrashUserMessage, agent.CrashTurnEnded} {
		t.Run(point, func(t *testing.T) {
			hook, fired := crashAt(point)
			a := newAged(t, names, 800, agedProfile(1000), func(c *agent.Config) { c.Crash = hook })
			ck := a.checkpointSeq()
			from := a.tip() + 1
			if err := a.svc.Inject(a.ctx, a.id, "survive this", true); err != nil {
				t.Fatal(err)
			}
			if err := a.run(); !errors.Is(err, agent.ErrCrashed) || !fired.Load() {
				t.Fatalf("run: %v, want the crash at %s", err, point)
			}
			if got := a.checkpointSeq(); got != ck {
				t.Fatalf("checkpoint moved from %d to %d by a crashed invocation", ck, got)
			}
			if err := a.run(); err != nil { // waits out the dead lease, then resumes
				t.Fatalf("resume: %v", err)
			}
			evs := a.since(from)
			for typ, n := range map[string]int{agent.TypeUserMessage: 1, agent.TypeTurnStart: 1, agent.TypeTurnEnd: 1, agent.TypeContextCompacted: 1} {
				if got := count(evs, typ); got != n {
					t.Errorf("%s %d times, want %d\n%s", typ, got, n, dump(evs))
				}
			}
			if count(evs, agent.TypeContextInjected) != 0 || chunkText(evs) != "survive this" || lastTurnEndOf(t, evs)["status"] != agent.StatusCompleted {
				t.Fatalf("resumed turn:\n%s", dump(evs))
			}
			seq := a.checkpointSeq()
			if seq <= 0 || seq > a.tip()+1 {
				t.Fatalf("checkpoint %d after the resumed turn, tip %d", seq, a.tip())
			}
			evs = a.turn("and again")
			if chunkText(evs) != "and again" || count(evs, agent.TypeUserMessage) != 1 {
				t.Fatalf("next turn:\n%s", dump(evs))
			}
			u, err := a.svc.Usage(a.ctx, a.id)
			if err != nil {
				t.Fatal(err)
			}
			if u.Turns != 2 {
				t.Fatalf("usage counts %d turns, want 2", u.Turns)
			}
		})
	}
}

// TestApprovalAcrossCheckpointAndCompaction: a turn on an aged agent compacts its old
// history, then parks on an approval; the parked invocation's checkpoint stays at or
// below the open turn; a new runner (a cold start) takes the approval and finishes the
// turn, the tool running once; the policy seeded at seq 1 — far below the compaction
// point — still refuses clock.
func TestApprovalAcrossCheckpointAndCompaction(t *testing.T) {
	t.Parallel()
	a := newAged(t, testTables(t), 800, agedProfile(1000), nil)
	from := a.tip() + 1
	evs := a.turn(script(`{"call":[{"tool":"clock","args":{}}]}`, `{"call":[{"tool":"guarded_echo","args":{"text":"approved text"}}]}`, `{"say":"done"}`))
	if count(evs, agent.TypeContextCompacted) != 1 || count(evs, agent.TypeApprovalRequested) != 1 || count(evs, agent.TypeTurnEnd) != 0 {
		t.Fatalf("first invocation:\n%s", dump(evs))
	}
	if res := ofType(evs, agent.TypeToolResult); len(res) != 1 || !strings.Contains(string(res[0].Payload), agent.ErrTextPolicy) {
		t.Fatalf("clock under the seeded policy:\n%s", dump(evs))
	}
	turnStart := ofType(evs, agent.TypeTurnStart)[0].Seq
	if ck := a.checkpointSeq(); ck > turnStart {
		t.Fatalf("parked turn starts at %d, checkpoint at %d", turnStart, ck)
	}
	a.restart()
	call := str(ofType(evs, agent.TypeToolCall)[1], "id")
	if err := a.svc.Approve(a.ctx, a.id, call); err != nil {
		t.Fatal(err)
	}
	if err := a.run(); err != nil {
		t.Fatal(err)
	}
	evs = a.since(from)
	res := ofType(evs, agent.TypeToolResult)
	if len(res) != 2 || !strings.Contains(string(res[1].Payload), "approved text") || lastTurnEndOf(t, evs)["status"] != agent.StatusCompleted || chunkText(evs) != "done" {
		t.Fatalf("after the approval:\n%s", dump(evs))
	}
	// From the checkpoint alone (the seeded policy/updated is far below it), clock is
	// still refused.
	a.restart()
	a.logged.reset()
	evs = a.turn(script(`{"call":[{"tool":"clock","args":{}}]}`, `{"say":"done"}`))
	if low := a.logged.lowest(); low <= 1 {
		t.Fatalf("the turn read the log from seq %d", low)
	}
	if res := ofType(evs, agent.TypeToolResult); len(res) != 1 || !strings.Contains(string(res[0].Payload), agent.ErrTextPolicy) {
		t.Fatalf("clock under the policy from the checkpoint:\n%s", dump(evs))
	}
}
