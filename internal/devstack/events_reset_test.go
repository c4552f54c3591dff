package devstack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/devstack"
)

// sseRecord is one Server-Sent Events record (comment lines are left out).
type sseRecord struct{ event, id, data string }

// sseRecords reads the records of a stream on their own goroutine; the channel closes
// at the stream's end.
func sseRecords(body io.Reader) <-chan sseRecord {
	out := make(chan sseRecord, 256)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var rec sseRecord
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ":")
			v = strings.TrimPrefix(v, " ")
			switch k {
			case "":
				if rec != (sseRecord{}) {
					out <- rec
				}
				rec = sseRecord{}
			case "event":
				rec.event = v
			case "id":
				rec.id = v
			case "data":
				rec.data = v
			}
		}
	}()
	return out
}

// nextSSE is the next record with data, bounded by hang(); ok false: the stream ended.
func nextSSE(t *testing.T, recs <-chan sseRecord, what string) (sseRecord, bool) {
	t.Helper()
	for {
		select {
		case rec, ok := <-recs:
			if !ok {
				return rec, false
			}
			if rec.data != "" {
				return rec, true
			}
		case <-time.After(hang()):
			t.Fatalf("no %s on the stream within %s", what, hang())
		}
	}
}

// sseHello opens a1's stream with token and reads its hello.
func (e env) sseHello(t *testing.T, ctx context.Context, token, query, lastID string) (<-chan sseRecord, struct{ Epoch, Role string }) {
	t.Helper()
	u := "from_seq=0"
	if query != "" {
		u = query
	}
	resp := e.eventsGetWith(t, ctx, "a1", token, u, "text/event-stream", lastID)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("stream: status %d, body %s", resp.StatusCode, b)
	}
	t.Cleanup(func() { resp.Body.Close() })
	recs := sseRecords(resp.Body)
	rec, ok := nextSSE(t, recs, "hello")
	var h struct{ Type, Epoch, Role string }
	if !ok || rec.event != "hello" || json.Unmarshal([]byte(rec.data), &h) != nil || h.Type != "hello" || h.Epoch == "" {
		t.Fatalf("first record %+v, want event hello with the hello frame", rec)
	}
	return recs, struct{ Epoch, Role string }{h.Epoch, h.Role}
}

// eventsGetWith is eventsGet with a Last-Event-ID header when lastID is set.
func (e env) eventsGetWith(t *testing.T, ctx context.Context, agent, token, query, accept, lastID string) *http.Response {
	t.Helper()
	u := strings.Replace(e.stack.WebSocketURL(), "ws://", "http://", 1) + "/agents/" + agent + "/events?" + query
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", accept)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	return resp
}

// TestEventsStreamObserverReset: over the stack's gateway (the http function's
// bootstrap under --lambda-emulator for the JSON paths; streams are served in
// process there, as the emulator cannot stream), an observer token's stream says
// hello with role observer, and a session reset while it is open ends it with the
// socket's error{internal} and the reset's message; the reconnect, with Last-Event-ID
// as EventSource sends it, gets a hello with the reset's new epoch.
func TestEventsStreamObserverReset(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	e.token(t, "a1")
	obs := e.observerToken(t, "a1")
	if _, err := e.log.Create(context.Background(), "a1"); err != nil {
		t.Fatal(err)
	}
	appendN(t, e.log, "a1", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*hang())
	defer cancel()

	recs, h := e.sseHello(t, ctx, obs, "", "")
	if h.Role != "observer" {
		t.Fatalf("an observer token's stream says hello with role %q, want observer", h.Role)
	}
	for want := 0; want <= 3; want++ {
		rec, ok := nextSSE(t, recs, "the replay")
		if !ok || rec.event != "" || rec.id != strconv.Itoa(want) {
			t.Fatalf("record %+v (stream open %v), want the event of seq %d", rec, ok, want)
		}
	}

	epoch, err := e.sessionOps().Reset(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := nextSSE(t, recs, "the reset's error record")
	var f struct{ Type, Code, Message string }
	if !ok || rec.event != "error" || json.Unmarshal([]byte(rec.data), &f) != nil ||
		f.Type != "error" || f.Code != "internal" || f.Message != delivery.ResetMessage {
		t.Fatalf("after the reset: record %+v (stream open %v), want event error with error{internal, %q}", rec, ok, delivery.ResetMessage)
	}
	if rec, ok := nextSSE(t, recs, "the stream's end"); ok {
		t.Fatalf("record %+v after the reset's error, want the stream's end", rec)
	}

	_, h2 := e.sseHello(t, ctx, obs, "", "3")
	if h2.Epoch != epoch || h2.Epoch == h.Epoch || h2.Role != "observer" {
		t.Fatalf("hello after the reset: epoch %q role %q; want the reset's epoch %q (not %q), observer", h2.Epoch, h2.Role, epoch, h.Epoch)
	}
}
