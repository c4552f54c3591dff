package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// An inject posted over HTTP is fenced by the epoch its handler read: a `terret session
// reset` that runs between that read and the inbox write makes it land in the old
// session (which the reset erases) or be refused, never queued for the new log.

// injectBody is an inject frame of text.
func injectBody(text string, wake bool) []byte {
	b, _ := json.Marshal(map[string]any{"type": "inject", "text": text, "wake": wake})
	return b
}

// checkRefusedForReset fails unless a POST answer is the refusal of a frame whose
// session was reset while it was handled: 500 and the internal error frame.
func checkRefusedForReset(t *testing.T, what string, status int, answer string) {
	t.Helper()
	var f struct{ Type, Code, Message string }
	_ = json.Unmarshal([]byte(answer), &f)
	if status != http.StatusInternalServerError || f.Type != "error" || f.Code != "internal" || !strings.Contains(f.Message, "reset") {
		t.Errorf("%s = %d %s, want 500 and error internal naming the reset", what, status, answer)
	}
}

// TestHTTPInjectHeldAcrossReset: an HTTP inject held after its handler read the log's
// epoch, while `terret session reset` runs to its end, is refused with internal
// (nothing queued), and the new log never holds it; the same frame sent again (same
// Idempotency-Key) is applied to the new session, once.
func TestHTTPInjectHeldAcrossReset(t *testing.T) {
	e := startRuntimeStack(t, devstack.Options{})
	const name = "held"
	tok := e.token(t, name)
	a := &agentConn{t: t, e: e, agent: name}
	h := e.pause.arm(agent.PauseQueueing, name)
	type answer struct {
		status int
		body   string
	}
	done := make(chan answer, 1)
	go func() {
		s, b := e.postFrame(t, name, tok, "k-held", injectBody("held", false))
		done <- answer{s, b}
	}()
	h.wait(a)
	old, err := e.log.Epoch(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := e.sessionOps().Reset(context.Background(), name)
	if err != nil || epoch == old {
		t.Fatalf("reset: epoch %q (old %q), %v", epoch, old, err)
	}
	h.release()
	var got answer
	select {
	case got = <-done:
	case <-time.After(hang()):
		t.Fatal("the held POST never answered")
	}
	checkRefusedForReset(t, "POST held across the reset", got.status, got.body)
	if st := e.stateItem(t, name); st["inbox"] != nil || st["pending"] != nil {
		t.Fatalf("the new session's state item holds a queued inject: %v", st)
	}
	// Sent again, it is applied to the new session: nothing of the first attempt
	// (its client_id included) was kept.
	if s, b := e.postFrame(t, name, tok, "k-held", injectBody("held", true)); s != http.StatusAccepted {
		t.Fatalf("POST held again = %d %s, want 202", s, b)
	}
	evs := awaitText(t, e, name, "held")
	ids, _ := injected(t, evs, "")
	if ids["k-held"] != 1 || len(ids) != 1 || evs[0].ID != epoch {
		t.Fatalf("new log (epoch %s, seq 0 %s): inject events by client_id %v, want k-held once", epoch, evs[0].ID, ids)
	}
}

// TestHTTPInjectRacesReset: rounds of HTTP injects racing `terret session reset`, under
// real concurrency: each round's injects have all read the log's epoch (held at
// agent.PauseQueueing) when the reset starts, and are let go one by one at random
// moments while it runs or once it has returned. Each is answered 202 (queued in the old session, which the
// reset erases) or refused with internal; none is ever in the new log, which a waking
// inject posted after the reset drains. Every round is a new epoch.
func TestHTTPInjectRacesReset(t *testing.T) {
	e := startRuntimeStack(t, devstack.Options{})
	const name = "racing"
	const perRound = 4
	tok := e.token(t, name)
	a := &agentConn{t: t, e: e, agent: name}
	if s, b := e.postFrame(t, name, tok, "", injectBody("first", true)); s != http.StatusAccepted {
		t.Fatalf("POST first = %d %s", s, b)
	}
	awaitText(t, e, name, "first")
	a.ran(1)
	n := rounds(t, 10)
	accepted, refused := 0, 0
	for r := range n {
		before, err := e.log.Epoch(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		holds := make([]*hold, perRound)
		for i := range holds {
			holds[i] = e.pause.arm(agent.PauseQueueing, name)
		}
		statuses := make([]int, perRound)
		var posts sync.WaitGroup
		for i := range perRound {
			posts.Add(1)
			go func() {
				defer posts.Done()
				key := fmt.Sprintf("r%d-%d", r, i)
				s, b := e.postFrame(t, name, tok, key, injectBody(key, false))
				statuses[i] = s
				if s != http.StatusAccepted {
					checkRefusedForReset(t, "POST "+key, s, b)
				}
			}()
		}
		for _, h := range holds {
			h.wait(a) // every inject has read the epoch before the reset starts
		}
		var epoch string
		var resetErr error
		var race sync.WaitGroup
		reset := make(chan struct{})
		race.Add(1 + perRound)
		go func() {
			defer race.Done()
			defer close(reset)
			epoch, resetErr = e.sessionOps().Reset(context.Background(), name)
		}()
		for i, h := range holds {
			go func() {
				defer race.Done()
				// Let go at a random moment of the reset's steps (the sleeps spread the
				// releases; nothing waits on them), or once it has returned: the first
				// inject of each round always, so that each round has one whose write
				// comes after the new log's seq 0.
				switch mode := rand.N(3); {
				case i == 0 || mode == 2:
					<-reset
				case mode == 1:
					time.Sleep(rand.N(300 * time.Millisecond))
				default:
					time.Sleep(rand.N(30 * time.Millisecond))
				}
				h.release()
			}()
		}
		race.Wait()
		posts.Wait()
		if resetErr != nil || epoch == before {
			t.Fatalf("round %d: reset: epoch %q (before %q), %v", r, epoch, before, resetErr)
		}
		for _, s := range statuses {
			if s == http.StatusAccepted {
				accepted++
			} else {
				refused++
			}
		}
		// A waking inject of the new session drains whatever its inbox holds.
		fresh := fmt.Sprintf("r%d-fresh", r)
		if s, b := e.postFrame(t, name, tok, fresh, injectBody(fresh, true)); s != http.StatusAccepted {
			t.Fatalf("round %d: POST %s = %d %s", r, fresh, s, b)
		}
		evs := awaitText(t, e, name, fresh)
		a.ran(r + 2)
		if evs[0].Type != sessionlog.TypeSessionCreated || evs[0].ID != epoch {
			t.Fatalf("round %d: the log read is not the new one (seq 0 %s %s, epoch %s)", r, evs[0].Type, evs[0].ID, epoch)
		}
		if ids, _ := injected(t, evs, ""); ids[fresh] != 1 || len(ids) != 1 {
			t.Fatalf("round %d: the new log's inject events by client_id %v, want %s alone: an inject of the old epoch landed in the new log", r, ids, fresh)
		}
	}
	t.Logf("%d rounds of %d injects racing a reset: %d answered 202 (queued in the old session), %d refused", n, perRound, accepted, refused)
}
