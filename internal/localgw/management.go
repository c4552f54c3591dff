package localgw

import (
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// isoMillis is the timestamp shape API Gateway returns and the SDK's
// __timestampIso8601 deserializer parses.
const isoMillis = "2006-01-02T15:04:05.000Z07:00"

// lookup returns the open connection with this id, or nil.
func (g *Gateway) lookup(id string) *connection {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.conns[id]
}

// serveManagement is the @connections API:
//   - POST queues the body as one text frame in the connection's outbox and answers
//     once it is written to the socket (the flow control senders rely on) or after
//     WriteTimeout, the frame still queued (a slow reader); over MaxPostBytes it
//     answers 413 PayloadTooLargeException;
//   - GET answers {"connectedAt","identity":{"sourceIp","userAgent"},"lastActiveAt"};
//   - DELETE closes the socket with 1000 after every frame already posted, then
//     $disconnect runs; it answers 204.
//
// An unknown or closed connection answers 410 GoneException.
func (g *Gateway) serveManagement(w http.ResponseWriter, r *http.Request, id string) {
	switch r.Method {
	case http.MethodPost:
		g.postToConnection(w, r, id)
	case http.MethodGet:
		c := g.lookup(id)
		if c == nil || !c.await(g.cfg.WriteTimeout) {
			writeGone(w, id)
			return
		}
		resp := map[string]any{
			"connectedAt":  c.connectedAt.UTC().Format(isoMillis),
			"lastActiveAt": c.lastActive().UTC().Format(isoMillis),
			"identity": map[string]string{
				"sourceIp":  c.sourceIP,
				"userAgent": c.userAgent,
			},
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	case http.MethodDelete:
		c := g.lookup(id)
		if c == nil || !c.await(g.cfg.WriteTimeout) {
			writeGone(w, id)
			return
		}
		// The close goes behind every frame already posted (the outbox), so a frame
		// posted just before it — lagged, superseded — still reaches a slow reader.
		if err := c.enqueue(outFrame{close: true, done: make(chan error, 1)}); err != nil {
			writeGone(w, id)
			return
		}
		g.log.Info("delete connection", "connection_id", id)
		w.WriteHeader(http.StatusNoContent)
	default:
		writeJSONError(w, http.StatusMethodNotAllowed, "MethodNotAllowedException", "method not allowed")
	}
}

func (g *Gateway) postToConnection(w http.ResponseWriter, r *http.Request, id string) {
	data, err := io.ReadAll(io.LimitReader(r.Body, MaxPostBytes+1))
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "BadRequestException", "reading body: "+err.Error())
		return
	}
	if len(data) > MaxPostBytes {
		drain(r.Body, 16<<20)
		writeJSONError(w, http.StatusRequestEntityTooLarge, "PayloadTooLargeException", "Message too long")
		return
	}
	c := g.lookup(id)
	if c == nil {
		writeGone(w, id)
		return
	}
	start := time.Now()
	if !c.await(g.cfg.WriteTimeout) {
		writeGone(w, id)
		return
	}
	// The frame joins the connection's outbox. The post is answered once it is written
	// or, for a slow reader, after WriteTimeout with the frame still queued: a sender
	// is never held longer, and a reader that stalls is not dropped before the
	// protocol's own outbound-queue bound (lagged) can reach it.
	f := outFrame{p: data, done: make(chan error, 1)}
	err = c.enqueue(f)
	if err == nil {
		t := time.NewTimer(g.cfg.WriteTimeout)
		select {
		case err = <-f.done:
		case <-t.C:
			// The hook tests wait for: the client is not reading, and this frame waits.
			g.log.Info("post queued: the client is not reading", "connection_id", id, "bytes", len(data), "queued_bytes", c.queued())
		}
		t.Stop()
	}
	if err != nil {
		g.log.Info("post failed", "connection_id", id, "bytes", len(data), "error", err.Error())
		writeGone(w, id)
		return
	}
	g.log.Debug("posted", "connection_id", id, "bytes", len(data), "duration_ms", time.Since(start).Milliseconds())
	w.WriteHeader(http.StatusOK)
}

func writeGone(w http.ResponseWriter, id string) {
	writeJSONError(w, http.StatusGone, "GoneException", "connection "+id+" is gone")
}
