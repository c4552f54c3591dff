package localgw

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/coder/websocket"
)

// connection is one WebSocket. It is registered once $connect accepted it, before
// the 101 response is written, so a client that sees its upgrade complete can be
// posted to at once; management calls that find it still upgrading wait for ready.
// Nothing can be posted while $connect runs, as on API Gateway.
type connection struct {
	g  *Gateway
	id string
	// ready is closed once the upgrade finished; ws is nil if it failed.
	ready       chan struct{}
	ws          *websocket.Conn
	connectedAt time.Time
	sourceIP    string
	userAgent   string
	host        string

	// writeMu serializes frame writes (the outbox's writer, the close frames of
	// limitWriter).
	writeMu sync.Mutex
	// closed is set under stateMu once the gateway decided to close the socket;
	// closeCode/closeReason are what it sent, for the $disconnect event. Not writeMu:
	// a ping that found the peer gone closes the socket while a write is stalled.
	stateMu     sync.Mutex
	closed      bool
	closeCode   websocket.StatusCode
	closeReason string

	// outbox holds the frames posted and not yet written, in post order (outBytes is
	// their size); one writer goroutine (running) drains it. deleting is set once
	// DeleteConnection queued the close, or once the outbox overflowed.
	outMu    sync.Mutex
	outbox   []outFrame
	outBytes int
	running  bool
	deleting bool

	activeMu     sync.Mutex
	lastActiveAt time.Time
	lastFrameAt  time.Time // the last client frame (idle.go)
	lastSentAt   time.Time // the last frame written to the client (idle.go, CloudFront)

	// lastEpoch is the requestTimeEpoch of the newest frame read, frames the number of
	// frames read (read loop only).
	lastEpoch int64
	frames    int64
}

// stamp is the receive time of a frame read now: milliseconds, never less than the
// previous frame's, as API Gateway stamps requestTimeEpoch. Taken in the read loop,
// before the frame is handed to its own goroutine, so it follows the read order.
func (c *connection) stamp(now time.Time) time.Time {
	if ms := now.UnixMilli(); ms > c.lastEpoch {
		c.lastEpoch = ms
	}
	return time.UnixMilli(c.lastEpoch)
}

func (c *connection) touch() {
	c.activeMu.Lock()
	c.lastActiveAt = time.Now()
	c.activeMu.Unlock()
}

func (c *connection) lastActive() time.Time {
	c.activeMu.Lock()
	defer c.activeMu.Unlock()
	return c.lastActiveAt
}

// errGone reports a write to a connection the gateway already closed.
var errGone = errors.New("localgw: connection is gone")

// await waits up to timeout for the upgrade to finish and reports whether the socket
// is usable.
func (c *connection) await(timeout time.Duration) bool {
	select {
	case <-c.ready:
		return c.ws != nil
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.ready:
		return c.ws != nil
	case <-t.C:
		return false
	}
}

// write sends one frame, serialized with every other write. A write that does not
// complete within timeout closes the socket (coder/websocket cannot resume a
// half-written frame), and the caller reports the connection gone.
func (c *connection) write(typ websocket.MessageType, p []byte, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if !c.await(timeout) {
		return errGone
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.isClosed() {
		return errGone
	}
	if err := c.ws.Write(ctx, typ, p); err != nil {
		c.markClosing(websocket.StatusAbnormalClosure, "write failed")
		return errors.Join(errGone, err)
	}
	c.touch()
	c.sent(time.Now())
	return nil
}

// outFrame is a posted frame (or, with close set, DeleteConnection's close) waiting in
// the outbox; done receives the result of its write.
type outFrame struct {
	p     []byte
	close bool
	done  chan error // buffered: the writer never waits for a reader
}

// errOverflow reports a post to an outbox already holding OutboxBytes.
var errOverflow = errors.New("localgw: outbox full")

// enqueue adds f to the outbox and makes sure a writer drains it. A frame posted after
// DeleteConnection, or beyond OutboxBytes, is refused (errGone); an overflow also
// closes the socket, as a peer that takes no frames is gone.
func (c *connection) enqueue(f outFrame) error {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.deleting {
		return errGone
	}
	if !f.close && c.outBytes+len(f.p) > c.g.cfg.OutboxBytes {
		c.deleting = true
		if c.markClosing(websocket.StatusAbnormalClosure, "outbox overflowed") {
			go func() { _ = c.ws.CloseNow() }() // a write stalled on the peer fails at once
		}
		return errors.Join(errGone, errOverflow)
	}
	if f.close {
		c.deleting = true
	}
	c.outbox = append(c.outbox, f)
	c.outBytes += len(f.p)
	if !c.running {
		c.running = true
		go c.drain()
	}
	return nil
}

// queued reports the bytes posted to c and not yet written.
func (c *connection) queued() int {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	return c.outBytes
}

// drain writes the outbox in order until it is empty. A frame that cannot be written
// within StallTimeout closes the socket (write); the frames behind it then fail.
func (c *connection) drain() {
	for {
		c.outMu.Lock()
		if len(c.outbox) == 0 {
			c.running = false
			c.outMu.Unlock()
			return
		}
		f := c.outbox[0]
		c.outbox[0] = outFrame{}
		c.outbox = c.outbox[1:]
		c.outMu.Unlock()
		var err error
		if f.close {
			if c.markClosing(websocket.StatusNormalClosure, "") {
				// The handshake may take up to 5s against a slow peer; the read loop
				// invokes $disconnect when the socket is down.
				go func() { _ = c.ws.Close(websocket.StatusNormalClosure, "") }()
			}
		} else {
			err = c.write(websocket.MessageText, f.p, c.g.cfg.StallTimeout)
		}
		// Counted until written, so that the bound holds for a frame being written.
		c.outMu.Lock()
		c.outBytes -= len(f.p)
		c.outMu.Unlock()
		f.done <- err
	}
}

func (c *connection) isClosed() bool {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.closed
}

// markClosing claims the close of the socket for the gateway; false when it was
// already claimed.
func (c *connection) markClosing(code websocket.StatusCode, reason string) bool {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.closed {
		return false
	}
	c.closed = true
	c.closeCode = code
	c.closeReason = reason
	return true
}

// closeWith closes the socket with a close handshake (bounded by coder/websocket to
// 5s). The read loop then ends and invokes $disconnect.
func (c *connection) closeWith(code websocket.StatusCode, reason string) {
	<-c.ready
	if c.ws == nil || !c.markClosing(code, reason) {
		return
	}
	_ = c.ws.Close(code, reason)
}

// serveWebSocket runs one client from handshake to $disconnect, on the HTTP
// server's goroutine for the request.
func (g *Gateway) serveWebSocket(w http.ResponseWriter, r *http.Request, agentID string) {
	if !isUpgrade(r) {
		// Checked before $connect so a plain GET never reaches the handler, which would
		// otherwise be told of a connection that can never be upgraded.
		w.Header().Set("Sec-WebSocket-Version", "13")
		writeJSONError(w, http.StatusUpgradeRequired, "BadRequestException", "WebSocket upgrade required")
		return
	}
	g.mu.Lock()
	closing := g.closing
	g.mu.Unlock()
	if closing || !g.work.add() {
		writeJSONError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "gateway closing")
		return
	}
	defer g.work.done()

	now := time.Now()
	c := &connection{
		g:            g,
		id:           newShortID(),
		ready:        make(chan struct{}),
		connectedAt:  now,
		lastActiveAt: now,
		lastFrameAt:  now,
		lastSentAt:   now,
		sourceIP:     remoteIP(r),
		userAgent:    r.UserAgent(),
		host:         r.Host,
	}
	log := g.log.With("connection_id", c.id)

	status, subprotocol := http.StatusOK, ""
	if h, ok := g.cfg.Routes[RouteConnect]; ok {
		ev := g.connectEvent(r, c, agentID, now)
		out, reqID, err := g.invoke(g.base, routeFunction(RouteConnect), h, g.timeout(RouteConnect), ev, nil)
		switch {
		case err != nil:
			status = http.StatusInternalServerError
			log.Warn("connect handler failed", "route", RouteConnect, "request_id", reqID, "error", err.Error())
		default:
			var resp events.APIGatewayProxyResponse
			if uerr := unmarshalOutput(out, &resp); uerr != nil {
				// API Gateway answers a malformed Lambda proxy response with 502.
				status = http.StatusBadGateway
				log.Warn("connect handler returned a malformed response", "route", RouteConnect, "request_id", reqID, "error", uerr.Error())
			} else if resp.StatusCode != 0 {
				// A handler returning nothing (null) accepts, as on API Gateway.
				status = resp.StatusCode
			}
			subprotocol = headerValue(resp, "Sec-WebSocket-Protocol")
		}
	}
	if status < 200 || status > 299 {
		log.Info("connect rejected", "route", RouteConnect, "status", status)
		writeJSONError(w, status, "ConnectRejected", http.StatusText(status))
		return
	}

	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		writeJSONError(w, http.StatusServiceUnavailable, "ServiceUnavailableException", "gateway closing")
		g.disconnect(c, websocket.StatusGoingAway, "gateway closing")
		return
	}
	g.conns[c.id] = c
	g.mu.Unlock()

	opts := &websocket.AcceptOptions{
		// API Gateway performs no Origin check; authorization is $connect's job.
		InsecureSkipVerify: true,
	}
	if subprotocol != "" {
		opts.Subprotocols = []string{subprotocol}
	}
	var aw http.ResponseWriter = w
	if g.cfg.Limits {
		aw = limitWriter{ResponseWriter: w, mu: &c.writeMu}
	}
	ws, err := websocket.Accept(aw, r, opts)
	if err != nil {
		close(c.ready)
		// $connect already accepted, so its counterpart must still run.
		log.Warn("upgrade failed", "error", err.Error())
		g.disconnect(c, websocket.StatusAbnormalClosure, "upgrade failed")
		return
	}
	ws.SetReadLimit(ReadLimit) // over it, the library closes with 1009
	c.ws = ws
	upgraded := time.Now()
	c.active(upgraded) // the idle clocks start with the connection, not before $connect ran
	c.sent(upgraded)
	close(c.ready)
	log.Info("connected", "status", status, "source_ip", c.sourceIP)

	pingDone := make(chan struct{})
	pingStopped := make(chan struct{}, 2)
	go func() {
		defer func() { pingStopped <- struct{}{} }()
		g.pingLoop(c, pingDone)
	}()
	go func() {
		defer func() { pingStopped <- struct{}{} }()
		g.limitLoop(c, pingDone)
	}()

	code, reason := g.readLoop(c)
	close(pingDone)
	<-pingStopped
	<-pingStopped
	g.disconnect(c, code, reason)
}

// readLoop dispatches frames to $default until the socket fails, and returns the
// close code and reason for the $disconnect event.
func (g *Gateway) readLoop(c *connection) (websocket.StatusCode, string) {
	for {
		typ, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.stateMu.Lock()
			byUs, code, reason := c.closed, c.closeCode, c.closeReason
			c.closed = true
			c.stateMu.Unlock()
			if byUs {
				return code, reason
			}
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code, ce.Reason
			}
			if errors.Is(err, websocket.ErrMessageTooBig) || errors.Is(err, errFrameTooBig) {
				return websocket.StatusMessageTooBig, "message too big"
			}
			return websocket.StatusAbnormalClosure, "connection lost"
		}
		now := time.Now()
		c.touch()
		c.active(now)
		if reply, ok := g.mockRoute(typ, data); ok {
			g.log.Debug("frame to a mock route", "connection_id", c.id)
			if reply != "" {
				// The route response: queued behind the frames already posted, as
				// API Gateway writes one frame at a time. A closing socket drops it.
				_ = c.enqueue(outFrame{p: []byte(reply), done: make(chan error, 1)})
			}
			continue
		}
		received := c.stamp(now)
		c.frames++
		g.log.Debug("frame received", "connection_id", c.id, "frame", c.frames, "request_time_epoch", received.UnixMilli())
		if typ == websocket.MessageText && !utf8.Valid(data) {
			// RFC 6455 §8.1: an endpoint that finds a text message is not UTF-8 fails the
			// connection, with 1007 (§7.4.1). $default never sees it: the JSON event
			// would carry the body with U+FFFD substituted, as if the client had sent that.
			if c.markClosing(websocket.StatusInvalidFramePayloadData, "text frame is not valid UTF-8") {
				go func() { _ = c.ws.Close(websocket.StatusInvalidFramePayloadData, "text frame is not valid UTF-8") }()
			}
			continue
		}
		if c.isClosed() {
			continue // closing: nothing after the frame that failed it is applied
		}
		body, b64 := string(data), false
		if typ == websocket.MessageBinary {
			body, b64 = base64.StdEncoding.EncodeToString(data), true
		}
		// Waiting for a slot here stops reading this socket: backpressure instead of
		// an unbounded pile of goroutines.
		g.sem <- struct{}{}
		if !g.work.add() {
			<-g.sem
			continue
		}
		go func() {
			defer func() { <-g.sem; g.work.done() }()
			g.message(c, body, b64, received)
		}()
	}
}

// message invokes $default for one frame received at received (the frame's
// requestTimeEpoch). As on API Gateway, a missing route or a failed invocation is
// reported to the client in a {"message": ...} frame.
func (g *Gateway) message(c *connection, body string, b64 bool, received time.Time) {
	now := received
	ev := events.APIGatewayWebsocketProxyRequest{
		RequestContext:  g.requestContext(c, RouteDefault, "MESSAGE", now),
		Body:            bodyMark,
		IsBase64Encoded: b64,
	}
	ev.RequestContext.MessageID = newShortID()
	h, ok := g.cfg.Routes[RouteDefault]
	if !ok {
		g.routeError(c, "Forbidden", ev.RequestContext.RequestID)
		return
	}
	payload, err := messageEvent(ev, body)
	if err != nil {
		g.log.Error("message event", "connection_id", c.id, "error", err.Error())
		g.routeError(c, "Internal server error", ev.RequestContext.RequestID)
		return
	}
	_, reqID, err := g.invoke(g.base, routeFunction(RouteDefault), h, g.timeout(RouteDefault), payload, nil)
	if err != nil {
		g.log.Warn("message handler failed", "connection_id", c.id, "route", RouteDefault, "request_id", reqID, "error", err.Error())
		g.routeError(c, "Internal server error", ev.RequestContext.RequestID)
	}
}

func (g *Gateway) routeError(c *connection, msg, requestID string) {
	frame, _ := json.Marshal(map[string]string{"message": msg, "connectionId": c.id, "requestId": requestID})
	_ = c.enqueue(outFrame{p: frame, done: make(chan error, 1)}) // in order with the posts

}

// disconnect unregisters the connection, so posts answer GoneException from now on,
// and then invokes $disconnect once.
func (g *Gateway) disconnect(c *connection, code websocket.StatusCode, reason string) {
	g.mu.Lock()
	if g.conns[c.id] == c {
		delete(g.conns, c.id)
	}
	g.mu.Unlock()
	if code < 0 {
		code = websocket.StatusNoStatusRcvd
	}
	g.log.Info("disconnected", "connection_id", c.id, "status", int(code))
	h, ok := g.cfg.Routes[RouteDisconnect]
	if !ok {
		return
	}
	now := time.Now()
	ev := events.APIGatewayWebsocketProxyRequest{
		Headers: map[string]string{
			"Host":            c.host,
			"X-Forwarded-For": c.sourceIP,
		},
		MultiValueHeaders: map[string][]string{
			"Host":            {c.host},
			"X-Forwarded-For": {c.sourceIP},
		},
		RequestContext: g.requestContext(c, RouteDisconnect, "DISCONNECT", now),
	}
	ev.RequestContext.DisconnectStatusCode = int64(code)
	ev.RequestContext.DisconnectReason = &reason
	if _, reqID, err := g.invoke(g.base, routeFunction(RouteDisconnect), h, g.timeout(RouteDisconnect), ev, nil); err != nil {
		g.log.Warn("disconnect handler failed", "connection_id", c.id, "route", RouteDisconnect, "request_id", reqID, "error", err.Error())
	}
}

// pingLoop pings every PingInterval until done; an unanswered ping closes the socket.
func (g *Gateway) pingLoop(c *connection, done <-chan struct{}) {
	t := time.NewTicker(g.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.PingInterval)
		err := c.ws.Ping(ctx)
		cancel()
		if err != nil {
			select {
			case <-done: // the socket closed meanwhile; not a ping failure
				return
			default:
			}
			g.log.Info("ping failed; closing", "connection_id", c.id, "error", err.Error())
			if c.markClosing(websocket.StatusPolicyViolation, "ping timeout") {
				// No handshake: a peer that does not answer pings will not answer a close.
				_ = c.ws.CloseNow()
			}
			return
		}
	}
}

// requestContext fills the fields API Gateway sets on every WebSocket event.
func (g *Gateway) requestContext(c *connection, route, eventType string, now time.Time) events.APIGatewayWebsocketProxyRequestContext {
	reqID := newShortID()
	return events.APIGatewayWebsocketProxyRequestContext{
		RouteKey:          route,
		EventType:         eventType,
		ExtendedRequestID: reqID,
		RequestID:         reqID,
		RequestTime:       now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
		RequestTimeEpoch:  now.UnixMilli(),
		MessageDirection:  "IN",
		Stage:             g.cfg.Stage,
		ConnectedAt:       c.connectedAt.UnixMilli(),
		Identity: events.APIGatewayRequestIdentity{
			SourceIP:  c.sourceIP,
			UserAgent: c.userAgent,
		},
		// With the port, unlike AWS: handlers that build their management endpoint as
		// scheme://domainName/stage then reach this gateway.
		DomainName:   c.host,
		ConnectionID: c.id,
		APIID:        "local",
	}
}

// connectEvent builds the $connect event. The path /agents/{agent_id}/ws becomes the
// query parameter agent_id (what the CloudFront function does in front of the real
// API), overriding any agent_id the client sent; other query parameters pass through.
func (g *Gateway) connectEvent(r *http.Request, c *connection, agentID string, now time.Time) events.APIGatewayWebsocketProxyRequest {
	multi := make(map[string][]string, len(r.Header)+6)
	for k, vs := range r.Header {
		multi[wireHeaderName(k)] = append([]string(nil), vs...)
	}
	multi["Host"] = []string{r.Host}
	multi["X-Forwarded-For"] = append(multi["X-Forwarded-For"], c.sourceIP)
	multi["X-Forwarded-Port"] = []string{listenPort(g)}
	multi["X-Forwarded-Proto"] = []string{"http"}
	multi["X-Amzn-Trace-Id"] = []string{newTraceID(now.Unix())}
	headers := make(map[string]string, len(multi))
	for k, vs := range multi {
		headers[k] = strings.Join(vs, ", ")
	}

	multiQ := map[string][]string{}
	for k, vs := range r.URL.Query() {
		multiQ[k] = append([]string(nil), vs...)
	}
	multiQ["agent_id"] = []string{agentID}
	query := make(map[string]string, len(multiQ))
	for k, vs := range multiQ {
		query[k] = vs[len(vs)-1] // API Gateway keeps the last of repeated parameters
	}

	return events.APIGatewayWebsocketProxyRequest{
		Headers:                         headers,
		MultiValueHeaders:               multi,
		QueryStringParameters:           query,
		MultiValueQueryStringParameters: multiQ,
		RequestContext:                  g.requestContext(c, RouteConnect, "CONNECT", now),
		IsBase64Encoded:                 false,
	}
}

// wireHeaderName undoes Go's canonicalization for the Sec-WebSocket-* headers, which
// browsers send (and API Gateway passes on) spelled as in RFC 6455. Other headers keep
// Go's canonical form; handlers should look headers up case-insensitively anyway.
func wireHeaderName(k string) string {
	if rest, ok := strings.CutPrefix(k, "Sec-Websocket-"); ok {
		return "Sec-WebSocket-" + rest
	}
	return k
}

func listenPort(g *Gateway) string {
	_, port, _ := net.SplitHostPort(g.ln.Addr().String())
	return port
}

func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// isUpgrade checks the parts of an RFC 6455 opening handshake that decide whether
// the request can be upgraded at all.
func isUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") &&
		headerHasToken(r.Header, "Upgrade", "websocket") &&
		r.Header.Get("Sec-WebSocket-Key") != "" &&
		r.Header.Get("Sec-WebSocket-Version") == "13"
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// headerValue looks a header up case-insensitively in a proxy response.
func headerValue(resp events.APIGatewayProxyResponse, name string) string {
	for k, v := range resp.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	for k, vs := range resp.MultiValueHeaders {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}
