package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/webhook"
)

// TestRetryThenAccept: a receiver that answers 500 once, then 200, gets the event
// twice, both signed (checked with the receiver's own HMAC code), with the same
// webhook-id and body; the second is accepted and the queue is left empty.
func TestRetryThenAccept(t *testing.T) {
	rv := startReceiver(t, func(n int, _ *http.Request) int {
		if n == 0 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	r := startRig(t, fixedHooks{"a1": {hook(t, rv.URL+"/hook?token=q-secret", "turn/*")}}, webhook.Options{FirstRetry: 50 * time.Millisecond})
	resp := r.c.HandleStream(context.Background(), streamBatch(
		event("a1", 3, "user/message", `{"text":"hi"}`),
		event("a1", 4, "turn/end", `{"turn_id":"t1","status":"completed"}`),
	))
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("HandleStream failures %v, want none", resp.BatchItemFailures)
	}
	rv.waitCount(t, 2)
	waitFor(t, "the queue to be empty after the accepted attempt", func() bool { return r.q.Len() == 0 })
	got := rv.deliveries()
	if len(got) != 2 {
		t.Fatalf("receiver got %d requests, want 2 (one 500, one 200)", len(got))
	}
	for i, d := range got {
		if d.verified != nil {
			t.Errorf("request %d: signature: %v", i, d.verified)
		}
		if id := d.header.Get("webhook-id"); id != "ev-a1-4" {
			t.Errorf("request %d: webhook-id %q, want the event's id ev-a1-4", i, id)
		}
	}
	if got[0].status != 500 || got[1].status != 200 {
		t.Errorf("statuses %d, %d; want 500, 200", got[0].status, got[1].status)
	}
	if string(got[0].body) != string(got[1].body) {
		t.Errorf("the retry's body differs:\n%s\n%s", got[0].body, got[1].body)
	}
	var body struct {
		Type    string          `json:"type"`
		AgentID string          `json:"agent_id"`
		Epoch   string          `json:"epoch"`
		Event   json.RawMessage `json:"event"`
	}
	if err := json.Unmarshal(got[1].body, &body); err != nil {
		t.Fatal(err)
	}
	wantEnv := `{"id":"ev-a1-4","session_id":"a1","seq":4,"at":"2026-08-18T04:10:11.123456Z","type":"turn/end","payload":{"turn_id":"t1","status":"completed"}}`
	if body.Type != "turn/end" || body.AgentID != "a1" || body.Epoch != "epoch-1" || string(body.Event) != wantEnv {
		t.Errorf("body %s, want type turn/end, agent a1, epoch epoch-1, event %s", got[1].body, wantEnv)
	}
	if dl := r.q.DeadLetters(); len(dl) != 0 {
		t.Errorf("dead letters %v, want none", dl)
	}
	// Secrets stay out of the logs: neither the key nor the URL's query.
	logs := r.logs.String()
	for _, s := range []string{strings.TrimPrefix(testSecret, "whsec_"), "q-secret"} {
		if strings.Contains(logs, s) {
			t.Errorf("the logs hold a secret %q:\n%s", s, logs)
		}
	}
	if !strings.Contains(logs, `"attempt":1`) || !strings.Contains(logs, "webhook: attempt failed") {
		t.Errorf("the logs do not show the failed first attempt:\n%s", logs)
	}
}

// TestHangingReceiverHoldsUpNoOther: while one agent's receiver holds its request,
// another agent's events (the same stream batch) are delivered, and the stream
// handler returned before either receiver answered.
func TestHangingReceiverHoldsUpNoOther(t *testing.T) {
	release := make(chan struct{})
	hang := startReceiver(t, func(int, *http.Request) int { <-release; return 200 })
	defer close(release)
	ok := startReceiver(t, func(int, *http.Request) int { return 200 })
	r := startRig(t, fixedHooks{
		"slow": {hook(t, hang.URL, "*")},
		"fast": {hook(t, ok.URL, "*")},
	}, webhook.Options{FirstRetry: 50 * time.Millisecond, AttemptTimeout: 10 * time.Minute})
	resp := r.c.HandleStream(context.Background(), streamBatch(
		event("slow", 1, "turn/start", `{}`),
		event("fast", 1, "turn/start", `{}`),
		event("slow", 2, "turn/end", `{}`),
		event("fast", 2, "turn/end", `{}`),
	))
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("HandleStream failures %v", resp.BatchItemFailures)
	}
	hang.waitCount(t, 1) // the hanging receiver holds a request now
	ok.waitCount(t, 2)   // and the other agent's two events arrived meanwhile
	if n := len(hang.deliveries()); n > 2 {
		t.Errorf("the hanging receiver got %d requests while holding the first", n)
	}
	for _, d := range hang.deliveries() {
		if d.status != 0 {
			t.Errorf("the hanging receiver answered (%d) before release", d.status)
		}
	}
}

// TestGivesUpIntoDeadLetters: a receiver that always fails gets MaxAttempts attempts,
// then the job is in the dead-letter queue, and no other attempt follows.
func TestGivesUpIntoDeadLetters(t *testing.T) {
	rv := startReceiver(t, func(int, *http.Request) int { return http.StatusBadGateway })
	r := startRig(t, fixedHooks{"a1": {hook(t, rv.URL, "turn/end")}}, webhook.Options{FirstRetry: 20 * time.Millisecond, MaxAttempts: 3})
	r.c.HandleStream(context.Background(), streamBatch(event("a1", 1, "turn/end", `{}`)))
	waitFor(t, "the job in the dead-letter queue", func() bool { return len(r.q.DeadLetters()) == 1 })
	if n := len(rv.deliveries()); n != 3 {
		t.Errorf("receiver got %d attempts, want 3", n)
	}
	var job webhook.Job
	if err := json.Unmarshal([]byte(r.q.DeadLetters()[0]), &job); err != nil || job.ID != "ev-a1-1" || job.AgentID != "a1" {
		t.Errorf("dead letter %s (%v), want the job of ev-a1-1", r.q.DeadLetters()[0], err)
	}
	if strings.Contains(r.q.DeadLetters()[0], strings.TrimPrefix(testSecret, "whsec_")) {
		t.Error("the dead letter holds the secret")
	}
	if !strings.Contains(r.logs.String(), "giving up") {
		t.Errorf("no give-up line in the logs:\n%s", r.logs.String())
	}
}

// TestOnlyMatchingEvents: events whose type no glob matches are not enqueued; an
// agent without webhooks costs no epoch read and sends nothing.
func TestOnlyMatchingEvents(t *testing.T) {
	rv := startReceiver(t, func(int, *http.Request) int { return 200 })
	r := startRig(t, fixedHooks{"a1": {hook(t, rv.URL, "approval/*", "turn/end")}}, webhook.Options{})
	r.c.HandleStream(context.Background(), streamBatch(
		event("a1", 1, "turn/start", `{}`),
		event("a1", 2, "approval/requested", `{}`),
		event("a1", 3, "assistant/chunk", `{}`),
		event("a1", 4, "turn/end", `{}`),
		event("other", 1, "turn/end", `{}`),
	))
	rv.waitCount(t, 2)
	waitFor(t, "the queue to be empty", func() bool { return r.q.Len() == 0 })
	var ids []string
	for _, d := range rv.deliveries() {
		ids = append(ids, d.header.Get("webhook-id"))
	}
	if len(ids) != 2 || !(ids[0] == "ev-a1-2" && ids[1] == "ev-a1-4" || ids[0] == "ev-a1-4" && ids[1] == "ev-a1-2") {
		t.Errorf("delivered %v, want ev-a1-2 and ev-a1-4", ids)
	}
}
