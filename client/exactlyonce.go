package client

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/terret/terret-ws/internal/protocol"
)

// Exactly-once control frames (docs/protocol.md, "Exactly-once frames"): the client
// names every control frame it sends with a new client_id, and keeps each inject until
// the log shows its event (user/message or context/injected carrying the client_id).
// After a reconnect it sends each inject still kept again, with the same client_id: the
// server applies a client_id once, so an inject that landed before the drop appends
// nothing, and one that was lost with the socket is applied now. The log is the
// acknowledgement.

// maxPending bounds the injects kept for a resend; past it the oldest is forgotten.
const maxPending = 256

// pendingWindow is how long an inject is kept: the server remembers a client_id for 24
// hours, after which a resend could apply twice.
const pendingWindow = 23 * time.Hour

// pendingInject is an inject sent whose event has not been seen.
type pendingInject struct {
	id   string
	f    protocol.Inject
	sent time.Time
}

// NewClientID returns a new random client_id ("c-" and 32 hex digits).
func NewClientID() string {
	b := make([]byte, 16)
	_, _ = crand.Read(b)
	return "c-" + hex.EncodeToString(b)
}

// withField adds the top-level field name with value v (JSON-encoded) to a JSON object.
func withField(obj []byte, name string, v any) []byte {
	if len(obj) < 2 || obj[len(obj)-1] != '}' {
		return obj
	}
	val, err := json.Marshal(v)
	if err != nil {
		return obj
	}
	out := append([]byte(nil), obj[:len(obj)-1]...)
	if len(obj) > 2 {
		out = append(out, ',')
	}
	return fmt.Appendf(out, "%q:%s}", name, val)
}

// keep records an inject about to be sent.
func (c *Client) keep(id string, f protocol.Inject) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for len(c.pending) > 0 && (len(c.pending) >= maxPending || now.Sub(c.pending[0].sent) > pendingWindow) {
		c.pending = c.pending[1:]
	}
	c.pending = append(c.pending, pendingInject{id: id, f: f, sent: now})
}

// acknowledged forgets the inject whose event ev is, if ev is one.
func (c *Client) acknowledged(ev Event) {
	if ev.Type != "user/message" && ev.Type != "context/injected" {
		return
	}
	var p struct {
		ClientID string `json:"client_id"`
	}
	if json.Unmarshal(ev.Payload, &p) != nil || p.ClientID == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, pi := range c.pending {
		if pi.id == p.ClientID {
			c.pending = append(c.pending[:i:i], c.pending[i+1:]...)
			return
		}
	}
}

// Pending returns the client_ids of the injects sent whose event the client has not
// received yet, oldest first: each is sent again after a reconnect.
func (c *Client) Pending() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, len(c.pending))
	for i, pi := range c.pending {
		ids[i] = pi.id
	}
	return ids
}

// resend sends the injects still kept on a new connection, with their client_ids. A
// failed write ends the connection; the next reconnect sends them again.
func (c *Client) resend(cn *conn) {
	c.mu.Lock()
	pend := append([]pendingInject(nil), c.pending...)
	c.mu.Unlock()
	for _, pi := range pend {
		ctx, cancel := context.WithTimeout(c.life, c.opts.DialTimeout)
		err := cn.writeID(ctx, pi.f, pi.id)
		cancel()
		if err != nil {
			return
		}
	}
}
