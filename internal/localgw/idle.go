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

// CloudFront's own idle rule for WebSocket connections it carries: it closes one after
// 10 minutes in which no byte went from the origin to the client, whatever the client
// sent ("Quotas on WebSocket connections",
// https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/cloudfront-limits.html).
// Config.CloudFrontIdleTimeout models it (terret dev --cloudfront-idle). CloudFront does
// not document the status its close carries; the gateway sends 1001 with the reason
// CloudFrontIdleReason, so that a test can tell it from API Gateway's closes.
const (
	DefaultCloudFrontIdleTimeout = 10 * time.Minute
	CloudFrontIdleReason         = "CloudFront idle timeout"
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

// sent records a frame written to the client (a post, a MOCK route's answer): bytes
// from the origin for CloudFront's idle rule. Pings and closes do not count: API
// Gateway sends no pings (the gateway's are local only), so none reach CloudFront.
func (c *connection) sent(now time.Time) {
	c.activeMu.Lock()
	c.lastSentAt = now
	c.activeMu.Unlock()
}

func (c *connection) lastSent() time.Time {
	c.activeMu.Lock()
	defer c.activeMu.Unlock()
	return c.lastSentAt
}

// limitLoop closes c with 1001 once it has been idle (no client frame) for IdleTimeout,
// or open for MaxConnectionDuration, or — with CloudFrontIdleTimeout set — without a
// frame written to the client for that long, whichever comes first; it returns when
// done is closed. One timer per connection: it is re-armed for the rest of the period
// whenever it finds a newer frame, so traffic costs nothing here.
func (g *Gateway) limitLoop(c *connection, done <-chan struct{}) {
	deadline := c.connectedAt.Add(g.cfg.MaxConnectionDuration)
	cfIdle := g.cfg.CloudFrontIdleTimeout
	next := func() time.Duration {
		at := minTime(c.lastFrame().Add(g.cfg.IdleTimeout), deadline)
		if cfIdle > 0 {
			at = minTime(at, c.lastSent().Add(cfIdle))
		}
		return time.Until(at)
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
		quiet := cfIdle > 0 && !now.Before(c.lastSent().Add(cfIdle))
		switch {
		case quiet:
			g.log.Info("closing connection: CloudFront idle timeout (nothing sent to the client)", "connection_id", c.id)
			c.closeWith(limitCloseCode, CloudFrontIdleReason)
			return
		case idle || !now.Before(deadline):
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
// JSON object whose "type" is that string (compared exactly, after unescaping), and
// returns the frame that route's response sends back (Config.MockReplies; "" for none).
// Such a frame invokes nothing; it counts as activity. Frames that cannot name a mock
// route (no route configured, or its name is not in the bytes) cost one bytes.Contains.
func (g *Gateway) mockRoute(typ websocket.MessageType, data []byte) (reply string, ok bool) {
	if typ != websocket.MessageText || len(g.cfg.MockRoutes) == 0 {
		return "", false
	}
	maybe := false
	for _, r := range g.cfg.MockRoutes {
		if bytes.Contains(data, []byte(r)) {
			maybe = true
			break
		}
	}
	if !maybe {
		return "", false
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(data, &fields) != nil {
		return "", false
	}
	var key string
	if json.Unmarshal(fields["type"], &key) != nil {
		return "", false
	}
	for _, r := range g.cfg.MockRoutes {
		if key == r {
			return g.cfg.MockReplies[r], true
		}
	}
	return "", false
}
