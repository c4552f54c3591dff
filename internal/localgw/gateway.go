// Package localgw is a local emulator of an API Gateway WebSocket API with Lambda
// integrations, plus the two AWS HTTP APIs the deployed handlers call back through:
// the `@connections` management API and the Lambda Invoke API.
//
// Neither `sam local` nor LocalStack's free edition emulates WebSocket APIs. The
// gateway runs the very lambda.Handler values the deployed functions run, feeding
// them the JSON events API Gateway would send, so `terret dev` and the tests exercise
// the production code paths unchanged:
//
//   - GET /agents/{agent_id}/ws upgrades to a WebSocket after the $connect route
//     accepted it; text and binary frames invoke $default; a closed socket invokes
//     $disconnect exactly once.
//   - POST|GET|DELETE /{stage}/@connections/{id} (and the same without the stage
//     prefix) serve PostToConnection, GetConnection and DeleteConnection for the real
//     apigatewaymanagementapi client with BaseEndpoint = ManagementEndpoint().
//   - POST /2015-03-31/functions/{name}/invocations serves Invoke for a Lambda client
//     (package invoke's, the SDK's) with BaseEndpoint = LambdaEndpoint().
//
// The sockets (and Config.Pages) listen on Config.Addr. The two APIs listen apart, on
// a loopback port of their own, behind a per-gateway secret (internal.go): they are
// the handlers' callbacks, never a client's.
package localgw

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/coder/websocket"
)

// Route keys of an API Gateway WebSocket API that the gateway dispatches. Custom
// route keys (route selection expressions) are not emulated: every message goes to
// $default.
const (
	RouteConnect    = "$connect"
	RouteDefault    = "$default"
	RouteDisconnect = "$disconnect"
)

// Defaults applied by Start to zero Config fields.
const (
	DefaultPingInterval   = 20 * time.Second
	DefaultStage          = "local"
	DefaultRegion         = "us-east-1"
	DefaultAccountID      = "000000000000"
	DefaultTimeout        = 30 * time.Second
	DefaultWriteTimeout   = 10 * time.Second
	DefaultStallTimeout   = 60 * time.Second
	DefaultOutboxBytes    = 16 << 20
	DefaultSendBuffer     = 32 << 10
	DefaultMaxConcurrency = 64
	DefaultRetryBackoff   = time.Second
)

// Limits enforced like the AWS services they stand in for.
const (
	// MaxPostBytes is API Gateway's limit for one PostToConnection payload (128 KiB).
	MaxPostBytes = 128 * 1024
	// ReadLimit is the largest message the gateway reads: API Gateway's own 128 KiB
	// (MaxMessageBytes). A larger one closes the socket with 1009 (message too big), as
	// AWS does, after at most ReadLimit bytes were buffered: a client cannot make the
	// gateway hold more than that per frame, whatever length its header claims.
	ReadLimit = MaxMessageBytes
	// MaxSyncInvokeBytes and MaxAsyncInvokeBytes are Lambda's request payload limits.
	MaxSyncInvokeBytes  = 6 * 1024 * 1024
	MaxAsyncInvokeBytes = 1024 * 1024
)

// Sentinel errors.
var (
	// ErrUnknownRoute is returned by Start for a Routes key other than $connect,
	// $default and $disconnect.
	ErrUnknownRoute = errors.New("localgw: unknown route key")
	// ErrClosed is returned by Shutdown/Close after the first call.
	ErrClosed = errors.New("localgw: gateway already closed")
)

// Config configures a Gateway. Zero fields take the defaults above.
type Config struct {
	// Addr is the listen address; "127.0.0.1:0" picks a free port.
	Addr string
	// Listener, if set, is served instead of listening on Addr (a caller that must
	// know the address is free before starting anything else binds it first).
	Listener net.Listener
	// PingInterval is how often every open socket gets a WebSocket ping frame. A ping
	// not answered within the same interval closes the socket.
	PingInterval time.Duration
	// Stage is requestContext.stage and the first segment of the management API path.
	Stage string
	// Region and AccountID build the functions' ARNs (InvokedFunctionArn).
	Region    string
	AccountID string
	// Routes holds the WebSocket route handlers by route key ($connect, $default,
	// $disconnect). Every route is optional, as on API Gateway: without $connect every
	// connection is accepted, without $default a message is answered with API
	// Gateway's {"message":"Forbidden",...} frame.
	Routes map[string]lambda.Handler
	// Functions are served by the Lambda Invoke API, by function name.
	Functions map[string]lambda.Handler
	// Timeouts overrides the invocation deadline (DefaultTimeout) by route key or
	// function name.
	Timeouts map[string]time.Duration
	// WriteTimeout bounds how long PostToConnection waits for its frame to be written
	// (default 10s). Frames wait in the connection's outbox, in post order; a post
	// still queued after WriteTimeout is answered 200 and its frame written later.
	WriteTimeout time.Duration
	// StallTimeout bounds one frame write to the socket (default 60s): a peer that
	// takes no frame for that long is gone — the socket is closed (1006) and later
	// posts answer GoneException. A peer that does not read is also closed by the
	// ping loop (no pong).
	StallTimeout time.Duration
	// OutboxBytes bounds the frames posted to one connection and not yet written
	// (default 16 MiB); a post beyond it closes the socket and answers GoneException.
	OutboxBytes int
	// SendBuffer is the kernel send buffer (SO_SNDBUF) of every socket the gateway
	// accepts (default 32 KiB; Linux doubles it for its own bookkeeping). A post is
	// answered once its frame is written, and a written frame is counted as received
	// by the sender's outbound-queue bound (lagged); left to the kernel, the buffer
	// grows to megabytes on a fast link (4 MiB on Linux), where thousands of small
	// events would wait for a slow reader unseen by that bound.
	SendBuffer int
	// MaxConcurrency bounds concurrent $default invocations over all connections
	// (default 64). When it is reached, sockets stop being read until a slot frees.
	MaxConcurrency int
	// RetryBackoff is the wait before the first retry of a failed asynchronous
	// invocation; the second retry waits twice as long (Lambda waits 1 and 2 minutes).
	RetryBackoff time.Duration
	// Limits enforces API Gateway's limits on what clients send: frames of at most
	// MaxFrameBytes, messages of at most MaxMessageBytes; a larger one closes the
	// connection with status 1009. Off, frames of any size pass, and messages up to
	// ReadLimit (which is MaxMessageBytes either way).
	Limits bool
	// IdleTimeout closes a connection on which the client sent no frame for that long
	// (default 10 minutes, API Gateway's); MaxConnectionDuration closes every
	// connection that old (default 2 hours). Both close with 1001 "Going away".
	IdleTimeout           time.Duration
	MaxConnectionDuration time.Duration
	// MockRoutes are route keys served by a MOCK integration: a text frame whose JSON
	// "type" is one of them (the route selection expression $request.body.type)
	// invokes no handler; it counts as activity for IdleTimeout. MockReplies holds, by
	// route key, the text frame a two-way MOCK route's route response sends back; a
	// route without one answers nothing.
	MockRoutes  []string
	MockReplies map[string]string
	// CloudFrontIdleTimeout, when set, also closes a connection to which no frame was
	// written (a post or a MOCK route's answer; never a ping) for that long, as
	// CloudFront does in front of the API (DefaultCloudFrontIdleTimeout, 10 minutes).
	// Zero: no CloudFront in front, as on the raw execute-api URL.
	CloudFrontIdleTimeout time.Duration
	// Logger receives JSON logs; nil logs to stderr at Info.
	Logger *slog.Logger
	// Pages, if set, serves every other GET (the dev web page).
	Pages http.Handler
	// HTTP, if set, serves the agent paths other than the socket's, any method:
	// /agents/{agent_id}/... (package httpapi). On AWS the same paths reach the http
	// function through CloudFront on the socket's host.
	HTTP http.Handler
}

// Gateway is a running local API Gateway. Its methods are safe for concurrent use.
type Gateway struct {
	cfg  Config
	log  *slog.Logger
	ln   net.Listener
	srv  *http.Server
	iln  net.Listener // the internal APIs' loopback listener (internal.go)
	isrv *http.Server
	// secret is the first path segment of every internal API call.
	secret string
	base   context.Context // parent of every invocation; cancelled last, in Shutdown

	cancelBase  context.CancelFunc
	stopWatch   func() bool
	stopRetries chan struct{} // closed when Shutdown runs out of time: pending async retries are dropped
	serveDone   chan struct{}
	iserveDone  chan struct{}

	sem  chan struct{} // $default concurrency slots
	work tracker       // connections and invocations Shutdown waits for

	mu      sync.Mutex
	closing bool
	conns   map[string]*connection

	closeOnce sync.Once
}

// Start listens on cfg.Addr and serves until Close, Shutdown or the cancellation of
// ctx (which shuts the gateway down like Close). It returns once the listener is
// open, so the endpoints are usable immediately.
func Start(ctx context.Context, cfg Config) (*Gateway, error) {
	for key := range cfg.Routes {
		switch key {
		case RouteConnect, RouteDefault, RouteDisconnect:
		default:
			return nil, fmt.Errorf("%w %q (want %s, %s or %s)", ErrUnknownRoute, key, RouteConnect, RouteDefault, RouteDisconnect)
		}
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.Stage == "" {
		cfg.Stage = DefaultStage
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	if cfg.AccountID == "" {
		cfg.AccountID = DefaultAccountID
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.OutboxBytes <= 0 {
		cfg.OutboxBytes = DefaultOutboxBytes
	}
	if cfg.SendBuffer <= 0 {
		cfg.SendBuffer = DefaultSendBuffer
	}
	if cfg.MaxConcurrency <= 0 {
		cfg.MaxConcurrency = DefaultMaxConcurrency
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxConnectionDuration <= 0 {
		cfg.MaxConnectionDuration = DefaultMaxConnectionDuration
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	log := cfg.Logger.With("component", "localgw")

	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return nil, fmt.Errorf("localgw: listen %s: %w", cfg.Addr, err)
		}
	}
	iln, err := listenInternal()
	if err != nil {
		if cfg.Listener == nil {
			ln.Close()
		}
		return nil, fmt.Errorf("localgw: listen for the internal APIs: %w", err)
	}
	ln = sendBufferListener{Listener: ln, size: cfg.SendBuffer}
	// Invocations outlive the caller's ctx on purpose: shutting down must let them
	// finish (bounded by their deadlines) rather than cancel them mid-write.
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g := &Gateway{
		cfg:         cfg,
		log:         log,
		ln:          ln,
		iln:         iln,
		secret:      newInternalSecret(),
		base:        base,
		cancelBase:  cancel,
		stopRetries: make(chan struct{}),
		serveDone:   make(chan struct{}),
		iserveDone:  make(chan struct{}),
		sem:         make(chan struct{}, cfg.MaxConcurrency),
		work:        newTracker(),
		conns:       make(map[string]*connection),
	}
	g.srv = &http.Server{
		Handler:           g,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	g.isrv = &http.Server{
		Handler:           internalAPI{g},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(g.serveDone)
		if err := g.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serve failed", "error", err.Error())
		}
	}()
	go func() {
		defer close(g.iserveDone)
		if err := g.isrv.Serve(iln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serve failed", "listener", "internal", "error", err.Error())
		}
	}()
	g.stopWatch = context.AfterFunc(ctx, func() { _ = g.Close() })
	log.Info("gateway listening", "addr", ln.Addr().String(), "stage", cfg.Stage)
	return g, nil
}

// hostPort is the listener address with an unspecified IP replaced by loopback, so
// the URLs below are dialable.
func (g *Gateway) hostPort() string {
	addr := g.ln.Addr().(*net.TCPAddr)
	ip := addr.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(addr.Port))
}

// WebSocketURL is ws://HOST:PORT; clients dial WebSocketURL()+"/agents/{agent_id}/ws".
func (g *Gateway) WebSocketURL() string { return "ws://" + g.hostPort() }

// ManagementEndpoint is http://127.0.0.1:PORT/SECRET/{stage}, the BaseEndpoint for an
// apigatewaymanagementapi client (the shape of https://{api}.execute-api.../{stage}).
// It holds the gateway's secret: give it only to the handlers, never log it.
func (g *Gateway) ManagementEndpoint() string {
	return "http://" + g.internalHostPort() + "/" + g.secret + "/" + g.cfg.Stage
}

// LambdaEndpoint is http://127.0.0.1:PORT/SECRET, the BaseEndpoint for a lambda
// client. It holds the gateway's secret, as ManagementEndpoint does.
func (g *Gateway) LambdaEndpoint() string { return "http://" + g.internalHostPort() + "/" + g.secret }

// Close is Shutdown bounded by the longest configured invocation timeout plus 15s,
// so a handler that ignores its context cannot hang the caller forever.
func (g *Gateway) Close() error {
	bound := DefaultTimeout
	for _, d := range g.cfg.Timeouts {
		bound = max(bound, d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound+15*time.Second)
	defer cancel()
	return g.Shutdown(ctx)
}

// Shutdown stops accepting WebSockets (new upgrades get 503), closes every open
// socket with 1001 (going away), which invokes $disconnect for each, and waits until
// the $disconnect invocations and every in-flight invocation have returned, including
// the retries of asynchronous events, or ctx is done (then pending retries are
// dropped and logged, and ctx's error is returned). The management and
// Lambda APIs keep serving while it waits, because the handlers finishing may call
// back; then the listener closes. Only the first call does the work; later calls
// return ErrClosed.
func (g *Gateway) Shutdown(ctx context.Context) error {
	err := ErrClosed
	g.closeOnce.Do(func() {
		err = g.shutdown(ctx)
	})
	return err
}

func (g *Gateway) shutdown(ctx context.Context) error {
	g.stopWatch()
	g.mu.Lock()
	g.closing = true
	open := make([]*connection, 0, len(g.conns))
	for _, c := range g.conns {
		open = append(open, c)
	}
	g.mu.Unlock()
	g.log.Info("gateway closing", "open_connections", len(open))

	for _, c := range open {
		go c.closeWith(websocket.StatusGoingAway, "gateway closing")
	}
	g.work.close()
	waitErr := g.work.wait(ctx)
	if waitErr != nil {
		// Out of time: asynchronous events waiting for a retry are dropped (logged);
		// invocations still running are abandoned to their deadlines.
		close(g.stopRetries)
		g.log.Error("gateway closed before in-flight work finished", "error", waitErr.Error())
		g.mu.Lock()
		left := make([]*connection, 0, len(g.conns))
		for _, c := range g.conns {
			left = append(left, c)
		}
		g.mu.Unlock()
		for _, c := range left {
			select {
			case <-c.ready:
				if c.ws != nil {
					_ = c.ws.CloseNow() // sockets whose close handshake is still pending
				}
			default:
			}
		}
	}

	// Everything Shutdown promised to wait for is done; the grace period only lets
	// responses already being written (an Invoke's result) reach their callers. It is
	// short because http.Server.Shutdown waits up to 5s for a kept-alive connection the
	// SDK dialed but never used.
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 250*time.Millisecond)
	defer cancel()
	var srvErr error
	for _, srv := range []*http.Server{g.srv, g.isrv} {
		if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			srvErr = errors.Join(srvErr, err)
		}
		if err := srv.Close(); err != nil {
			srvErr = errors.Join(srvErr, err)
		}
	}
	<-g.serveDone
	<-g.iserveDone
	g.cancelBase()
	g.log.Info("gateway closed")
	if waitErr != nil {
		return fmt.Errorf("localgw: shutdown: %w", waitErr)
	}
	if srvErr != nil {
		return fmt.Errorf("localgw: shutdown: %w", srvErr)
	}
	return nil
}

// ServeHTTP serves the client side: the sockets and the pages. The @connections and
// Invoke APIs are not here (internalAPI). Path segments are matched unescaped, because
// the AWS SDKs percent-encode every byte of a connection id or function ARN that is not
// unreserved ('=', '+', '/', ':').
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	segs, ok := splitPath(r.URL.EscapedPath())
	if !ok {
		writeJSONError(w, http.StatusBadRequest, "BadRequestException", "malformed path")
		return
	}
	switch {
	case len(segs) == 3 && segs[0] == "agents" && segs[2] == "ws" && segs[1] != "":
		if r.Method != http.MethodGet {
			writeJSONError(w, http.StatusMethodNotAllowed, "MethodNotAllowedException", "WebSocket upgrade needs GET")
			return
		}
		g.serveWebSocket(w, r, segs[1])
	case g.cfg.HTTP != nil && len(segs) >= 3 && segs[0] == "agents" && segs[1] != "" && segs[2] != "ws":
		g.cfg.HTTP.ServeHTTP(w, r)
	case g.cfg.Pages != nil && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		g.cfg.Pages.ServeHTTP(w, r)
	default:
		writeJSONError(w, http.StatusNotFound, "NotFoundException", "no such resource: "+r.URL.Path)
	}
}

func splitPath(escaped string) ([]string, bool) {
	raw := strings.Split(strings.Trim(escaped, "/"), "/")
	segs := make([]string, len(raw))
	for i, s := range raw {
		u, err := url.PathUnescape(s)
		if err != nil {
			return nil, false
		}
		segs[i] = u
	}
	return segs, true
}

// Timeout is the invocation deadline of a route key or function name: Config.Timeouts',
// else DefaultTimeout.
func (g *Gateway) Timeout(name string) time.Duration { return g.timeout(name) }

// timeout is the invocation deadline of a route key or function name.
func (g *Gateway) timeout(name string) time.Duration {
	if d, ok := g.cfg.Timeouts[name]; ok && d > 0 {
		return d
	}
	return DefaultTimeout
}

// drain reads and discards at most n bytes so a keep-alive connection can be reused
// after an early error answer.
func drain(r io.Reader, n int64) { _, _ = io.CopyN(io.Discard, r, n) }
