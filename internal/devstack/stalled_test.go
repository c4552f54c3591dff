package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/devstack"
)

// TestStalledReaderGetsLagged (protocol edge: a stalled reader gets lagged): a client
// with a 4 KB receive buffer subscribes to the live tail and stops reading. Events
// keep coming; the gateway's posts stall on the socket. The client is dropped by the
// outbound-queue bound — lagged, then a normal close — not by the gateway's write
// timeout (a 1006 close with no lagged). Once it reads again it gets every event that
// was posted, in order, then lagged, then the close.
//
// Driven by what the stack logs: the stall is the gateway's "post queued" (a post that
// outlasted its write timeout), the drop its "delete connection" (or, the bug, the
// socket going down first).
func TestStalledReaderGetsLagged(t *testing.T) {
	t.Parallel()
	const queue = 4 // OutboundQueue: live events a client may fall behind
	watch := newLogWatch()
	// The gateway's sockets get a 4 KB send buffer too, so that a few events stall the
	// client rather than the megabytes a loopback send buffer grows to.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := startStack(t, devstack.Options{OutboundQueue: queue, Logger: slog.New(watch.Handler()),
		Listener: smallSendBuffer{ln}})
	const agent = "a1"
	tok := e.token(t, agent)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, e.stack.WebSocketURL()+"/agents/"+agent+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}},
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: slowDial}},
	})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	readFrame := func() (frame, error) {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return frame{}, err
		}
		var f frame
		if err := json.Unmarshal(b, &f); err != nil {
			return frame{}, fmt.Errorf("frame %.100q is not JSON: %w", b, err)
		}
		return f, nil
	}
	send := func(v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	if f, err := readFrame(); err != nil || f.Type != "hello" {
		t.Fatalf("first frame %+v (%v), want hello", f, err)
	}
	// The live tail: subscribe past the last seq, then a set_policy whose event shows
	// the subscription is in force.
	send(map[string]any{"type": "subscribe", "from_seq": 1, "order": 1})
	send(map[string]any{"type": "set_policy", "patterns": []string{"p"}, "order": 2})
	if f, err := readFrame(); err != nil || f.Type != "policy/updated" {
		t.Fatalf("after subscribe: %+v (%v), want policy/updated", f, err)
	}
	conn := watch.conn(ctx, t, agent)

	// The client reads nothing from here on. Events of 100 KB, never more than half the
	// bound ahead of the gateway's answers (so the client never lags while it still
	// takes frames), until a post finds the socket stalled.
	answered := func() int {
		return watch.count(conn, "posted", "post queued: the client is not reading", "post failed")
	}
	stalled := func() bool {
		return watch.count(conn, "post queued: the client is not reading", "post failed", "disconnected") > 0
	}
	base := answered()
	pad := strings.Repeat("x", 100_000)
	appended := 0
	for {
		watch.wait(ctx, t, fmt.Sprintf("the posts of the first %d events", appended-queue/2), func() bool {
			return appended-(answered()-base) < queue/2 || stalled()
		})
		if stalled() {
			break
		}
		if appended == 200 {
			t.Fatal("200 events of 100 KB posted and the socket never stalled: the test did not stall the reader")
		}
		if _, err := e.log.Append(ctx, agent, "test/event", map[string]string{"pad": pad}); err != nil {
			t.Fatal(err)
		}
		appended++
	}
	// More than the bound behind the client: the next read of the log, or the check
	// after a slow post, finds the client lagging.
	for range queue + 2 {
		if _, err := e.log.Append(ctx, agent, "test/event", map[string]string{"pad": pad}); err != nil {
			t.Fatal(err)
		}
		appended++
	}
	watch.wait(ctx, t, "the connection dropped", func() bool {
		return watch.count(conn, "delete connection", "disconnected") > 0
	})

	// Reading again: events in seq order, then lagged, then the close.
	var seqs []int64
	for {
		f, err := readFrame()
		if err != nil {
			t.Fatalf("after %d events (seqs %v): read ended with %v (close status %d), want a lagged error frame first",
				len(seqs), seqs, err, websocket.CloseStatus(err))
		}
		if f.Type == "error" {
			if f.Code != "lagged" {
				t.Fatalf("error frame %+v after %d events, want lagged", f, len(seqs))
			}
			break
		}
		if f.Seq == nil {
			t.Fatalf("frame %+v, want an event", f)
		}
		if n := len(seqs); (n == 0 && *f.Seq != 2) || (n > 0 && *f.Seq != seqs[n-1]+1) {
			t.Fatalf("seq %d after %v, want the next in order", *f.Seq, seqs)
		}
		seqs = append(seqs, *f.Seq)
	}
	if _, err := readFrame(); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after lagged: %v (close status %d), want a normal close", err, websocket.CloseStatus(err))
	}
	t.Logf("%d events of 100 KB appended; %d received before lagged", appended, len(seqs))
}

// smallSendBuffer is a listener whose connections have a 4 KB send buffer.
type smallSendBuffer struct{ net.Listener }

func (l smallSendBuffer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// logWatch is a slog.Handler that keeps, per connection, the messages the stack
// logged about it, and the connection each agent was last connected on; tests wait
// on them as conditions.
type logWatch struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every record kept
	msgs    map[string][]string
	agents  map[string]string // agent → connection id
}

func newLogWatch() *logWatch {
	return &logWatch{changed: make(chan struct{}), msgs: map[string][]string{}, agents: map[string]string{}}
}

func (w *logWatch) Handler() slog.Handler { return logHook{on: w.observe} }

// count is how many of the messages were logged about conn.
func (w *logWatch) count(conn string, msgs ...string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.msgs[conn] {
		if slices.Contains(msgs, m) {
			n++
		}
	}
	return n
}

// wait returns once cond holds, re-checking it after every record; it fails the test
// if ctx ends first.
func (w *logWatch) wait(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for {
		w.mu.Lock()
		ch := w.changed
		w.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// conn waits for the connection id agent is connected on.
func (w *logWatch) conn(ctx context.Context, t *testing.T, agent string) string {
	t.Helper()
	var id string
	w.wait(ctx, t, "the connection of "+agent, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		id = w.agents[agent]
		return id != ""
	})
	return id
}

// observe records each message logged about a connection, and the connection each
// agent's latest "connected" names.
func (w *logWatch) observe(msg string, vals map[string]slog.Value) {
	var conn, agent string
	if v, ok := vals["connection_id"]; ok {
		conn = v.String()
	}
	if v, ok := vals["agent_id"]; ok {
		agent = v.String()
	}
	if conn == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs[conn] = append(w.msgs[conn], msg)
	if msg == "connected" && agent != "" {
		w.agents[agent] = conn
	}
	close(w.changed)
	w.changed = make(chan struct{})
}
