package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
)

// checkFold fails the test unless the runner's model context of a (from the fold
// items below its checkpoint) equals the projection of all its events.
func (a *aged) checkFold(after string) int {
	a.t.Helper()
	n, err := agent.CheckFold(a.ctx, a.cfg, a.id)
	if err != nil {
		a.t.Fatalf("after %s: %v\n%s", after, err, dump(a.since(0)))
	}
	return n
}

// TestFoldEqualsTheEvents: after each kind of turn — plain, with tool calls, steered,
// parked on an approval and approved, cancelled, failed, refused, empty — each in its own
// cold runner, the model context a runner builds from the fold items below its
// checkpoint and the events from it on is the one the whole log projects (messages,
// summary, budget estimate); and so after compactions, on a small budget.
func TestFoldEqualsTheEvents(t *testing.T) {
	t.Parallel()
	for _, budget := range []int64{0, 400} {
		t.Run(fmt.Sprintf("budget %d", budget), func(t *testing.T) {
			t.Parallel()
			prof := tools.DefaultProfile()
			prof.Context.BudgetTokens = budget
			a := newAged(t, testTables(t), 0, prof, nil)
			long := strings.Repeat("a long answer word ", 60)
			steps := []struct {
				name string
				do   func()
			}{
				{"a plain turn", func() { a.turn("hello there") }},
				{"a tool turn", func() {
					a.turn(script(`{"call":[{"tool":"echo","args":{"text":"x"}},{"tool":"clock","args":{}}]}`, `{"say":"done","chunks":5}`))
				}},
				{"a steered turn", func() {
					if err := a.svc.Inject(a.ctx, a.id, script(`{"say":"`+long+`","chunks":40}`), true); err != nil {
						t.Fatal(err)
					}
					if err := a.svc.Inject(a.ctx, a.id, "and a steer", false); err != nil {
						t.Fatal(err)
					}
					if err := a.run(); err != nil {
						t.Fatal(err)
					}
				}},
				{"a parked turn", func() {
					a.turn(script(`{"call":[{"tool":"guarded_echo","args":{"text":"approve me"}}]}`, `{"say":"approved"}`))
				}},
				{"its approval", func() {
					call := str(ofType(a.since(0), agent.TypeApprovalRequested)[0], "call_id")
					if err := a.svc.Approve(a.ctx, a.id, call); err != nil {
						t.Fatal(err)
					}
					if err := a.run(); err != nil {
						t.Fatal(err)
					}
				}},
				{"a parked turn to cancel", func() {
					a.turn(script(`{"call":[{"tool":"guarded_echo","args":{"text":"cancel me"}}]}`, `{"say":"never"}`))
				}},
				{"its cancel", func() {
					if err := a.svc.Cancel(a.ctx, a.id, "changed my mind"); err != nil {
						t.Fatal(err)
					}
					if err := a.run(); err != nil {
						t.Fatal(err)
					}
				}},
				{"a failed turn", func() { a.turn(script(`{"say":"partial","chunks":3}`, `{"fail":"the model broke"}`)) }},
				{"a failed tool turn", func() {
					a.turn(script(`{"call":[{"tool":"echo","args":{"text":"y"}}]}`, `{"fail":"broke after the tool"}`))
				}},
				{"a refused turn", func() { a.turn(script(`{"refuse":"no"}`)) }},
				{"an empty turn", func() { a.turn(script()) }},
				{"a long turn", func() { a.turn(script(`{"say":"` + long + long + `","chunks":200}`)) }},
				{"a plain turn again", func() { a.turn("and again") }},
			}
			folded := 0
			for _, s := range steps {
				a.restart()
				s.do()
				folded = max(folded, a.checkFold(s.name))
			}
			all := a.since(0)
			if folded == 0 {
				t.Fatalf("no context was ever built from fold items:\n%s", dump(all))
			}
			if budget > 0 && len(compactions(all)) < 2 {
				t.Fatalf("budget %d: %d compactions, want at least 2:\n%s", budget, len(compactions(all)), dump(all))
			}
			for _, k := range []string{agent.StatusCompleted, agent.StatusCancelled, agent.StatusFailed, agent.StatusRejected, agent.StatusEmpty} {
				if !strings.Contains(dump(ofType(all, agent.TypeTurnEnd)), k) {
					t.Fatalf("no %s turn:\n%s", k, dump(all))
				}
			}
			if count(all, agent.TypeContextInjected) != 1 {
				t.Fatalf("no steer logged:\n%s", dump(all))
			}
		})
	}
}

// seedChunky writes n events (seq 1..n) of a long-lived streaming agent: four
// completed turns, each a user/message, turn/start, its answer as many
// assistant/chunk events, and turn/end. The answers' text is about text bytes in all
// whatever n, so a young log and an old one hold the same history.
func seedChunky(t *testing.T, id string, table string, n, text int) {
	t.Helper()
	at := time.Now().UTC().Format(sessionlog.TimeFormat)
	const turns = 4
	chunks := (n - turns*3) / turns
	per := max(text/(chunks*turns), 1)
	var events []sessionlog.Event
	seq := int64(1)
	add := func(typ string, payload any) {
		b, _ := json.Marshal(payload)
		events = append(events, sessionlog.Event{ID: fmt.Sprintf("ev_chunky_%d", seq), SessionID: id, Seq: seq, At: at, Type: typ, Payload: b})
		seq++
	}
	for k := range turns {
		turn := fmt.Sprintf("turn_chunky_%d", k)
		add(agent.TypeUserMessage, map[string]any{"text": fmt.Sprintf("question %d", k), "turn_id": turn})
		add(agent.TypeTurnStart, map[string]any{"turn_id": turn})
		for i := range chunks {
			c := map[string]any{"text": strings.Repeat("w", per), "index": i}
			if i == chunks-1 {
				c["final"] = true
				c["usage"] = map[string]any{"input_tokens": 10, "output_tokens": chunks}
			}
			add(agent.TypeAssistantChunk, c)
		}
		add(agent.TypeTurnEnd, map[string]any{"turn_id": turn, "status": "completed"})
	}
	for seq <= int64(n) {
		add(agent.TypeSessionTitled, map[string]any{"title": "chunky"})
	}
	writeEvents(t, dynamotest.Client(t), table, events)
}

// TestFoldReadsDoNotGrowWithEvents: an agent whose log is mostly assistant/chunk events
// and whose history stays under the budget never compacts; once its first invocation
// has folded the history, a plain turn reads no event below the checkpoint and as many
// read units on a log of 5,000 events (100,000 under make soak) as on one of 1,000 —
// what it reads is bounded by the history, not by the events — and the model gets the
// same history from the fold as the events project.
func TestFoldReadsDoNotGrowWithEvents(t *testing.T) {
	t.Parallel()
	names := testTables(t)
	sizes := []int{1_000, 5_000}
	if os.Getenv("SOAK") == "1" {
		sizes = []int{1_000, 100_000}
	}
	rru := map[int]float64{}
	for _, n := range sizes {
		a := newAged(t, names, 0, agedProfile(100_000), nil)
		seedChunky(t, a.id, names["LogTable"], n, 20_000)
		first := a.turn("warm up")
		if te := lastTurnEndOf(t, first); te["status"] != agent.StatusCompleted || count(first, agent.TypeContextCompacted) != 0 {
			t.Fatalf("%d events: first turn:\n%s", n, dump(first))
		}
		for round := range 2 {
			a.restart()
			a.reads.Reset()
			a.logged.reset()
			ck := a.checkpointSeq()
			evs := a.turn(fmt.Sprintf("hello %d", round))
			if te := lastTurnEndOf(t, evs); te["status"] != agent.StatusCompleted || chunkText(evs) != fmt.Sprintf("hello %d", round) || count(evs, agent.TypeContextCompacted) != 0 {
				t.Fatalf("%d events: turn %d:\n%s", n, round, dump(evs))
			}
			if low := a.logged.lowest(); low < ck {
				t.Fatalf("%d events: turn %d read the log from seq %d, below the checkpoint %d", n, round, low, ck)
			}
			rru[n] = a.reads.Units("")
			t.Logf("%d events: turn %d: log %.1f agents %.1f read units, checkpoint %d, tip %d", n, round, a.reads.Units(names["LogTable"]), a.reads.Units(names["AgentsTable"]), ck, a.tip())
		}
		if folded := a.checkFold("the turns"); folded == 0 {
			t.Fatalf("%d events: the runner's context holds no folded event", n)
		}
	}
	young, old := sizes[0], sizes[len(sizes)-1]
	if rru[old] > rru[young]*1.2 {
		t.Fatalf("a plain turn reads %.1f units on a %d-event log, %.1f on a %d-event one", rru[old], old, rru[young], young)
	}
}

var _ = context.Background
