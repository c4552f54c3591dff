package devstack_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/gatewaytest"
)

// These tests pin what docs/protocol.md tells client authors beyond the spec: the close
// code after a closing error, which token wins when a request carries two, and how a
// cancel reason is cut.

// open dials agent's socket with token in the Authorization header ("" for none) and
// the subprotocols offered.
func open(t *testing.T, e env, agent, token string, subprotocols ...string) *gatewaytest.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang())
	defer cancel()
	c, _, err := gatewaytest.Open(ctx, e.stack.WebSocketURL()+"/agents/"+agent+"/ws", token,
		&websocket.DialOptions{Subprotocols: subprotocols}, 1000)
	if err != nil {
		t.Fatalf("dial %s: %v", agent, err)
	}
	t.Cleanup(func() { c.Conn.CloseNow() })
	return c
}

// until reads frames until one containing want, and returns it.
func until(t *testing.T, c *gatewaytest.Client, want string) []byte {
	t.Helper()
	for {
		b, err := c.Next(hang())
		if err != nil {
			t.Fatalf("waiting for a frame with %s: %v", want, err)
		}
		if strings.Contains(string(b), want) {
			return b
		}
	}
}

// closedNormally asserts the socket's next event is a close with code 1000.
func closedNormally(t *testing.T, c *gatewaytest.Client) {
	t.Helper()
	b, err := c.Next(hang())
	if err == nil {
		t.Fatalf("frame %s, want the close", b)
	}
	if got := websocket.CloseStatus(err); got != websocket.StatusNormalClosure {
		t.Fatalf("closed with %v (status %d), want 1000", err, got)
	}
}

// TestCloseCodeAfterError: unauthorized and superseded are followed by a close with
// 1000, the only code the @connections DELETE closes with.
func TestCloseCodeAfterError(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")

	bad := open(t, e, "a1", "tt_garbage")
	until(t, bad, `"code":"unauthorized"`)
	closedNormally(t, bad)

	first := open(t, e, "a1", tok)
	until(t, first, `"type":"hello"`)
	second := open(t, e, "a1", tok)
	until(t, second, `"type":"hello"`)
	until(t, first, `"code":"superseded"`)
	closedNormally(t, first)
}

// TestHeaderTokenWins: with a token in both the Authorization header and the
// subprotocol, the header's is the one checked.
func TestHeaderTokenWins(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	for _, tc := range []struct {
		name, header, sub, want string
	}{
		{"bad header, good subprotocol", "tt_garbage", tok, `"code":"unauthorized"`},
		{"good header, bad subprotocol", tok, "tt_garbage", `"type":"hello"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := open(t, e, "a1", tc.header, "terret.v1", "terret.bearer."+tc.sub)
			b, err := c.Next(hang())
			if err != nil || !strings.Contains(string(b), tc.want) {
				t.Fatalf("first frame %s (%v), want %s", b, err, tc.want)
			}
		})
	}
}

// TestCancelReasonCut: a cancel reason is cut to 4 KiB of its JSON encoding: 3,000
// newlines (2 bytes each encoded) keep 2,047, which with the quotes make 4,096 bytes.
func TestCancelReasonCut(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{Approvals: true})
	c := open(t, e, "a1", e.token(t, "a1"))
	until(t, c, `"type":"hello"`)
	send := func(v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		ctx, cancel := context.WithTimeout(context.Background(), hang())
		defer cancel()
		if err := c.Conn.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	send(map[string]any{"type": "subscribe", "from_seq": 0})
	send(map[string]any{"type": "inject", "wake": true, "text": `{"script":[{"call":[{"tool":"guarded_echo","args":{"text":"x"}}]}]}`})
	until(t, c, `"type":"approval/requested"`) // parked: the turn runs until cancelled
	send(map[string]any{"type": "cancel", "reason": strings.Repeat("\n", 3000)})
	var end struct {
		Payload struct {
			Status, Reason string
		}
	}
	if err := json.Unmarshal(until(t, c, `"type":"turn/end"`), &end); err != nil {
		t.Fatal(err)
	}
	if end.Payload.Status != "cancelled" || end.Payload.Reason != strings.Repeat("\n", 2047) {
		t.Fatalf("turn/end status %q, reason of %d bytes (%q…), want cancelled with 2047 newlines",
			end.Payload.Status, len(end.Payload.Reason), end.Payload.Reason[:min(len(end.Payload.Reason), 20)])
	}
}
