// Package client is a Go client of the Terret Socket Protocol v1: one WebSocket per
// agent, over which the server streams the agent's durable session log and the client
// sends the protocol's frames (inject, cancel, approve, deny, set_model, set_policy).
//
// Dial connects and reads hello; Subscribe (or Resume) starts replay-then-tail. Events
// reach Options.OnEvent in seq order, each exactly once for the life of the Client,
// whatever happens to the connection: on a network error, a close, or a lagged or
// internal error frame the client reconnects with jittered exponential backoff and
// resubscribes from the highest seq its Cursor durably recorded + 1, discarding what
// it already delivered. Only unauthorized and superseded stop it (they would not get
// better by retrying). Reconnects are visible only through Options.OnStatus.
//
//	c, err := client.Dial(ctx, "ws://127.0.0.1:3001/agents/demo/ws", token, client.Options{
//		OnEvent: func(ev client.Event) error { fmt.Println(string(ev.Raw)); return nil },
//	})
//	if err != nil { … }
//	defer c.Close()
//	if err := c.Subscribe(ctx, 0); err != nil { … }
//	err = c.Inject(ctx, "hello", true)
//	…
//	err = c.Wait() // until Close, or ErrUnauthorized / ErrSuperseded / an OnEvent error
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/terret/terret-ws/internal/protocol"
)

// The protocol's WebSocket subprotocols: a client that cannot set headers offers the
// token as "terret.bearer.<token>" next to "terret.v1".
const (
	Subprotocol       = "terret.v1"
	SubprotocolBearer = "terret.bearer."
)

// readLimit bounds one server frame; events are at most 128 KiB.
const readLimit = 1 << 20

// State is the client's connection state, reported through Options.OnStatus.
type State int

// The states, in the order a client passes through them.
const (
	StateConnecting   State = iota + 1 // dialing; Status.Attempt is 0 for Dial, n for the n-th reconnect attempt
	StateConnected                     // hello received (and the subscription re-sent after a reconnect)
	StateReconnecting                  // the connection or an attempt failed; waiting Status.Delay
	StateClosed                        // stopped for good; Status.Err says why (nil after Close)
)

func (s State) String() string {
	switch s {
	case StateConnecting:
		return "connecting"
	case StateConnected:
		return "connected"
	case StateReconnecting:
		return "reconnecting"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Status is one connection state change.
type Status struct {
	State State
	// Attempt numbers reconnect attempts: 0 for Dial's own; it counts up while the
	// client fails to get anywhere and starts again at 1 after a connection that made
	// progress. A Connected status with Attempt > 0 is a reconnect.
	Attempt int
	// Delay is how long the client waits before the attempt (Reconnecting only).
	Delay time.Duration
	// Err is why the connection or attempt failed (Reconnecting), or why the client
	// stopped (Closed; nil when Close stopped it).
	Err error
	// Hello is the connection's hello (Connected only).
	Hello Hello
}

// Options configure a Client. The zero value works: events are dropped and seqs are
// recorded in memory.
type Options struct {
	// OnEvent receives every session event of the subscription, in seq order, each
	// exactly once. A non-nil error stops the client (Wait returns it) without
	// recording the event's seq.
	OnEvent func(Event) error
	// OnNotice receives *ReplayTruncated and the error frames that keep the connection
	// open (*ProtocolError: bad_frame, not_running, stale_call, unsupported), in stream
	// order with the events.
	OnNotice func(Notice)
	// OnStatus receives every connection state change.
	OnStatus func(Status)
	// OnEvent, OnNotice and OnStatus are called one at a time, on one goroutine (Dial's
	// for its own statuses). They must not wait on the client: not Close, and not a
	// sender while the client reconnects (it would wait for the goroutine running the
	// callback). Nor should they block long: a client that stops reading is eventually
	// dropped by the server (lagged), and then reconnects.

	// Cursor records how far the caller got (default: a MemoryCursor).
	Cursor Cursor
	// SubprotocolAuth sends the token as the subprotocol "terret.bearer.<token>"
	// (the browser form) instead of the Authorization: Bearer header.
	SubprotocolAuth bool
	// MinBackoff and MaxBackoff bound the reconnect delay (defaults 250ms and 30s).
	// The n-th consecutive attempt waits a random time in [d/2, d], d = min(MinBackoff·2^(n-1), MaxBackoff).
	MinBackoff, MaxBackoff time.Duration
	// DialTimeout bounds one attempt's handshake and hello (default 15s).
	DialTimeout time.Duration
	// HTTPClient makes the handshake (default http.DefaultClient).
	HTTPClient *http.Client
	// Header is added to the handshake request.
	Header http.Header
	// ReadAhead is how many frames the client reads ahead of the callbacks (default 256).
	ReadAhead int
	// PingInterval, when set, makes the client ping the server that often and treat a
	// pong missing for as long as a dropped connection — how a silently dead network
	// path is noticed. Off by default: `terret dev` pings clients itself, and API
	// Gateway closes idle connections after 10 minutes, which the client reconnects
	// through anyway.
	PingInterval time.Duration
	// KeepaliveInterval is how long a connection may go without the client sending a
	// frame before it sends {"type":"keepalive"} (docs/protocol.md, "Extension:
	// keepalive"): API Gateway closes a connection idle for 10 minutes, and the server
	// cannot ping through it. Frames received do not count, so a client that only
	// receives still sends one keepalive per interval. Default DefaultKeepaliveInterval (9 minutes);
	// negative turns it off. The server answers {"type":"keepalive"}, which the client
	// drops (bytes toward the client keep CloudFront's idle timer running); a server
	// without the extension answers bad_frame (an OnNotice) and stays open. On AWS a
	// keepalive costs two billed messages and no invocation; it carries no order number.
	KeepaliveInterval time.Duration
	// keepaliveAfter replaces time.After in the keepalive loop (tests).
	keepaliveAfter func(time.Duration) <-chan time.Time
	// NoBatch subscribes without the batching extension (docs/protocol.md, "Extension: batched event frames"): the server
	// then sends one event per message, as to any v1 client. By default the client
	// asks for batches and splits them; OnEvent sees the same events either way.
	NoBatch bool
}

// DefaultKeepaliveInterval is Options.KeepaliveInterval's default: a minute inside API
// Gateway's 10-minute idle timeout.
const DefaultKeepaliveInterval = 9 * time.Minute

func (o Options) withDefaults() Options {
	if o.Cursor == nil {
		o.Cursor = &MemoryCursor{}
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 250 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 15 * time.Second
	}
	if o.ReadAhead <= 0 {
		o.ReadAhead = 256
	}
	if o.KeepaliveInterval == 0 {
		o.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if o.keepaliveAfter == nil {
		o.keepaliveAfter = time.After
	}
	return o
}

// Client is one agent's socket, kept open across drops. Its methods are safe for
// concurrent use.
type Client struct {
	url, token string
	opts       Options

	life context.Context // cancelled by Close
	kill context.CancelFunc
	done chan struct{} // closed when the client has stopped
	err  error         // why; written before done closes

	// subMu orders subscription changes: Subscribe, and the resubscribe of a reconnect.
	subMu sync.Mutex

	mu         sync.Mutex
	conn       *conn         // nil while disconnected
	connected  chan struct{} // closed while conn != nil
	hello      Hello
	subscribed bool
	next       int64           // the next seq the caller has not received
	awaiting   int64           // ≥ 0: discard events until this seq (the newest subscription's first)
	progress   bool            // the current connection delivered an event
	epoch      string          // the epoch of the log next belongs to ("" until a hello names one)
	pending    []pendingInject // injects sent whose event has not come (exactlyonce.go)
}

// Dial connects to an agent's socket URL — ws(s)://HOST/agents/{agent_id}/ws, or the
// raw API Gateway form wss://API/STAGE?agent_id=ID — presenting token, and returns
// once the server's hello arrived. ctx bounds this first connection only; the client
// lives until Close or until it stops on its own (see Wait). Dial does not retry: it
// returns a *ProtocolError (ErrUnauthorized) when the server refuses the token, and
// ErrBadURL for a URL that names no agent.
func Dial(ctx context.Context, socketURL, token string, opts Options) (*Client, error) {
	if _, err := AgentID(socketURL); err != nil {
		return nil, err
	}
	u, err := parseSocketURL(socketURL)
	if err != nil {
		return nil, err
	}
	c := &Client{
		url: u.String(), token: token, opts: opts.withDefaults(),
		done: make(chan struct{}), connected: make(chan struct{}), awaiting: -1,
	}
	c.life, c.kill = context.WithCancel(context.Background())
	c.status(Status{State: StateConnecting})
	cn, err := c.connect(ctx)
	if err != nil {
		err, _ = isFatal(err)
		c.kill()
		c.status(Status{State: StateClosed, Err: err})
		return nil, err
	}
	if _, err := c.checkEpoch(cn.hello); err != nil {
		cn.close()
		c.kill()
		c.status(Status{State: StateClosed, Err: err})
		return nil, err
	}
	c.attach(cn)
	c.status(Status{State: StateConnected, Hello: cn.hello})
	go c.run(cn)
	return c, nil
}

// checkEpoch compares the epoch in hello with the one the client's position belongs
// to — its own, or at first the EpochCursor's. A change means the session was reset,
// or deleted and created again: the seqs recorded name events of a log that is gone,
// so the client forgets them (EpochCursor.StoreEpoch with restart), continues from seq
// 0, and tells the application with an *EpochChanged notice before any event of the
// new log. It reports whether it started over.
func (c *Client) checkEpoch(h Hello) (bool, error) {
	if h.Epoch == "" {
		return false, nil // a server without epochs
	}
	c.mu.Lock()
	known := c.epoch
	c.mu.Unlock()
	ec, durable := c.opts.Cursor.(EpochCursor)
	if known == "" && durable {
		e, err := ec.LoadEpoch()
		if err != nil {
			return false, &fatal{err}
		}
		known = e
	}
	if known == h.Epoch {
		c.mu.Lock()
		c.epoch = known
		c.mu.Unlock()
		return false, nil
	}
	restart := known != ""
	if durable {
		if err := ec.StoreEpoch(h.Epoch, restart); err != nil {
			return false, &fatal{err}
		}
	}
	c.mu.Lock()
	c.epoch = h.Epoch
	if restart {
		c.next = 0
	}
	c.mu.Unlock()
	if restart {
		c.notice(&EpochChanged{Old: known, New: h.Epoch})
	}
	return restart, nil
}

// Hello returns the hello of the newest connection.
func (c *Client) Hello() Hello {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hello
}

// SessionID is the session the server named in hello (the agent id, in v1).
func (c *Client) SessionID() string { return c.Hello().SessionID }

// LastSeq is the log's highest seq when the newest connection opened.
func (c *Client) LastSeq() int64 { return c.Hello().LastSeq }

// Subscribe asks for the log from fromSeq on (replay, then live tail). Events the
// previous subscription still had in flight are discarded: the next event OnEvent
// receives is fromSeq (or, after a ReplayTruncated notice, the seq it names), and so
// on in order. Subscribing again at an earlier seq delivers those events again — the
// caller asked for them. The subscription is recorded before it is sent, so it
// stands even if sending fails: the client re-sends it when it reconnects.
func (c *Client) Subscribe(ctx context.Context, fromSeq int64) error {
	if fromSeq < 0 {
		return fmt.Errorf("client: subscribe from %d: seq must be ≥ 0", fromSeq)
	}
	c.subMu.Lock()
	defer c.subMu.Unlock()
	c.mu.Lock()
	if c.isDone() {
		c.mu.Unlock()
		return c.closedErr()
	}
	c.subscribed, c.next, c.awaiting = true, fromSeq, fromSeq
	cn := c.conn
	c.mu.Unlock()
	if cn == nil {
		return nil // the reconnect in progress subscribes
	}
	if err := cn.write(ctx, protocol.Subscribe{FromSeq: fromSeq, Batch: !c.opts.NoBatch}); err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// Resume subscribes from the Cursor's seq + 1, or from 0 when it holds none, and
// returns that seq: how a process picks up where an earlier one stopped.
func (c *Client) Resume(ctx context.Context) (int64, error) {
	seq, ok, err := c.opts.Cursor.Load()
	if err != nil {
		return 0, err
	}
	from := int64(0)
	if ok {
		from = seq + 1
	}
	return from, c.Subscribe(ctx, from)
}

// Inject sends text to the agent. With wake on an idle agent it starts (or resumes) a
// turn; otherwise it is queued as a steer. The log acknowledges it (user/message or
// context/injected).
func (c *Client) Inject(ctx context.Context, text string, wake bool) error {
	return c.send(ctx, protocol.Inject{Text: text, Wake: wake})
}

// Cancel asks the running turn to stop; reason may be empty. With no turn running the
// server answers with a not_running notice.
func (c *Client) Cancel(ctx context.Context, reason string) error {
	return c.send(ctx, protocol.Cancel{Reason: reason})
}

// Approve resolves the parked tool call callID (the id of its tool/call event).
func (c *Client) Approve(ctx context.Context, callID string) error {
	return c.send(ctx, protocol.Approve{CallID: callID})
}

// Deny resolves the parked tool call callID as denied; reason may be empty.
func (c *Client) Deny(ctx context.Context, callID, reason string) error {
	return c.send(ctx, protocol.Deny{CallID: callID, Reason: reason})
}

// SetModel points model role (main, titler, …) at spec ("provider/model" or "scripted").
func (c *Client) SetModel(ctx context.Context, role, spec string) error {
	return c.send(ctx, protocol.SetModel{Role: role, Spec: spec})
}

// SetPolicy replaces the agent's tool allow list with patterns (fnmatch globs); an
// empty list allows no tool.
func (c *Client) SetPolicy(ctx context.Context, patterns []string) error {
	if patterns == nil {
		patterns = []string{}
	}
	return c.send(ctx, protocol.SetPolicy{Patterns: patterns})
}

// Seen is the highest seq delivered to Options.OnEvent (counting the one being
// delivered), -1 before the first: the usual expect_seq for a frame sent in answer to
// what the events showed. An application that acts on what a person sees should pass
// the seq of what it last showed instead.
func (c *Client) Seen() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next - 1
}

// InjectExpect is Inject with the precondition expect_seq (docs/protocol.md,
// "expect_seq"): applied only if no turn started or ended after seq — a steer lands in
// the turn the sender saw running, a wake starts a turn only on an agent still idle.
// Otherwise the server answers stale (an OnNotice *ProtocolError matching ErrStale)
// and nothing is appended.
func (c *Client) InjectExpect(ctx context.Context, text string, wake bool, seq int64) error {
	return c.send(ctx, protocol.Inject{Text: text, Wake: wake, ExpectSeq: &seq})
}

// CancelExpect is Cancel with the precondition expect_seq: it stops only the turn
// that was running at seq; if that turn ended, or another started, after seq, the
// server answers stale and stops nothing.
func (c *Client) CancelExpect(ctx context.Context, reason string, seq int64) error {
	return c.send(ctx, protocol.Cancel{Reason: reason, ExpectSeq: &seq})
}

// ApproveExpect is Approve with the precondition expect_seq: the approval request
// must be at or before seq (the sender saw it), else stale.
func (c *Client) ApproveExpect(ctx context.Context, callID string, seq int64) error {
	return c.send(ctx, protocol.Approve{CallID: callID, ExpectSeq: &seq})
}

// DenyExpect is Deny with the precondition expect_seq, as ApproveExpect.
func (c *Client) DenyExpect(ctx context.Context, callID, reason string, seq int64) error {
	return c.send(ctx, protocol.Deny{CallID: callID, Reason: reason, ExpectSeq: &seq})
}

// SetPolicyExpect is SetPolicy with the precondition expect_seq: applied only if no
// policy/updated was logged after seq (no one else changed the policy meanwhile).
func (c *Client) SetPolicyExpect(ctx context.Context, patterns []string, seq int64) error {
	if patterns == nil {
		patterns = []string{}
	}
	return c.send(ctx, protocol.SetPolicy{Patterns: patterns, ExpectSeq: &seq})
}

// Keepalive sends {"type":"keepalive"} now, unnumbered, as the client does by itself
// after KeepaliveInterval without sending (docs/protocol.md, "Extension: keepalive").
// A server with the extension answers {"type":"keepalive"}; one without answers
// bad_frame (an OnNotice) and stays open. `terret smoke` sends one to check a deployment's route.
func (c *Client) Keepalive(ctx context.Context) error {
	return c.onConn(ctx, "keepalive", func(cn *conn) error { return cn.writeRaw(ctx, keepaliveFrame) })
}

// send writes one frame once connected, waiting through a reconnect (bounded by ctx),
// named with a new client_id. A frame whose write fails is not re-sent now, and the
// error is returned; an inject is kept until its event comes, and sent again with the
// same client_id after each reconnect (exactlyonce.go): the server applies it once.
func (c *Client) send(ctx context.Context, f protocol.ClientFrame) error {
	id := NewClientID()
	if in, ok := f.(protocol.Inject); ok {
		c.keep(id, in)
	}
	return c.onConn(ctx, f.FrameType(), func(cn *conn) error { return cn.writeID(ctx, f, id) })
}

// onConn runs write on the connection once connected, waiting through a reconnect
// (bounded by ctx); what names the frame in the error.
func (c *Client) onConn(ctx context.Context, what string, write func(*conn) error) error {
	for {
		c.mu.Lock()
		if c.isDone() {
			c.mu.Unlock()
			return c.closedErr()
		}
		cn, ready := c.conn, c.connected
		c.mu.Unlock()
		if cn != nil {
			if err := write(cn); err != nil {
				return fmt.Errorf("client: send %s: %w", what, err)
			}
			return nil
		}
		select {
		case <-ready:
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops the client: it closes the connection normally and stops reconnecting,
// then waits until no callback runs. Wait returns nil afterwards (unless the client
// had already stopped for a reason).
func (c *Client) Close() error {
	c.kill()
	<-c.done
	return nil
}

// Done is closed once the client has stopped.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the client stopped: nil while it runs or after Close; otherwise a
// *ProtocolError (ErrUnauthorized, ErrSuperseded), the error OnEvent returned, or the
// Cursor's error.
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Wait blocks until the client stops and returns Err.
func (c *Client) Wait() error {
	<-c.done
	return c.err
}

func (c *Client) isDone() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *Client) closedErr() error {
	if c.err != nil {
		return fmt.Errorf("%w: %w", ErrClosed, c.err)
	}
	return ErrClosed
}

func (c *Client) status(s Status) {
	if c.opts.OnStatus != nil {
		c.opts.OnStatus(s)
	}
}

// fatal marks an error that stops the client: the caller's (OnEvent, Cursor) or the
// server's final word (unauthorized, superseded, a protocol version it does not speak).
type fatal struct{ err error }

func (f *fatal) Error() string { return f.err.Error() }
func (f *fatal) Unwrap() error { return f.err }

// errStopped is how Close ends the run loop.
var errStopped = errors.New("client: stopped")

func isFatal(err error) (error, bool) {
	var f *fatal
	switch {
	case errors.As(err, &f):
		return f.err, true
	case errors.Is(err, ErrUnauthorized), errors.Is(err, ErrSuperseded):
		return err, true
	}
	return err, false
}

// run serves connections until the client stops.
func (c *Client) run(cn *conn) {
	attempt, since := 0, time.Now()
	for {
		cause := c.serve(cn)
		c.detach(cn, errors.Is(cause, errStopped))
		if errors.Is(cause, errStopped) {
			c.finish(nil)
			return
		}
		if err, ok := isFatal(cause); ok {
			c.finish(err)
			return
		}
		// A connection that delivered something, or lasted, was healthy: start the
		// backoff over. One refused or dropped at once keeps counting up.
		c.mu.Lock()
		progressed := c.progress
		c.mu.Unlock()
		if progressed || time.Since(since) >= c.opts.MaxBackoff {
			attempt = 0
		}
		var err error
		cn, attempt, err = c.reconnect(cause, attempt)
		if err != nil {
			if errors.Is(err, errStopped) {
				err = nil
			} else {
				err, _ = isFatal(err)
			}
			c.finish(err)
			return
		}
		since = time.Now()
	}
}

// reconnect dials until it has a connection with the subscription re-sent. attempt is
// the number of attempts already made without progress.
func (c *Client) reconnect(cause error, attempt int) (*conn, int, error) {
	for {
		attempt++
		delay := c.backoff(attempt)
		c.status(Status{State: StateReconnecting, Attempt: attempt, Delay: delay, Err: cause})
		t := time.NewTimer(delay)
		select {
		case <-c.life.Done():
			t.Stop()
			return nil, attempt, errStopped
		case <-t.C:
		}
		c.status(Status{State: StateConnecting, Attempt: attempt})
		cn, err := c.connect(c.life)
		if err == nil {
			err = c.resubscribe(cn)
		}
		switch {
		case err == nil:
			c.status(Status{State: StateConnected, Attempt: attempt, Hello: cn.hello})
			return cn, attempt, nil
		case c.life.Err() != nil:
			return nil, attempt, errStopped
		}
		if _, ok := isFatal(err); ok {
			return nil, attempt, err
		}
		cause = err
	}
}

// resubscribe re-sends the subscription on a new connection, from the cursor's seq + 1
// but never past what the caller still lacks, then makes the connection current.
func (c *Client) resubscribe(cn *conn) error {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if _, err := c.checkEpoch(cn.hello); err != nil {
		cn.close()
		return err
	}
	c.mu.Lock()
	subscribed, next := c.subscribed, c.next
	c.mu.Unlock()
	if subscribed {
		from := next
		seq, ok, err := c.opts.Cursor.Load()
		if err != nil {
			cn.close()
			return &fatal{err}
		}
		if ok && seq+1 < from {
			from = seq + 1 // events in [from, next) come again and are discarded
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.DialTimeout)
		err = cn.write(ctx, protocol.Subscribe{FromSeq: from, Batch: !c.opts.NoBatch})
		cancel()
		if err != nil {
			cn.close()
			return fmt.Errorf("client: resubscribe: %w", err)
		}
		c.mu.Lock()
		c.awaiting = from
		c.mu.Unlock()
	}
	c.resend(cn) // before any frame sent from now on (exactlyonce.go)
	c.attach(cn)
	return nil
}

func (c *Client) backoff(attempt int) time.Duration {
	d := c.opts.MinBackoff
	for i := 1; i < attempt && d < c.opts.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.opts.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

func (c *Client) attach(cn *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn, c.hello, c.progress = cn, cn.hello, false
	close(c.connected)
}

func (c *Client) detach(cn *conn, graceful bool) {
	c.mu.Lock()
	if c.conn == cn {
		c.conn, c.connected = nil, make(chan struct{})
	}
	c.mu.Unlock()
	if !graceful {
		cn.close()
		return
	}
	// The close handshake waits for the peer, up to 10s on a dead path: give it a
	// moment, then let it finish on its own.
	closed := make(chan struct{})
	go func() {
		cn.closeNormally()
		close(closed)
	}()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
	}
}

func (c *Client) finish(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	c.status(Status{State: StateClosed, Err: err})
	close(c.done)
}

// serve handles cn's frames until it ends, and returns why.
func (c *Client) serve(cn *conn) error {
	for {
		select {
		case <-c.life.Done():
			return errStopped
		case r := <-cn.frames:
			if r.err != nil {
				return r.err
			}
			if err := c.handle(r.data); err != nil {
				return err
			}
		}
	}
}

// handle routes one server frame. A non-nil error ends the connection.
func (c *Client) handle(data []byte) error {
	if bytes.IndexByte(data, '\n') >= 0 {
		return c.batch(data)
	}
	var f wireFrame
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("%w: undecodable frame: %v", ErrProtocol, err)
	}
	if f.Seq != nil {
		return c.event(data)
	}
	switch f.Type {
	case protocol.TypeError:
		pe := &ProtocolError{Code: f.Code, Message: f.Message}
		if pe.Code.Closes() {
			return pe
		}
		c.notice(pe)
	case protocol.TypeReplayTruncated:
		c.truncated(f.RequestedFromSeq, f.FromSeq)
	}
	// A repeated hello, or a frame type newer than this client: nothing to do.
	return nil
}

func (c *Client) event(data []byte) error {
	var ev Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return fmt.Errorf("%w: undecodable event: %v", ErrProtocol, err)
	}
	ev.Raw = data
	c.mu.Lock()
	if !c.subscribed {
		c.mu.Unlock()
		return nil
	}
	if c.awaiting >= 0 {
		if ev.Seq != c.awaiting {
			c.mu.Unlock()
			return nil // the replaced subscription's, still in flight
		}
		c.awaiting = -1
	}
	switch {
	case ev.Seq < c.next:
		c.mu.Unlock()
		return nil // delivered already
	case ev.Seq > c.next:
		want := c.next
		c.mu.Unlock()
		return fmt.Errorf("%w: event seq %d where %d was due", ErrProtocol, ev.Seq, want)
	}
	c.next, c.progress = ev.Seq+1, true
	c.mu.Unlock()
	c.acknowledged(ev)
	if c.opts.OnEvent != nil {
		if err := c.opts.OnEvent(ev); err != nil {
			return &fatal{err}
		}
	}
	if err := c.opts.Cursor.Store(ev.Seq); err != nil {
		return &fatal{err}
	}
	return nil
}

// truncated handles replay_truncated: the current subscription's replay starts at from
// instead of requested.
func (c *Client) truncated(requested, from int64) {
	c.mu.Lock()
	if c.awaiting < 0 || requested != c.awaiting {
		c.mu.Unlock()
		return // a replaced subscription's
	}
	c.awaiting = from
	missing := c.next
	if from <= missing {
		c.mu.Unlock()
		return // the caller has everything up to from already
	}
	c.next = from
	c.mu.Unlock()
	c.notice(&ReplayTruncated{Requested: missing, From: from})
}

func (c *Client) notice(n Notice) {
	if c.opts.OnNotice != nil {
		c.opts.OnNotice(n)
	}
}
