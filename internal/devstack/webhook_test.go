package devstack_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/webhook"
)

const (
	webhookSecretVar = "TERRET_TEST_WEBHOOK_SECRET"
	webhookSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// hookRequest is one request the test's receiver got.
type hookRequest struct {
	id, ts  string
	body    []byte
	signed  error
	status  int // 0 while the receiver holds it
	arrived time.Time
	eventOf struct {
		Type    string `json:"type"`
		AgentID string `json:"agent_id"`
		Epoch   string `json:"epoch"`
		Event   struct {
			ID  string `json:"id"`
			Seq int64  `json:"seq"`
		} `json:"event"`
	}
}

// hookReceiver holds its first request until release is closed and answers it 500,
// then answers 200; it checks each signature with its own HMAC code.
type hookReceiver struct {
	*httptest.Server
	release    chan struct{}
	releasedAt time.Time
	mu         sync.Mutex
	reqs       []*hookRequest
	arrived    chan struct{}
}

func startHookReceiver(t *testing.T) *hookReceiver {
	t.Helper()
	rv := &hookReceiver{release: make(chan struct{}), arrived: make(chan struct{}, 100)}
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(webhookSecret, "whsec_"))
	rv.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &hookRequest{id: r.Header.Get("webhook-id"), ts: r.Header.Get("webhook-timestamp"), body: body, arrived: time.Now()}
		mac := hmac.New(sha256.New, key)
		fmt.Fprintf(mac, "%s.%s.%s", req.id, req.ts, body)
		if want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); r.Header.Get("webhook-signature") != want {
			req.signed = fmt.Errorf("webhook-signature %q, want %q", r.Header.Get("webhook-signature"), want)
		}
		if err := json.Unmarshal(body, &req.eventOf); err != nil {
			req.signed = fmt.Errorf("body %s: %v", body, err)
		}
		rv.mu.Lock()
		n := len(rv.reqs)
		rv.reqs = append(rv.reqs, req)
		rv.mu.Unlock()
		rv.arrived <- struct{}{}
		status := http.StatusOK
		if n == 0 {
			select {
			case <-rv.release:
			case <-r.Context().Done():
			}
			status = http.StatusInternalServerError
		}
		rv.mu.Lock()
		req.status = status
		rv.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(func() {
		select {
		case <-rv.release:
		default:
			close(rv.release)
		}
		rv.Close()
	})
	return rv
}

func (rv *hookReceiver) snapshot() []hookRequest {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	out := make([]hookRequest, len(rv.reqs))
	for i, r := range rv.reqs {
		out[i] = *r
	}
	return out
}

// waitFor waits, bounded by hang(), until cond holds over the receiver's requests.
func (rv *hookReceiver) waitFor(t *testing.T, what string, cond func([]hookRequest) bool) []hookRequest {
	t.Helper()
	deadline := time.After(hang())
	for {
		if got := rv.snapshot(); cond(got) {
			return got
		}
		select {
		case <-rv.arrived:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("waited %s for the receiver: %s; got %d requests", hang(), what, len(rv.snapshot()))
		}
	}
}

// TestWebhookDelivery runs webhooks end to end through terret dev's stack, in
// whichever mode the rig runs (emulated: the webhook function's own bootstrap): the
// default profile names a receiver on loopback for turn/end. The receiver holds the
// first delivery while a second turn runs start to end — a hanging receiver delays no
// turn and no socket — then answers it 500; the event comes again, signed, and is
// accepted; the second turn's turn/end arrives once. Each body carries the agent, the
// log's epoch (the id of seq 0) and the envelope as the socket got it; the secret is
// in no log line.
//
// It sets a variable of the process (t.Setenv), so it does not run in parallel.
func TestWebhookDelivery(t *testing.T) {
	t.Setenv(webhookSecretVar, webhookSecret)
	rv := startHookReceiver(t)
	file := filepath.Join(t.TempDir(), "agent.json")
	if err := os.WriteFile(file, []byte(`{"webhooks": [{"url": "`+rv.URL+`/hook", "events": ["turn/end"], "secret_env": "`+webhookSecretVar+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuf
	e := startStack(t, devstack.Options{Profile: file, Logger: service.Logger(&logs, "debug"),
		Webhook: webhook.Options{FirstRetry: 200 * time.Millisecond, AttemptTimeout: hang()}})
	const agentID = "hooked"
	c := e.dial(t, agentID, e.token(t, agentID))
	c.hello(agentID)
	c.send(`{"type":"subscribe","from_seq":0}`)
	created := c.must(hang())
	var epoch struct{ ID string }
	json.Unmarshal(created.raw, &epoch)
	// untilEnd reads events up to the next turn/end and returns it.
	untilEnd := func() frame {
		t.Helper()
		for {
			f := c.must(hang())
			if f.Type == "turn/end" {
				return f
			}
		}
	}
	c.send(`{"type":"inject","text":"first","wake":true}`)
	end1 := untilEnd()
	held := rv.waitFor(t, "the first turn/end's first attempt", func(r []hookRequest) bool { return len(r) >= 1 })
	if held[0].status != 0 {
		t.Fatalf("the receiver answered %d before release", held[0].status)
	}
	// A whole turn while the receiver holds the request.
	c.send(`{"type":"inject","text":"second","wake":true}`)
	end2 := untilEnd()
	if got := rv.snapshot(); got[0].status != 0 && !emulated() { // emulated, attempts are cut at 10 s
		t.Errorf("the receiver was no longer holding the first request when the second turn ended (status %d): the turn waited for it", got[0].status)
	}
	rv.releasedAt = time.Now()
	close(rv.release)
	var e1, e2 struct{ ID string }
	json.Unmarshal(end1.raw, &e1)
	json.Unmarshal(end2.raw, &e2)
	got := rv.waitFor(t, "turn/end 1 twice (500, then 200) and turn/end 2 accepted", func(r []hookRequest) bool {
		var ok1, ok2 bool
		for _, q := range r {
			ok1 = ok1 || q.id == e1.ID && q.status == 200
			ok2 = ok2 || q.id == e2.ID && q.status == 200
		}
		return ok1 && ok2
	})
	byID := map[string][]hookRequest{}
	for _, q := range got {
		if q.signed != nil {
			t.Errorf("request for %s: %v", q.id, q.signed)
		}
		byID[q.id] = append(byID[q.id], q)
	}
	if r := byID[e1.ID]; len(r) != 2 || r[0].status != 500 || r[1].status != 200 || string(r[0].body) != string(r[1].body) {
		t.Errorf("turn/end 1 (%s): %d requests, want 2: 500 then 200 with the same body", e1.ID, len(r))
	}
	if r := byID[e2.ID]; len(r) != 1 {
		t.Errorf("turn/end 2 (%s): %d requests, want 1", e2.ID, len(r))
	} else if at, err := time.Parse(time.RFC3339Nano, e2At(end2)); err == nil {
		// A figure, not a bound: from the append to the first attempt's arrival.
		t.Logf("turn/end appended → delivered: %v (poll interval, fan-out, queue, attempt)", r[0].arrived.Sub(at).Round(time.Millisecond))
	}
	if r := byID[e1.ID]; len(r) == 2 && r[1].arrived.After(rv.releasedAt) {
		t.Logf("first attempt answered → retry arrived: %v (FirstRetry %v in process; 5 s emulated)", r[1].arrived.Sub(rv.releasedAt).Round(time.Millisecond), 200*time.Millisecond)
	} else if len(r) == 2 {
		t.Logf("the first attempt timed out before the release (emulated: 10 s per attempt); its retry came %v after it", r[1].arrived.Sub(r[0].arrived).Round(time.Millisecond))
	}
	if len(byID) != 2 {
		t.Errorf("deliveries for %d events, want the two turn/end only", len(byID))
	}
	for _, f := range []frame{end1, end2} {
		var env struct{ ID string }
		json.Unmarshal(f.raw, &env)
		r := byID[env.ID]
		if len(r) == 0 {
			continue
		}
		b := r[len(r)-1]
		if b.eventOf.Type != "turn/end" || b.eventOf.AgentID != agentID || b.eventOf.Epoch != epoch.ID || b.eventOf.Event.Seq != *f.Seq {
			t.Errorf("body %s: want type turn/end, agent %s, epoch %s, seq %d", b.body, agentID, epoch.ID, *f.Seq)
		}
		if !strings.Contains(string(b.body), `"event":`+string(f.raw)+`}`) {
			t.Errorf("body %s does not carry the envelope byte for byte as the socket got it: %s", b.body, f.raw)
		}
	}
	if strings.Contains(logs.String(), strings.TrimPrefix(webhookSecret, "whsec_")) {
		t.Error("the stack's logs hold the webhook secret")
	}
}

// e2At is an envelope's at.
func e2At(f frame) string {
	var env struct{ At string }
	json.Unmarshal(f.raw, &env)
	return env.At
}
