package localgw

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/coder/websocket"
)

// API Gateway's connection limits
// (https://docs.aws.amazon.com/apigateway/latest/developerguide/apigateway-execution-service-websocket-limits-table.html):
// an idle connection is closed after 10 minutes, and every connection after 2 hours.
// The page does not say whether the server's messages count as activity, so the gateway
// takes the strict reading: only the client's frames do. A client that stays open here
// therefore stays open on AWS under either reading (docs/protocol.md, "Idle connections
// and the 2-hour limit"). Start applies them to zero Config fields.
const (
	DefaultIdleTimeout           = 10 * time.Minute
	DefaultMaxConnectionDuration = 2 * time.Hour
)

// The close both limits send: 1001 (going away), the status API Gateway's own closes
// carry.
const (
	limitCloseCode   = websocket.StatusGoingAway
	limitCloseReason = "Going away"
)

// active records a client frame: the idle clock restarts. Pings, pongs and the
// gateway's own writes do not count (a client must send something).
func (c *connection) active(now time.Time) {
	c.activeMu.Lock()
	c.lastFrameAt = now
	c.activeMu.Unlock()
}

func (c *connection) lastFrame() time.Time {
	c.activeMu.Lock()
	defer c.activeMu.Unlock()
	return c.lastFrameAt
}

// limitLoop closes c with 1001 once it has been idle (no client frame) for IdleTimeout,
// or open for MaxConnectionDuration, whichever comes first; it returns when done is
// closed. One timer per connection: it is re-armed for the rest of the idle period
// whenever it finds a newer frame, so traffic costs nothing here.
func (g *Gateway) limitLoop(c *connection, done <-chan struct{}) {
	deadline := c.connectedAt.Add(g.cfg.MaxConnectionDuration)
	next := func() time.Duration {
		return time.Until(minTime(c.lastFrame().Add(g.cfg.IdleTimeout), deadline))
	}
	t := time.NewTimer(next())
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		now := time.Now()
		idle := !now.Before(c.lastFrame().Add(g.cfg.IdleTimeout))
		if idle || !now.Before(deadline) {
			what := "max connection duration"
			if idle {
				what = "idle timeout"
			}
			g.log.Info("closing connection: "+what, "connection_id", c.id)
			c.closeWith(limitCloseCode, limitCloseReason)
			return
		}
		t.Reset(next())
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// mockRoute reports whether a client frame selects one of Config.MockRoutes, as API
// Gateway's route selection expression $request.body.type does: a text frame holding a
// JSON object whose "type" is that string (compared exactly, after unescaping). Such a
// frame invokes nothing and is answered with nothing, as a MOCK integration without a
// route response; it only counts as activity. Frames that cannot name a mock route (no
// route configured, or its name is not in the bytes) cost one bytes.Contains.
func (g *Gateway) mockRoute(typ websocket.MessageType, data []byte) bool {
	if typ != websocket.MessageText || len(g.cfg.MockRoutes) == 0 {
		return false
	}
	maybe := false
	for _, r := range g.cfg.MockRoutes {
		if bytes.Contains(data, []byte(r)) {
			maybe = true
			break
		}
	}
	if !maybe {
		return false
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(data, &fields) != nil {
		return false
	}
	var key string
	if json.Unmarshal(fields["type"], &key) != nil {
		return false
	}
	for _, r := range g.cfg.MockRoutes {
		if key == r {
			return true
		}
	}
	return false
}
