package devstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// Exactly-once control frames (client_id) and frames posted over HTTP, against a
// running stack: the gateway's socket and its HTTP path, the message function (in
// process, or emulated under the rig's emulator mode), DynamoDB Local.

// httpURL is the stack's base URL for the agent paths over HTTP.
func (e env) httpURL() string { return "http" + strings.TrimPrefix(e.stack.WebSocketURL(), "ws") }

// postFrame posts body to agent's frames path with token and key (none if ""), and
// returns the status and the answer's body.
func (e env) postFrame(t *testing.T, agent, token, key string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.httpURL()+"/agents/"+agent+"/frames", bytes.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set(protocol.IdempotencyKeyHeader, key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("post frame: %v", err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// logOf reads agent's whole log.
func logOf(t *testing.T, l *sessionlog.Log, agent string) []sessionlog.Event {
	t.Helper()
	evs, err := l.Read(context.Background(), agent, 0, 100000)
	if err != nil {
		t.Fatalf("read log of %s: %v", agent, err)
	}
	return evs
}

// injected counts, by client_id, the user/message and context/injected events of evs,
// and reports whether one carries text.
func injected(t *testing.T, evs []sessionlog.Event, text string) (map[string]int, bool) {
	t.Helper()
	ids, found := map[string]int{}, false
	for _, ev := range evs {
		if ev.Type != "user/message" && ev.Type != "context/injected" {
			continue
		}
		var p struct {
			Text     string `json:"text"`
			ClientID string `json:"client_id"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatalf("payload of %s at seq %d: %v", ev.Type, ev.Seq, err)
		}
		ids[p.ClientID]++
		found = found || p.Text == text
	}
	return ids, found
}

// awaitText waits until agent's log holds an inject event with text (the stream of
// every append wakes the wait: logWatch is not needed, the runner's invocations are
// counted) and returns the log.
func awaitText(t *testing.T, e env, agent, text string) []sessionlog.Event {
	t.Helper()
	a := &agentConn{t: t, e: e, agent: agent}
	var evs []sessionlog.Event
	e.calls.until(a, "an inject event with text "+strconv.Quote(text)+" in the log", func() bool {
		evs = logOf(t, e.log, agent)
		_, ok := injected(t, evs, text)
		return ok
	})
	return evs
}

// framesHandled waits until the message handler has returned n times for body on
// agent's connections.
func framesHandled(t *testing.T, e env, agent string, body []byte, n int) {
	t.Helper()
	a := &agentConn{t: t, e: e, agent: agent}
	e.calls.until(a, fmt.Sprintf("%d handled frames %s", n, body), func() bool {
		return e.calls.frames[frameKey(agent, string(body))] >= n
	})
}

func rounds(t *testing.T, def int) int {
	if v, err := strconv.Atoi(os.Getenv("TERRET_TEST_FRAMES_ROUNDS")); err == nil && v > 0 {
		return v
	}
	if testing.Short() {
		return 3
	}
	return def
}

// TestClientIDOnce: the same inject, with one client_id, sent on the agent's socket,
// on a second socket that connects at the same time (superseding the first), and
// posted over HTTP at once, is applied once: one user/message or context/injected
// carries the client_id, whichever of the three won. Each round is a new id; the
// rounds' turns overlap, so some land as steers.
func TestClientIDOnce(t *testing.T) {
	e := startRuntimeStack(t, devstack.Options{})
	const agent = "once"
	tok := e.token(t, agent)
	a := e.dial(t, agent, tok)
	a.hello(agent)
	n := rounds(t, 12)
	for i := range n {
		id := fmt.Sprintf("round-%d", i)
		body, _ := json.Marshal(map[string]any{"type": "inject", "text": "round " + strconv.Itoa(i), "wake": true, "client_id": id})
		a.send(body)
		var wg sync.WaitGroup
		var b *client
		wg.Add(2)
		go func() {
			defer wg.Done()
			c, err := e.tryDial(agent, tok)
			if err != nil {
				t.Errorf("round %d: dial: %v", i, err)
				return
			}
			c.t = t
			t.Cleanup(func() { c.c.CloseNow() })
			c.send(body)
			b = c
		}()
		go func() {
			defer wg.Done()
			if status, answer := e.postFrame(t, agent, tok, id, body); status != http.StatusAccepted || strings.TrimSpace(answer) != `{"accepted":true}` {
				t.Errorf("round %d: POST = %d %s, want 202 {\"accepted\":true}", i, status, answer)
			}
		}()
		wg.Wait()
		if b == nil {
			t.FailNow()
		}
		framesHandled(t, e, agent, body, 2) // the first socket's and the second's
		a.c.CloseNow()
		a = b
		b.hello(agent)
	}
	// Every round's handlers have returned: a last inject drains after anything they
	// queued (the inbox drains in receipt order).
	if status, answer := e.postFrame(t, agent, tok, "", []byte(`{"type":"inject","text":"done","wake":true}`)); status != http.StatusAccepted {
		t.Fatalf("POST done = %d %s", status, answer)
	}
	ids, _ := injected(t, awaitText(t, e, agent, "done"), "done")
	for i := range n {
		if got := ids[fmt.Sprintf("round-%d", i)]; got != 1 {
			t.Errorf("client_id round-%d: %d inject events, want 1 (all: %v)", i, got, ids)
		}
	}
	if ids[""] != 1 || len(ids) != n+1 {
		t.Errorf("inject events by client_id %v, want the %d rounds once each and done", ids, n)
	}
}

// TestClientIDRepeatAfterReconnect: an inject resent with its client_id on a new
// connection, once its event is in the log, appends nothing; the events a frame
// produced carry its client_id (user/message, context/injected, policy/updated); a
// set_policy repeated over HTTP appends nothing either.
func TestClientIDRepeatAfterReconnect(t *testing.T) {
	e := startRuntimeStack(t, devstack.Options{})
	const agent = "again"
	tok := e.token(t, agent)
	a := e.dial(t, agent, tok)
	a.hello(agent)
	first := []byte(`{"type":"inject","text":"first","wake":true,"client_id":"k-1","order":1}`)
	a.send(first)
	awaitText(t, e, agent, "first")
	a.c.CloseNow()

	b := e.dial(t, agent, tok)
	b.hello(agent)
	again := []byte(`{"type":"inject","text":"first","wake":true,"client_id":"k-1","order":1}`)
	b.send(again)
	b.send(`{"type":"set_policy","patterns":["echo"],"client_id":"p-1","order":2}`)
	b.send(`{"type":"approve","call_id":"","order":3}`) // a barrier: answered once 1 and 2 took effect
	if f := b.expectError("bad_frame"); !strings.Contains(f.Msg, "call_id") {
		t.Fatalf("barrier answered %s", f)
	}
	if status, answer := e.postFrame(t, agent, tok, "p-1", []byte(`{"type":"set_policy","patterns":["other"]}`)); status != http.StatusAccepted {
		t.Fatalf("repeated set_policy over HTTP = %d %s, want 202", status, answer)
	}
	if status, answer := e.postFrame(t, agent, tok, "", []byte(`{"type":"inject","text":"second","wake":true,"client_id":"k-2"}`)); status != http.StatusAccepted {
		t.Fatalf("POST second = %d %s", status, answer)
	}
	evs := awaitText(t, e, agent, "second")
	ids, _ := injected(t, evs, "")
	if ids["k-1"] != 1 || ids["k-2"] != 1 || len(ids) != 2 {
		t.Fatalf("inject events by client_id %v, want k-1 and k-2 once each", ids)
	}
	var policies []string
	for _, ev := range evs {
		if ev.Type == "policy/updated" {
			policies = append(policies, string(ev.Payload))
		}
	}
	if len(policies) != 1 || policies[0] != `{"patterns":["echo"],"client_id":"p-1"}` {
		t.Fatalf("policy/updated payloads %q, want the one set_policy with client_id p-1", policies)
	}
}

// TestHTTPFrames: the status and body of each answer of POST /agents/{id}/frames. An
// error's body is exactly the socket's error frame.
func TestHTTPFrames(t *testing.T) {
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "h1")
	big := append([]byte(`{"type":"inject","wake":false,"text":"`), bytes.Repeat([]byte("x"), protocol.MaxFrameBytes)...)
	tests := []struct {
		name, token, key string
		body             []byte
		status           int
		code, msgPart    string
	}{
		{"inject", tok, "", []byte(`{"type":"inject","text":"hi","wake":false}`), 202, "", ""},
		{"inject with a key", tok, "key-1", []byte(`{"type":"inject","text":"hi","wake":false}`), 202, "", ""},
		{"the same key again", tok, "key-1", []byte(`{"type":"inject","text":"hi","wake":false}`), 202, "", ""},
		{"no token", "", "", []byte(`{"type":"inject","text":"hi","wake":false}`), 401, "unauthorized", "token"},
		{"a wrong token", "tt_nope", "", []byte(`{"type":"cancel"}`), 401, "unauthorized", "token"},
		{"not JSON", tok, "", []byte(`{"type":`), 400, "bad_frame", "JSON"},
		{"subscribe", tok, "", []byte(`{"type":"subscribe","from_seq":0}`), 400, "bad_frame", "subscribe"},
		{"a missing field", tok, "", []byte(`{"type":"inject","text":"hi"}`), 400, "bad_frame", `"wake"`},
		{"an empty client_id", tok, "", []byte(`{"type":"cancel","client_id":""}`), 400, "bad_frame", "client_id"},
		{"a key over 128 characters", tok, strings.Repeat("k", 129), []byte(`{"type":"cancel"}`), 400, "bad_frame", protocol.IdempotencyKeyHeader},
		{"a key unlike the body's client_id", tok, "a", []byte(`{"type":"cancel","client_id":"b"}`), 400, "bad_frame", protocol.IdempotencyKeyHeader},
		// Refused before it is decoded: the message is the bound's, not the JSON's (the
		// body is not valid JSON: its string never ends).
		{"a body over the frame bound", tok, "", big, 400, "bad_frame", "at most 1048576"},
		{"a bad model spec", tok, "", []byte(`{"type":"set_model","role":"main","spec":"nope/x"}`), 400, "bad_frame", "set_model"},
		{"cancel with no turn", tok, "", []byte(`{"type":"cancel"}`), 409, "not_running", "no turn"},
		{"approve without approvals", tok, "", []byte(`{"type":"approve","call_id":"c1"}`), 501, "unsupported", "approvals"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, answer := e.postFrame(t, "h1", tt.token, tt.key, tt.body)
			if status != tt.status {
				t.Fatalf("status %d (%s), want %d", status, answer, tt.status)
			}
			if tt.code == "" {
				if strings.TrimSpace(answer) != `{"accepted":true}` {
					t.Fatalf("body %s, want {\"accepted\":true}", answer)
				}
				return
			}
			var f map[string]string
			if err := json.Unmarshal([]byte(answer), &f); err != nil || len(f) != 3 || f["type"] != "error" || f["code"] != tt.code || !strings.Contains(f["message"], tt.msgPart) {
				t.Fatalf("body %s, want exactly an error frame with code %s and a message naming %q", answer, tt.code, tt.msgPart)
			}
		})
	}
}
