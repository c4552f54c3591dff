package devstack_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	tclient "github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/devstack"
)

// TestKeepaliveAndIdleClose runs the whole stack with a short idle timeout, with and
// without CloudFront's rule (nothing sent to the client for as long closes it too):
// each keepalive frame is answered with {"type":"keepalive"} by the template's route
// response (no handler runs: the next other reply is the answer to the frame after
// them) and the keepalives keep the socket open past several idle periods; once they
// stop, the gateway closes it with 1001.
func TestKeepaliveAndIdleClose(t *testing.T) {
	t.Parallel()
	const idle = 4 * time.Second
	for _, tc := range []struct {
		name       string
		cloudFront time.Duration
	}{{"api gateway", 0}, {"behind cloudfront", idle}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := startStack(t, devstack.Options{IdleTimeout: idle, CloudFrontIdleTimeout: tc.cloudFront})
			c := e.dial(t, "k1", e.token(t, "k1"))
			c.hello("k1")
			tick := time.NewTicker(idle / 8)
			defer tick.Stop()
			const keepalives = 24 // three idle periods of keepalives only
			for range keepalives {
				c.send(`{"type":"keepalive"}`)
				<-tick.C
			}
			c.send(`{"type":"nope"}`)
			for i := range keepalives {
				if f := c.must(hang()); string(f.raw) != `{"type":"keepalive"}` {
					t.Fatalf("frame %d after hello: %s, want the keepalive's answer {\"type\":\"keepalive\"}", i, f.raw)
				}
			}
			if f := c.must(hang()); f.Type != "error" || f.Code != "bad_frame" {
				t.Fatalf("reply %s, want bad_frame", f.raw)
			}
			// Nothing but the answers came back: keepalives reach no handler.
			_, err := c.ws.Next(hang())
			if websocket.CloseStatus(err) != websocket.StatusGoingAway {
				t.Fatalf("after the keepalives stopped: %v, want close 1001", err)
			}
		})
	}
}

// TestKeepaliveWhileOnlyReceiving: the Go client tailing a busy agent — it receives
// events all along and sends nothing of its own after the subscribe — stays on its
// first connection through two idle periods of a gateway whose idle clock only the
// client's frames restart, because its keepalive counts only what it sends. Events
// are appended one at a time, each delivered before the next, every idle/8, so the
// socket is never quiet for the client; it gets every event once, in order, and never
// reconnects. (A client that counted received frames as activity would send no
// keepalive here and be closed with 1001 once per idle period.) The keepalive comes
// every idle/4: a stall of most of an idle period on a loaded machine still passes.
func TestKeepaliveWhileOnlyReceiving(t *testing.T) {
	t.Parallel()
	const idle = 8 * time.Second
	e := startStack(t, devstack.Options{IdleTimeout: idle})
	tok := e.token(t, "r1")
	got := make(chan int64, 64)
	var mu sync.Mutex
	var statuses []tclient.Status
	c, err := tclient.Dial(context.Background(), e.stack.WebSocketURL()+"/agents/r1/ws", tok, tclient.Options{
		KeepaliveInterval: idle / 4,
		OnEvent:           func(ev tclient.Event) error { got <- ev.Seq; return nil },
		OnStatus: func(s tclient.Status) {
			mu.Lock()
			statuses = append(statuses, s)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Subscribe(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	next := func(want int64) {
		t.Helper()
		select {
		case seq := <-got:
			if seq != want {
				t.Fatalf("event seq %d delivered, want %d", seq, want)
			}
		case <-time.After(hang()):
			t.Fatalf("no event %d", want)
		}
	}
	next(0) // session/created
	tick := time.NewTicker(idle / 8)
	defer tick.Stop()
	const n = 16 // two idle periods
	for i := range n {
		<-tick.C
		if _, err := e.log.Append(context.Background(), "r1", "test/event", map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
		next(int64(i + 1))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range statuses {
		if s.State == tclient.StateReconnecting || s.State == tclient.StateClosed || s.Attempt != 0 {
			t.Fatalf("status %s (attempt %d, err %v) while only receiving: the idle close reached the client", s.State, s.Attempt, s.Err)
		}
	}
	if err := c.Err(); err != nil {
		t.Fatalf("client stopped: %v", err)
	}
}
