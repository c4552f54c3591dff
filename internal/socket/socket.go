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
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/metrics"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// Controller serves the client frames other than subscribe; package agent implements
// it (agent.Service; internal/service/agentservice asserts it). sessionID == agentID.
// Its errors are agent's sentinels (package agent/control, which socket imports instead
// of the runtime), mapped to protocol codes by codeFor.
type Controller interface {
	// InjectFrom queues text for the agent; with wake it also makes sure a turn runs.
	// The queueing is conditional on connID still owning the agent (the agent's state
	// item naming it, written by Connect's claim: Server.WithOwnerClaim):
	// agent.ErrNotOwner when it no longer does, and nothing is queued.
	InjectFrom(ctx context.Context, sessionID, text string, wake bool, connID string) error
	// Cancel asks the running turn to stop. It returns agent.ErrNotRunning when no
	// turn is open.
	Cancel(ctx context.Context, sessionID, reason string) error
	// Approve resolves a standing approval request. It returns agent.ErrStaleCall when
	// callID has no standing request in the open turn, agent.ErrUnsupported when
	// approvals are not mounted.
	Approve(ctx context.Context, sessionID, callID string) error
	// Deny is Approve with the verdict denied.
	Deny(ctx context.Context, sessionID, callID, reason string) error
	// SetModel repoints a model role. It returns agent.ErrBadSpec for an unknown role
	// or spec.
	SetModel(ctx context.Context, sessionID, role, spec string) error
	// SetPolicy replaces the tool allow list; patterns are already validated.
	SetPolicy(ctx context.Context, sessionID string, patterns []string) error
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

var _ Outbound = (*delivery.Deliverer)(nil)

// SessionLog is the part of the log the routes use.
type SessionLog interface {
	Create(ctx context.Context, sessionID string) (bool, error)
}

var _ SessionLog = (*sessionlog.Log)(nil)

// Server holds the routes' dependencies.
type Server struct {
	tokens *auth.Store
	conns  *connections.Store
	log    SessionLog
	out    Outbound
	agent  Controller // nil: the runtime is not mounted, agent frames answer unsupported
	logger *slog.Logger
	origin []byte // RequireOrigin's secret; nil: no check
	// orderWait bounds the order turnstile's wait (OrderWait unless WithOrderWait).
	orderWait time.Duration
	// maxObservers bounds an agent's observer connections (WithMaxObservers).
	maxObservers int
	// ownerClaim, if set, is the agent's write Connect makes in its claim transaction
	// (WithOwnerClaim).
	ownerClaim func(agentID, connID string) types.TransactWriteItem
	// waiting, if set, is called with the order of each frame that enters the
	// turnstile's wait (for tests).
	waiting func(order int64)
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

// New returns a Server. agent may be nil.
func New(tokens *auth.Store, conns *connections.Store, log SessionLog, out Outbound, agent Controller, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	return &Server{tokens: tokens, conns: conns, log: log, out: out, agent: agent, logger: logger, orderWait: OrderWait}
}

// WithOrderWait sets how long a numbered frame waits for its predecessor (default
// OrderWait) and returns s; call it before serving. Tests shorten it to see a gap's
// outcome without waiting ten seconds.
func (s *Server) WithOrderWait(d time.Duration) *Server {
	s.orderWait = d
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
	lg := s.logFor(ctx, connID).With("agent_id", agentID)
	lg = withSource(lg, req)
	if s.origin != nil && subtle.ConstantTimeCompare([]byte(header(req, OriginHeader)), s.origin) != 1 {
		lg.Warn("connection without the origin header") // never the header's value
		metrics.Add("OriginRefused", metrics.Count, 1)
		return events.APIGatewayProxyResponse{StatusCode: http.StatusForbidden}, nil
	}
	token := auth.BearerToken(header(req, "Authorization"))
	offered := header(req, "Sec-WebSocket-Protocol")
	accepted := ok
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
	hash, role, err := s.tokens.CheckRole(ctx, agentID, token)
	if err == nil && role == auth.RoleObserver {
		return s.observe(ctx, lg, agentID, connID, hash, accepted)
	}
	if err == nil {
		_, err = s.log.Create(ctx, agentID)
		if err == nil {
			var superseded connections.Owner
			var also []types.TransactWriteItem
			if s.ownerClaim != nil {
				also = append(also, s.ownerClaim(agentID, connID))
			}
			superseded, err = s.conns.Claim(ctx, agentID, connID, hash, s.tokens.Condition(agentID, hash).ConditionCheck, also...)
			if err == nil {
				// The token's last use is written before the welcome, whose hello kick is
				// then $connect's last step: hello's deliver invocation posts while
				// $connect is still running only for as long as the kick takes to
				// answer, and its first post usually finds the socket open
				// (docs/architecture.md, "First frame and Gone"). Written alongside the
				// kick, the write held $connect open behind it, and under load hello's
				// posts met Gone and backed off. A write slower than usedWait no longer
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
		}
	}
	if !errors.Is(err, auth.ErrUnauthorized) && !errors.Is(err, connections.ErrTokenGone) {
		lg.Error("connect", "error", err)
		internalAnswer()
		return events.APIGatewayProxyResponse{StatusCode: http.StatusInternalServerError}, nil
	}
	// No record of the refused socket is written: a frame it sends before the drop finds
	// no connection record and is refused as unauthorized all the same, and $disconnect
	// finds nothing to delete and records the departure instead (docs/security.md,
	// "What a refused connection costs").
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
		if c.Order < order-1 {
			// It would wait: at most MaxWaitingFrames of a connection do, so a gap in
			// the numbering cannot hold more than that many handlers.
			entered, werr := s.conns.EnterWait(ctx, connID, MaxWaitingFrames)
			switch {
			case werr != nil:
				lg.Error("enter frame order wait", "order", order, "error", werr)
				s.fail(ctx, lg, connID)
				return ok, nil
			case !entered:
				lg.Info("frame order wait full: frame refused", "order", order, "done", c.Order)
				s.reply(ctx, lg, c, (&protocol.BadFrameError{FrameType: "frame", Field: protocol.FieldOrder,
					Message: fmt.Sprintf("order %d: %d frames of this connection already wait for an earlier order (a gap in the numbering?); this frame is not applied", order, MaxWaitingFrames)}).Frame())
				return ok, nil
			}
			defer func() {
				if err := s.conns.LeaveWait(context.WithoutCancel(ctx), connID); err != nil {
					lg.Warn("leave frame order wait", "order", order, "error", err)
				}
			}()
			if s.waiting != nil {
				s.waiting(order)
			}
		}
		inOrder, cur, werr := s.awaitTurn(ctx, lg, c, stamp)
		switch {
		case errors.Is(werr, connections.ErrNotFound):
			// The connection closed while the frame waited (revoked, deleted,
			// dropped): it applies nothing.
			lg.Info("frame order wait: connection gone, frame not applied", "order", order)
			s.refuse(ctx, lg, connID, protocol.CodeUnauthorized)
			return ok, nil
		case werr != nil:
			lg.Error("frame order wait", "order", order, "error", werr)
			s.fail(ctx, lg, connID)
			return ok, nil
		case cur.State != connections.StateAuthorized:
			lg.Info("frame order wait: connection no longer authorized, frame not applied", "order", order, "state", string(cur.State))
			s.refuse(ctx, lg, connID, refusalFor(cur.State))
			return ok, nil
		}
		c, stamp.InOrder = cur, inOrder
		taken = sync.OnceFunc(func() {
			if err := s.conns.MarkOrder(context.WithoutCancel(ctx), connID, order); err != nil {
				lg.Warn("mark frame order", "order", order, "error", err)
			}
		})
		defer taken()
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
		code, msg := codeFor(err)
		switch code {
		case protocol.CodeInternal:
			if errors.Is(err, control.ErrNotOwner) {
				lg.Info("frame from a connection that lost the agent: not applied")
			} else {
				lg.Error("serve frame", "error", err)
			}
			s.fail(ctx, lg, connID)
		case protocol.CodeSuperseded, protocol.CodeUnauthorized:
			s.refuse(ctx, lg, connID, code)
		default:
			lg.Info("frame refused", "code", string(code))
			s.reply(ctx, lg, c, protocol.NewError(code, msg))
		}
	}
	return ok, nil
}

// OrderWait is the default bound (Server.WithOrderWait) on how long a numbered frame
// waits for its predecessor (its order minus one) to take effect, counted from the
// frame's receipt. A predecessor that never came (a gap) or whose handler failed holds
// its successors up this long at most; they then take effect without the guarantee.
// Each waiting frame holds its handler (a Lambda invocation) that long: three seconds
// leave a predecessor slowed by a cold start or a few DynamoDB retries room to finish
// while keeping what a gap costs small.
const OrderWait = 3 * time.Second

// MaxWaitingFrames bounds the frames of one connection waiting in the turnstile at
// once (connections.Store.EnterWait: 1 write unit to enter, 1 to leave, only for a
// frame that finds its predecessor not yet taken effect). A frame beyond it is
// answered bad_frame at once and not applied, so a gap in a client's numbering holds
// at most this many handlers for at most OrderWait. Sixteen leaves room for a burst
// of numbered frames sent back to back, each waiting for the one before.
const MaxWaitingFrames = 16

// awaitTurn is the per-connection turnstile: it returns once the frame before st (by
// order) has taken effect on c — true — or, false, once the order wait (OrderWait by
// default) has passed since st's receipt. A frame whose order is not above the last
// mark (a duplicate, or one that came after its successor gave up waiting) does not
// wait. The first look reuses the connection record Message read; each further look is
// one strongly consistent read (1 read unit), paced 2, 4, … up to 32 ms apart times the
// frames still ahead of this one (turnPace): a frame deep in a burst looks rarely, so a
// burst of n numbered frames costs on the order of n·log n looks rather than n².
//
// It also returns the connection's record as last read, which the caller checks
// again before the frame applies anything: a frame that waited must not outlive its
// connection's access (docs/security.md, "Parked frames"). A look that finds the record
// gone returns connections.ErrNotFound and one that finds it no longer authorized stops
// waiting at once. No look is added for it: each pause ends at the deadline at the
// latest and is followed by a look, so the record returned is the one read last, at or
// after the deadline (or Message's own read, for a frame handled after it). Any other
// read error, or ctx done, is returned as it is.
func (s *Server) awaitTurn(ctx context.Context, lg *slog.Logger, c connections.Conn, st protocol.Stamp) (bool, connections.Conn, error) {
	deadline := time.UnixMilli(st.At).Add(s.orderWait)
	pause := 2 * time.Millisecond
	for {
		if c.State != connections.StateAuthorized {
			return false, c, nil
		}
		if c.Order >= st.Order-1 {
			return c.Order == st.Order-1, c, nil
		}
		if !time.Now().Before(deadline) {
			lg.Info("frame order gap: served without its predecessor", "order", st.Order, "done", c.Order)
			return false, c, nil
		}
		t := time.NewTimer(min(pause, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, c, ctx.Err()
		case <-t.C:
		}
		cur, err := s.conns.Conn(ctx, c.ID)
		if err != nil {
			return false, c, err
		}
		c = cur
		pause = turnPace(pause, st.Order-1-c.Order)
	}
}

// turnPace is the pause before the turnstile's next look: double the last, at most
// 32 ms per frame still to take effect before this one (ahead), and never over a second.
// The frame just before this one is looked for every 32 ms at most, as each frame
// ahead takes at least a handler's few requests to take effect.
func turnPace(last time.Duration, ahead int64) time.Duration {
	limit := 32 * time.Millisecond * time.Duration(max(ahead, 1))
	return min(2*last, limit, time.Second)
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
