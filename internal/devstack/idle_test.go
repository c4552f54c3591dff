package devstack_test

import (
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/devstack"
)

// TestKeepaliveAndIdleClose runs the whole stack with a short idle timeout: keepalive
// frames get no reply (the next reply is the answer to the frame after them) and keep
// the socket open past several idle periods; once they stop, the gateway closes it with
// 1001.
func TestKeepaliveAndIdleClose(t *testing.T) {
	t.Parallel()
	const idle = 4 * time.Second
	e := startStack(t, devstack.Options{IdleTimeout: idle})
	c := e.dial(t, "k1", e.token(t, "k1"))
	c.hello("k1")
	tick := time.NewTicker(idle / 8)
	defer tick.Stop()
	for range 24 { // three idle periods of keepalives only
		c.send(`{"type":"keepalive"}`)
		<-tick.C
	}
	c.send(`{"type":"nope"}`)
	if f := c.expectError("bad_frame"); f.Code != "bad_frame" {
		t.Fatalf("reply %s", f.raw)
	}
	// Nothing but the bad_frame answer came back: keepalives reach no handler.
	_, err := c.ws.Next(hang())
	if websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("after the keepalives stopped: %v, want close 1001", err)
	}
}
