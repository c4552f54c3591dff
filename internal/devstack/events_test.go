package devstack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/devstack"
)

// eventsGet sends GET /agents/{agent}/events?query to the stack's gateway.
func (e env) eventsGet(t *testing.T, ctx context.Context, agent, token, query, accept string) *http.Response {
	t.Helper()
	return e.eventsGetWith(t, ctx, agent, token, query, accept, "")
}

// TestEventsPageEqualsReplay: a JSON page of the log over HTTP is byte for byte what a
// subscribe from the same seq replays: the same replay_truncated (the replay limit
// moved the start) and the same envelopes.
func TestEventsPageEqualsReplay(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{ReplayLimit: 5})
	tok := e.token(t, "a1")
	c := e.dial(t, "a1", tok)
	c.hello("a1")
	appendN(t, e.log, "a1", 9) // tip 9; the replay limit keeps 5..9
	c.send(`{"type":"subscribe","from_seq":2}`)
	f := c.must(hang())
	if f.Type != "replay_truncated" {
		t.Fatalf("first frame %s, want replay_truncated", f)
	}
	frames := c.events(5, 9)

	ctx, cancel := context.WithTimeout(context.Background(), hang())
	defer cancel()
	resp := e.eventsGet(t, ctx, "a1", tok, "from_seq=2", "application/json")
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var p struct {
		Epoch           string            `json:"epoch"`
		Events          []json.RawMessage `json:"events"`
		NextSeq         int64             `json:"next_seq"`
		LastSeq         int64             `json:"last_seq"`
		ReplayTruncated json.RawMessage   `json:"replay_truncated"`
	}
	if err := json.Unmarshal(b, &p); err != nil || resp.StatusCode != 200 {
		t.Fatalf("page: status %d, body %s (%v)", resp.StatusCode, b, err)
	}
	if string(p.ReplayTruncated) != string(f.raw) {
		t.Errorf("page replay_truncated %s, subscribe sent %s", p.ReplayTruncated, f.raw)
	}
	if len(p.Events) != len(frames) {
		t.Fatalf("page has %d events, the replay %d", len(p.Events), len(frames))
	}
	for i := range frames {
		if string(p.Events[i]) != string(frames[i].raw) {
			t.Errorf("page event %d\n %s\nthe replay's\n %s", i, p.Events[i], frames[i].raw)
		}
	}
	if p.NextSeq != 10 || p.LastSeq != 9 || p.Epoch == "" {
		t.Errorf("page next_seq %d last_seq %d epoch %q; want 10, 9 and the epoch", p.NextSeq, p.LastSeq, p.Epoch)
	}
}

// TestEventsOverGateway: terret dev serves the events path on the socket's host: a
// long-poll answers with the next event (the log stream poller rings it awake), and a
// Server-Sent Events stream carries hello, the replay and the live tail through the
// gateway unbuffered.
func TestEventsOverGateway(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	if _, err := e.log.Create(context.Background(), "a1"); err != nil {
		t.Fatal(err)
	}
	appendN(t, e.log, "a1", 2)

	ctx, cancel := context.WithTimeout(context.Background(), hang())
	defer cancel()
	resp := e.eventsGet(t, ctx, "a1", tok, "from_seq=1", "text/event-stream")
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "id: ") || strings.HasPrefix(l, "event: ") {
				lines <- l
			}
		}
	}()
	want := []string{"event: hello", "id: 1", "id: 2", "id: 3"}
	for i, w := range want {
		if i == 3 {
			appendN(t, e.log, "a1", 1) // the live tail
		}
		select {
		case l := <-lines:
			if l != w {
				t.Fatalf("stream line %q, want %q", l, w)
			}
		case <-time.After(hang()):
			t.Fatalf("no %q on the stream", w)
		}
	}

	answer := make(chan []byte, 1)
	go func() {
		r := e.eventsGet(t, ctx, "a1", tok, "from_seq=4&wait=20", "application/json")
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		answer <- b
	}()
	appendN(t, e.log, "a1", 1)
	select {
	case b := <-answer:
		var p struct {
			Events []struct{ Seq int64 } `json:"events"`
		}
		if err := json.Unmarshal(b, &p); err != nil || len(p.Events) != 1 || p.Events[0].Seq != 4 {
			t.Fatalf("long-poll answered %s, want seq 4", b)
		}
	case <-time.After(hang()):
		t.Fatal("the long-poll did not answer after seq 4 was appended")
	}
	// Under --lambda-emulator the JSON paths ran in the http function's bootstrap.
	if emu := e.stack.Emulator(); emu != nil {
		if n := emu.Stats()["http"].Invocations; n < 1 {
			t.Errorf("the http function was invoked %d times under the emulator, want the long-poll's", n)
		}
	}
}
