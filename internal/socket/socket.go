// Package socket serves the WebSocket API's three routes — $connect, $default and
// $disconnect — as the connect, message and disconnect functions. Each handler decodes
// the API Gateway event and makes one call into the package that owns the concept.
package socket

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/metrics"
	"github.com/terret/terret-ws/internal/protocol"
)

// Controller serves the client frames other than subscribe; package agent implements
// it (agent.Service; internal/service/agentservice asserts it).
// Its errors are agent's sentinels (package agent/control, which socket imports instead
// of the runtime), mapped to protocol codes by codeFor.
type Controller interface {
	// InjectFrom queues text for the agent; with wake it also makes sure a turn runs.
	// The queueing is conditional on connID still owning the agent (the agent's state
	// item naming it, written by Connect's claim: Server.WithOwnerClaim):
	// agent.ErrNotOwner when it no longer does, and nothing is queued.
	InjectFrom(ctx context.Context, agentID, text string, wake bool, connID string) error
	// Cancel asks the running turn to stop. It returns agent.ErrNotRunning when no
	// turn is open.
	Cancel(ctx context.Context, agentID, reason string) error
	// Approve resolves a standing approval request. It returns agent.ErrStaleCall when
	// callID has no standing request in the open turn, agent.ErrUnsupported when
	// approvals are not mounted.
	Approve(ctx context.Context, agentID, callID string) error
	// Deny is Approve with the verdict denied.
	Deny(ctx context.Context, agentID, callID, reason string) error
	// SetModel repoints a model role. It returns agent.ErrBadSpec for an unknown role
	// or spec.
	SetModel(ctx context.Context, agentID, role, spec string) error
	// SetPolicy replaces the tool allow list; patterns are already validated.
	SetPolicy(ctx context.Context, agentID string, patterns []string) error
}

// Outbound is the routes' one path to a client: every frame a route makes a client
// receive, and every close, goes through it. Package delivery implements it
// (delivery.Deliverer) and decides there what the protocol orders — nothing before
// hello, an error frame before a close, and an asynchronous deliver invocation where a
// route cannot post (during $connect) or failed to — so a route only says what
// happened. Its methods' contracts and costs are delivery's.
type Outbound interface {
	// Welcome: $connect took the agent over from superseded (zero: nobody). An error
	// means no hello will be sent, and the handshake is refused.
	Welcome(ctx context.Context, agentID string, superseded connections.Owner) error
	// TurnAway: $connect refused connID's token. An error means the client would not
	// be told, and the handshake is refused instead.
	TurnAway(ctx context.Context, connID string) error
	// SubscribeFrame applies a subscribe frame; recorded is called once it has taken
	// effect, before the replay.
	SubscribeFrame(ctx context.Context, c connections.Conn, f protocol.Subscribe, recorded func()) error
	// Reply answers a frame with an error frame that leaves the connection open.
	Reply(ctx context.Context, c connections.Conn, f protocol.Error) error
	// Refuse answers a frame from a connection that may send none, and closes it.
	Refuse(ctx context.Context, connID string, code protocol.Code) error
	// Fail answers an unexpected error: internal, and the close.
	Fail(ctx context.Context, connID string) error
}

// Server holds the routes' dependencies, each an interface declared in this package
// (deps.go, turnstile.go); internal/service wires the concrete ones.
type Server struct {
	tokens Tokens
	conns  Conns
	turns  Turnstile
	log    SessionLog
	out    Outbound
	agent  Controller // nil: the runtime is not mounted, agent frames answer unsupported
	logger *slog.Logger
	origin []byte // RequireOrigin's secret; nil: no check
	// maxObservers bounds an agent's observer connections (WithMaxObservers).
	maxObservers int
	// ownerClaim, if set, is the agent's write Connect makes in its claim transaction
	// (WithOwnerClaim).
	ownerClaim func(agentID, connID string) types.TransactWriteItem
}

// OriginHeader is the header CloudFront adds to every request it forwards when the
// stack has an OriginSecret (template.yaml, docs/security.md).
const OriginHeader = "X-Terret-Origin"

// RequireOrigin makes Connect refuse with 403 a handshake whose OriginHeader is not
// secret ("": no check), before it reads or writes anything: one invocation is all a
// client that bypasses CloudFront costs.
func (s *Server) RequireOrigin(secret string) {
	s.origin = nil
	if secret != "" {
		s.origin = []byte(secret)
	}
}

// New returns a Server over the token store, the connection records (whose order
// records the frame-order turnstile keeps), the log and the way out. agent may be nil.
func New(tokens Tokens, conns Records, log SessionLog, out Outbound, agent Controller, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	return &Server{tokens: tokens, conns: conns, turns: &orderTurnstile{records: conns, wait: OrderWait},
		log: log, out: out, agent: agent, logger: logger}
}

// WithOrderWait sets how long a numbered frame waits for its predecessor (default
// OrderWait) and returns s; call it before serving. Tests shorten it to see a gap's
// outcome without waiting ten seconds.
func (s *Server) WithOrderWait(d time.Duration) *Server {
	if t, ok := s.turns.(*orderTurnstile); ok {
		t.wait = d
	}
	return s
}

// WithOwnerClaim makes Connect write w(agentID, connID) in the transaction that makes
// the connection the agent's owner (agent.OwnerClaim: the agent's state item names the
// connection, which every inject frame's inbox write is conditional on), and returns s;
// call it before serving. Every deployment with the agent runtime sets it.
func (s *Server) WithOwnerClaim(w func(agentID, connID string) types.TransactWriteItem) *Server {
	s.ownerClaim = w
	return s
}

var ok = events.APIGatewayProxyResponse{StatusCode: http.StatusOK}

func (s *Server) logFor(ctx context.Context, connID string) *slog.Logger {
	l := s.logger.With("connection_id", connID)
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		l = l.With("request_id", lc.AwsRequestID)
	}
	return l
}

// ViewerAddressHeader is the header CloudFront adds with the viewer's address and port
// when the origin request policy forwards it (template.yaml's
// WebSocketOriginRequestPolicy does): behind CloudFront the handshake's source IP is an
// edge server's, this the client's
// (https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/adding-cloudfront-headers.html).
const ViewerAddressHeader = "CloudFront-Viewer-Address"

// withSource adds to a $connect's log lines where the handshake came from: source_ip,
// the address API Gateway saw, and viewer_address, the client's address behind
// CloudFront. A client on the raw URL may send the header itself; with an origin
// secret only CloudFront reaches this far, and CloudFront sets it.
func withSource(lg *slog.Logger, req events.APIGatewayWebsocketProxyRequest) *slog.Logger {
	lg = lg.With("source_ip", req.RequestContext.Identity.SourceIP)
	if v := header(req, ViewerAddressHeader); v != "" {
		lg = lg.With("viewer_address", v)
	}
	return lg
}

// header returns the first value of header name, matched case-insensitively.
func header(req events.APIGatewayWebsocketProxyRequest, name string) string {
	for k, v := range req.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	for k, v := range req.MultiValueHeaders {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// usedWait bounds how long $connect waits for the token's last-use write before it
// kicks hello's deliver invocation: a few DynamoDB round trips.
const usedWait = 200 * time.Millisecond

// Connect serves $connect. The token is checked before the agent is resolved. A refused
// client is still accepted — API Gateway can deliver no frame during $connect — and the
// deliver function then sends it the unauthorized frame and closes it. An accepted one
// takes over the agent (superseding the previous connection) and is sent hello by the
// deliver function once $connect has returned.
func (s *Server) Connect(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	connID := req.RequestContext.ConnectionID
	agentID := req.QueryStringParameters["agent_id"]
	lg := withSource(s.logFor(ctx, connID).With("agent_id", agentID), req)
	if !s.fromOrigin(req) {
		lg.Warn("connection without the origin header") // never the header's value
		metrics.Add("OriginRefused", metrics.Count, 1)
		return events.APIGatewayProxyResponse{StatusCode: http.StatusForbidden}, nil
	}
	token, accepted := handshake(req)
	hash, role, err := s.tokens.CheckRole(ctx, agentID, token)
	if err != nil {
		return s.connectFailed(ctx, lg, connID, accepted, err)
	}
	if role == auth.RoleObserver {
		return s.observe(ctx, lg, agentID, connID, hash, accepted)
	}
	if _, err := s.log.Create(ctx, agentID); err != nil {
		return s.connectFailed(ctx, lg, connID, accepted, err)
	}
	superseded, err := s.claim(ctx, agentID, connID, hash)
	if err != nil {
		return s.connectFailed(ctx, lg, connID, accepted, err)
	}
	return s.welcome(ctx, lg, agentID, hash, superseded, accepted)
}

// fromOrigin reports whether req passed RequireOrigin's check (true when there is none).
func (s *Server) fromOrigin(req events.APIGatewayWebsocketProxyRequest) bool {
	return s.origin == nil || subtle.ConstantTimeCompare([]byte(header(req, OriginHeader)), s.origin) == 1
}

// handshake returns the token a $connect offers and the answer that accepts it.
func handshake(req events.APIGatewayWebsocketProxyRequest) (token string, accepted events.APIGatewayProxyResponse) {
	token = auth.BearerToken(header(req, "Authorization"))
	offered := header(req, "Sec-WebSocket-Protocol")
	accepted = ok
	if token == "" {
		// Browsers cannot set Authorization on a WebSocket: they offer the token as a
		// subprotocol, and are answered with the fixed protocol name, never the token.
		if tok, found := auth.SubprotocolToken(offered); found {
			token = tok
			accepted = events.APIGatewayProxyResponse{StatusCode: http.StatusOK,
				Headers: map[string]string{"Sec-WebSocket-Protocol": auth.Subprotocol}}
		}
	}
	if accepted.Headers == nil && auth.OffersSubprotocol(offered) {
		// A client that offers terret.v1 aborts a handshake that does not echo it,
		// however it authenticates (RFC 6455 §4.1).
		accepted = events.APIGatewayProxyResponse{StatusCode: http.StatusOK,
			Headers: map[string]string{"Sec-WebSocket-Protocol": auth.Subprotocol}}
	}
	return token, accepted
}

// claim makes connID agentID's owner, conditional on the token hash still being
// current, with the agent's own claim (WithOwnerClaim) in the same transaction.
func (s *Server) claim(ctx context.Context, agentID, connID, hash string) (connections.Owner, error) {
	var also []types.TransactWriteItem
	if s.ownerClaim != nil {
		also = append(also, s.ownerClaim(agentID, connID))
	}
	return s.conns.Claim(ctx, agentID, connID, hash, s.tokens.Condition(agentID, hash).ConditionCheck, also...)
}

// welcome ends an accepted driver's $connect: the token's use is recorded and the
// hello kicked (Outbound.Welcome).
func (s *Server) welcome(ctx context.Context, lg *slog.Logger, agentID, hash string, superseded connections.Owner, accepted events.APIGatewayProxyResponse) (events.APIGatewayProxyResponse, error) {
	// The token's last use is written before the welcome, whose hello kick is then
	// $connect's last step: hello's deliver invocation posts while $connect is still
	// running only for as long as the kick takes to answer, and its first post usually
	// finds the socket open (docs/architecture.md, "First frame and Gone"). Written
	// alongside the kick, the write held $connect open behind it, and under load
	// hello's posts met Gone and backed off. A write slower than usedWait no longer
	// holds the kick back: it only records a use (`terret token list`).
	used := make(chan error, 1)
	go func() { used <- s.tokens.Used(ctx, agentID, hash) }()
	select {
	case uerr := <-used:
		used <- uerr
	case <-time.After(usedWait):
	}
	if superseded.ConnID != "" {
		lg.Info("superseding connection", "superseded_connection_id", superseded.ConnID)
	}
	if err := s.out.Welcome(ctx, agentID, superseded); err != nil {
		lg.Error("welcome", "error", err)
		internalAnswer()
		return events.APIGatewayProxyResponse{StatusCode: http.StatusInternalServerError}, nil
	}
	if uerr := <-used; uerr != nil {
		lg.Warn("record token use", "error", uerr) // `terret token list` only
	}
	lg.Info("connected")
	metrics.Add("Connections", metrics.Count, 1)
	return accepted, nil
}

// connectFailed answers a driver's $connect that err stopped: a refused token is
// turned away, anything else refuses the handshake with 500.
func (s *Server) connectFailed(ctx context.Context, lg *slog.Logger, connID string, accepted events.APIGatewayProxyResponse, err error) (events.APIGatewayProxyResponse, error) {
	if !errors.Is(err, auth.ErrUnauthorized) && !errors.Is(err, connections.ErrTokenGone) {
		lg.Error("connect", "error", err)
		internalAnswer()
		return events.APIGatewayProxyResponse{StatusCode: http.StatusInternalServerError}, nil
	}
	return s.turnAway(ctx, lg, connID, accepted)
}

// turnAway accepts a refused client's handshake — API Gateway can deliver no frame
// during $connect — and has the deliver function send it unauthorized and close it.
// No record of the refused socket is written: a frame it sends before the drop finds
// no connection record and is refused as unauthorized all the same, and $disconnect
// finds nothing to delete and records the departure instead (docs/security.md, "What a
// refused connection costs").
func (s *Server) turnAway(ctx context.Context, lg *slog.Logger, connID string, accepted events.APIGatewayProxyResponse) (events.APIGatewayProxyResponse, error) {
	lg.Warn("unauthorized connection")
	metrics.Add("RefusedConnections", metrics.Count, 1)
	if err := s.out.TurnAway(ctx, connID); err != nil {
		// Without the asynchronous drop the client would hang: refuse the handshake.
		lg.Error("turn away", "error", err)
		internalAnswer()
		return events.APIGatewayProxyResponse{StatusCode: http.StatusUnauthorized}, nil
	}
	return accepted, nil
}

// Disconnect serves $disconnect: it forgets the connection. It never touches a turn —
// the agent's life is independent of the socket. API Gateway calls it best-effort; a
// GoneException on a later post cleans up as well. A connection without a record (one
// refused at connect) gets a departure record instead (connections.Store.Depart), so
// that a deliver invocation still posting its unauthorized frame stops now rather than
// at the end of the hello grace (docs/security.md, "What a refused connection costs").
func (s *Server) Disconnect(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	connID := req.RequestContext.ConnectionID
	lg := s.logFor(ctx, connID)
	c, err := s.conns.Conn(ctx, connID)
	if errors.Is(err, connections.ErrNotFound) {
		if err := s.conns.Depart(ctx, connID); err != nil {
			lg.Error("disconnect", "error", err)
			return events.APIGatewayProxyResponse{StatusCode: http.StatusInternalServerError}, nil
		}
		lg.Info("disconnected without a record")
		return ok, nil
	}
	if err == nil {
		err = s.conns.Forget(ctx, connID, c.Key())
	}
	if err != nil {
		lg.Error("disconnect", "error", err)
		return events.APIGatewayProxyResponse{StatusCode: http.StatusInternalServerError}, nil
	}
	lg.Info("disconnected", "agent_id", c.AgentID)
	return ok, nil
}

// Message serves $default: every client frame.
func (s *Server) Message(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	connID := req.RequestContext.ConnectionID
	lg := s.logFor(ctx, connID)
	c, err := s.conns.Conn(ctx, connID)
	switch {
	case errors.Is(err, connections.ErrNotFound):
		s.refuse(ctx, lg, connID, protocol.CodeUnauthorized)
		return ok, nil
	case err != nil:
		lg.Error("look up connection", "error", err)
		s.fail(ctx, lg, connID)
		return ok, nil
	case c.State != connections.StateAuthorized:
		s.refuse(ctx, lg, connID, refusalFor(c.State))
		return ok, nil
	}
	lg = lg.With("agent_id", c.AgentID)
	body := []byte(req.Body)
	if req.IsBase64Encoded {
		// Binary frames are not JSON text frames.
		s.reply(ctx, lg, c, protocol.NewError(protocol.CodeBadFrame, "frames must be JSON text frames"))
		return ok, nil
	}
	frame, meta, err := protocol.ParseMeta(body)
	order := meta.Order
	stamp := protocol.Stamp{At: req.RequestContext.RequestTimeEpoch, Order: order}
	if stamp.At <= 0 {
		stamp.At = time.Now().UnixMilli()
	}
	taken := func() {}
	if order > 0 {
		turn, passed := s.takeTurn(ctx, lg, c, stamp)
		if !passed {
			return ok, nil
		}
		defer turn.Leave()
		defer turn.Taken()
		c, stamp.InOrder, taken = turn.Conn, turn.InOrder, turn.Taken
	}
	ctx = protocol.WithStamp(ctx, stamp)
	if meta.ClientID != "" {
		ctx = control.WithFrame(ctx, control.Frame{ClientID: meta.ClientID})
	}
	if err != nil {
		var bf *protocol.BadFrameError
		if errors.As(err, &bf) {
			s.reply(ctx, lg, c, bf.Frame())
			return ok, nil
		}
		lg.Error("parse frame", "error", err)
		s.fail(ctx, lg, connID)
		return ok, nil
	}
	lg = lg.With("frame", frame.FrameType())
	if err := s.serve(ctx, c, frame, taken); err != nil {
		s.answer(ctx, lg, c, err)
	}
	return ok, nil
}

// takeTurn passes a numbered frame through the turnstile. passed false: the frame
// was answered — refused, or the connection closed — and applies nothing.
func (s *Server) takeTurn(ctx context.Context, lg *slog.Logger, c connections.Conn, st protocol.Stamp) (turn Turn, passed bool) {
	turn, err := s.turns.Enter(ctx, lg, c, st)
	switch {
	case errors.Is(err, ErrWaitFull):
		s.reply(ctx, lg, c, (&protocol.BadFrameError{FrameType: "frame", Field: protocol.FieldOrder,
			Message: fmt.Sprintf("order %d: %d frames of this connection already wait for an earlier order (a gap in the numbering?); this frame is not applied", st.Order, MaxWaitingFrames)}).Frame())
		return Turn{}, false
	case errors.Is(err, connections.ErrNotFound):
		// The connection closed while the frame waited (revoked, deleted, dropped):
		// it applies nothing.
		lg.Info("frame order wait: connection gone, frame not applied", "order", st.Order)
		s.refuse(ctx, lg, c.ID, protocol.CodeUnauthorized)
		return Turn{}, false
	case err != nil:
		lg.Error("frame order wait", "order", st.Order, "error", err)
		s.fail(ctx, lg, c.ID)
		return Turn{}, false
	case turn.Conn.State != connections.StateAuthorized:
		lg.Info("frame order wait: connection no longer authorized, frame not applied", "order", st.Order, "state", string(turn.Conn.State))
		s.refuse(ctx, lg, c.ID, refusalFor(turn.Conn.State))
		turn.Leave()
		return Turn{}, false
	}
	return turn, true
}

// answer answers a frame that serve refused with err: its code's error frame, or the
// close that code means.
func (s *Server) answer(ctx context.Context, lg *slog.Logger, c connections.Conn, err error) {
	code, msg := codeFor(err)
	switch code {
	case protocol.CodeInternal:
		if errors.Is(err, control.ErrNotOwner) {
			lg.Info("frame from a connection that lost the agent: not applied")
		} else {
			lg.Error("serve frame", "error", err)
		}
		s.fail(ctx, lg, c.ID)
	case protocol.CodeSuperseded, protocol.CodeUnauthorized:
		s.refuse(ctx, lg, c.ID, code)
	default:
		lg.Info("frame refused", "code", string(code))
		s.reply(ctx, lg, c, protocol.NewError(code, msg))
	}
}

// serve applies one frame. taken marks the frame's order as taken effect (the
// turnstile's next frame may go); it is also called when serve returns, but a
// subscribe calls it as soon as the subscription is recorded, before its replay.
func (s *Server) serve(ctx context.Context, c connections.Conn, frame protocol.ClientFrame, taken func()) error {
	if f, ok := frame.(protocol.Subscribe); ok {
		return s.out.SubscribeFrame(ctx, c, f, taken)
	}
	if c.Role == connections.RoleObserver {
		return ErrForbidden // nothing is appended; the connection stays open
	}
	return Apply(ctx, s.agent, c.AgentID, c.ID, frame)
}

// reply sends a protocol frame to an open connection, after hello: delivery owns that
// order (Outbound.Reply), and nothing here waits for hello.
func (s *Server) reply(ctx context.Context, lg *slog.Logger, c connections.Conn, f protocol.Error) {
	if err := s.out.Reply(ctx, c, f); err != nil {
		lg.Warn("reply", "error", err)
	}
}

// refuse answers a frame from a connection that may not send any — superseded,
// revoked, unauthorized or unknown — with code's refusal frame, and closes it.
// A superseded connection may not have had hello yet: delivery sends it first.
func (s *Server) refuse(ctx context.Context, lg *slog.Logger, connID string, code protocol.Code) {
	lg.Info("frame from a connection that may not send", "code", string(code))
	if err := s.out.Refuse(ctx, connID, code); err != nil {
		lg.Warn("refuse", "error", err)
	}
}

// refusalFor is the code a frame from a connection in state st is refused with: a
// superseded connection learns it was superseded; any other that may not send (never
// authorized, revoked, dropped as lagged) is unauthorized.
func refusalFor(st connections.State) protocol.Code {
	if st == connections.StateSuperseded {
		return protocol.CodeSuperseded
	}
	return protocol.CodeUnauthorized
}

// fail answers an unexpected error: internal, and the connection closes — after its
// hello, which delivery owns (Outbound.Fail), or from an asynchronous deliver invocation
// should that fail. The details stay in the log.
func (s *Server) fail(ctx context.Context, lg *slog.Logger, connID string) {
	internalAnswer()
	if err := s.out.Fail(ctx, connID); err != nil {
		lg.Error("answer internal error", "error", err)
	}
}

// internalAnswer counts one answer of internal — an error{internal} frame and the close,
// or a $connect refused with a 5xx or 401 for an unexpected failure — as the metric
// InternalErrors (dimension function). Such an answer is the function's success to
// Lambda (it returned) and to API Gateway (a message's route answered 200), so neither
// Errors nor IntegrationError counts it: a broken grant or a throttled table would go
// unseen but for this metric, which the InternalErrorsAlarm reads.
func internalAnswer() { metrics.Add("InternalErrors", metrics.Count, 1) }
