package agent_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/sessiondata"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// sessionOps runs `terret session reset|delete` on e's tables.
func sessionOps(e *env) *sessiondata.Store {
	return sessiondata.New(e.db, sessiondata.Tables{Log: e.names["LogTable"], Connections: e.names["ConnectionsTable"], Agents: e.names["AgentsTable"]},
		sessiondata.Options{OwnerWait: time.Millisecond})
}

// ownLogEnv is an env whose runtime appends through a Log of its own — a cache of its
// own, as the runner function's process has, which the test's reads do not touch.
func ownLogEnv(t *testing.T, o opts) *env {
	t.Helper()
	names := testTables(t)
	o.names = names
	o.wrapLog = func(agent.Log) agent.Log { return sessionlog.New(dynamotest.Client(t), names["LogTable"]) }
	return newEnv(t, o)
}

// checkOneEpoch fails unless evs, a log read from 0, is of one epoch, seq 0's, and holds
// no text marked stale.
func checkOneEpoch(t *testing.T, evs []sessionlog.Event) {
	t.Helper()
	if len(evs) == 0 || evs[0].Type != sessionlog.TypeSessionCreated {
		t.Fatalf("the log does not start with session/created\n%s", dump(evs))
	}
	for _, ev := range evs {
		if ev.Epoch != evs[0].ID {
			t.Fatalf("seq %d names epoch %q, the log's is %s\n%s", ev.Seq, ev.Epoch, evs[0].ID, dump(evs))
		}
		if strings.Contains(string(ev.Payload), "stale-") {
			t.Fatalf("seq %d: work of the erased log landed in the next one\n%s", ev.Seq, dump(evs))
		}
	}
}

// TestRunnerAfterDelete is the delete's reported failure at the log: a runner process
// whose log cache holds the tip of a session's log runs again after `terret session
// delete` erased it, before the next connect creates the log again (a stimulus that
// reached it: an inject queued after the delete). Its appends were put at the old
// tip's next seqs, with no seq 0 under them, and the next session's log read 0, then
// 7, 8, …. Now the runner finds no log of the epoch it knows and appends nothing; the
// next session's log is gapless from 0.
func TestRunnerAfterDelete(t *testing.T) {
	t.Parallel()
	e := ownLogEnv(t, opts{})
	e.inject("first", true)
	e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	if _, err := sessionOps(e).Delete(e.ctx, e.agentID); err != nil {
		t.Fatal(err)
	}
	e.inject("stale-after-delete", true)
	e.settle()
	e.noErrors()
	if evs, err := e.log.Read(e.ctx, e.agentID, 0, 100); err != nil || len(evs) != 0 {
		t.Fatalf("the deleted session's log before the next connect: %v\n%s", err, dump(evs))
	}
	if _, err := e.log.Create(e.ctx, e.agentID); err != nil {
		t.Fatal(err)
	}
	e.inject("next", true)
	e.waitFor("the next session's turn", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeTurnEnd) >= 1 })
	e.settle()
	e.noErrors()
	evs := e.events() // gapless from 0, or fails
	if evs[0].Type != sessionlog.TypeSessionCreated {
		t.Fatalf("the next session's log\n%s", dump(evs))
	}
	for _, ev := range evs {
		if ev.Epoch != evs[0].ID {
			t.Fatalf("seq %d names epoch %q, the log's is %s\n%s", ev.Seq, ev.Epoch, evs[0].ID, dump(evs))
		}
	}
}

// TestRunnerRacesReset: a turn streams while the session is reset or deleted, at a
// random moment of it, many rounds. The reset takes the runner lease over and waits it
// out; the runner stops appending before its lease ends. Whatever the moment, the log
// after the reset is the next one only — gapless from 0, every event of its epoch,
// nothing of the interrupted turn — and the next session's turn runs in it.
// Rounds: AGENT_EPOCH_ROUNDS (default 4).
func TestRunnerRacesReset(t *testing.T) {
	t.Parallel()
	rounds := 4
	if v, err := strconv.Atoi(os.Getenv("AGENT_EPOCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	for r := range rounds {
		op := []string{"reset", "delete"}[r%2]
		t.Run(fmt.Sprintf("%d-%s", r, op), func(t *testing.T) {
			t.Parallel()
			e := ownLogEnv(t, opts{})
			var steps []string
			for i := range 6 {
				steps = append(steps, fmt.Sprintf(`{"call":[{"tool":"sleep","args":{"ms":%d}}]}`, 20+rand.N(40)), fmt.Sprintf(`{"say":"stale-%d"}`, i))
			}
			e.inject(script(append(steps, `{"say":"stale-end"}`)...), true)
			e.waitFor("the turn's start", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeTurnStart) == 1 })
			time.Sleep(time.Duration(rand.N(300)) * time.Millisecond)
			ops := sessionOps(e)
			switch op {
			case "reset":
				if _, err := ops.Reset(e.ctx, e.agentID); err != nil {
					t.Fatal(err)
				}
			case "delete":
				if _, err := ops.Delete(e.ctx, e.agentID); err != nil {
					t.Fatal(err)
				}
			}
			e.settle()
			if op == "delete" {
				if evs, err := e.log.Read(e.ctx, e.agentID, 0, 100); err != nil || len(evs) != 0 {
					t.Fatalf("the deleted session's log: %v\n%s", err, dump(evs))
				}
				if _, err := e.log.Create(e.ctx, e.agentID); err != nil {
					t.Fatal(err)
				}
			}
			checkOneEpoch(t, e.events())
			e.inject("next", true)
			e.waitFor("the next session's turn", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeTurnEnd) == 1 })
			e.settle()
			evs := e.events()
			checkOneEpoch(t, evs)
			if n := count(evs, agent.TypeTurnStart); n != 1 {
				t.Fatalf("the next session ran %d turns, want 1\n%s", n, dump(evs))
			}
		})
	}
}
