// Package httpapi serves the agent paths over plain HTTP, beside the WebSocket on the
// same host (docs/protocol.md, "HTTP"): POST /agents/{agent_id}/frames, the log at
// GET /agents/{agent_id}/events, and the schedules. Every path checks the bearer token
// before the agent is resolved, as $connect does, and every error answer's body is
// exactly the error frame the socket would send, with the status of statusFor.
//
// A feature adds its paths with Server.Route in its own file of this package; Server
// holds the authentication, the error answers and the body bound they share. The same
// Server is served by terret dev's gateway (localgw.Config.HTTP) and, on AWS, by the
// http function behind a Lambda function URL.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/protocol"
)

// Tokens checks a bearer token of an agent (auth.Store).
type Tokens interface {
	// CheckRole returns the token's hash and role (auth.RoleDriver or
	// auth.RoleObserver) if token is a current token of agentID, else an error
	// wrapping auth.ErrUnauthorized.
	CheckRole(ctx context.Context, agentID, token string) (hash, role string, err error)
}

var _ Tokens = (*auth.Store)(nil)

// Caller is who an authenticated request comes from.
type Caller struct {
	AgentID   string // the path's agent id, the token's agent
	TokenHash string // the token's hash (auth.Hash); never the token
	Role      string // the token's role: auth.RoleDriver or auth.RoleObserver
}

// HandlerFunc serves one authenticated request.
type HandlerFunc func(w http.ResponseWriter, r *http.Request, c Caller)

// Server routes the agent paths.
type Server struct {
	mux    *http.ServeMux
	tokens Tokens
	log    *slog.Logger
	bell   *Bell // appends to the log this process learns of (events.go)
}

// New returns a Server with no paths; features add theirs with Route.
func New(tokens Tokens, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Server{mux: http.NewServeMux(), tokens: tokens, log: logger, bell: NewBell()}
}

// Route serves pattern (a net/http pattern with a method and {agent_id}, such as
// "POST /agents/{agent_id}/frames") with h, after the bearer token was checked against
// the path's agent: a missing, bad, revoked or expired token is answered 401
// unauthorized and h is not called.
func (s *Server) Route(pattern string, h HandlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		agentID := r.PathValue("agent_id")
		token := auth.BearerToken(r.Header.Get("Authorization"))
		hash, role, err := s.tokens.CheckRole(r.Context(), agentID, token)
		switch {
		case errors.Is(err, auth.ErrUnauthorized):
			WriteError(w, protocol.CodeUnauthorized, protocol.Refusal(protocol.CodeUnauthorized).Message)
			return
		case err != nil:
			s.log.ErrorContext(r.Context(), "check token", "agent_id", agentID, "path", r.URL.Path, "error", err)
			WriteError(w, protocol.CodeInternal, "internal error")
			return
		}
		h(w, r, Caller{AgentID: agentID, TokenHash: hash, Role: role})
	})
}

// RouteDriver is Route for the paths that act on the agent (frames, schedules): an
// observer's token is answered 403 forbidden and h is not called.
func (s *Server) RouteDriver(pattern string, h HandlerFunc) {
	s.Route(pattern, func(w http.ResponseWriter, r *http.Request, c Caller) {
		if c.Role == auth.RoleObserver {
			WriteError(w, protocol.CodeForbidden, "an observer token reads the agent's log and nothing else")
			return
		}
		h(w, r, c)
	})
}

// Bell is rung by whatever learns of appends to an agent's log in this process (terret
// dev's log stream poller); the events path's waiting readers listen to it.
func (s *Server) Bell() *Bell { return s.bell }

// Logger is the server's logger, for the features' handlers.
func (s *Server) Logger() *slog.Logger { return s.log }

// ServeHTTP serves the routes; any other path or method is 404 or 405 with an error
// frame body.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := s.mux.Handler(r); pattern == "" {
		WriteError(w, protocol.CodeBadFrame, "no such path or method: "+r.Method+" "+r.URL.Path)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// statusFor is the HTTP status of an error code (the contract's table in
// docs/protocol.md): the one place codes become statuses.
func statusFor(code protocol.Code) int {
	switch code {
	case protocol.CodeUnauthorized:
		return http.StatusUnauthorized
	case protocol.CodeForbidden:
		return http.StatusForbidden
	case protocol.CodeBadFrame:
		return http.StatusBadRequest
	case protocol.CodeNotRunning, protocol.CodeStaleCall, protocol.CodeStale:
		return http.StatusConflict
	case protocol.CodeUnsupported:
		return http.StatusNotImplemented
	default:
		return http.StatusInternalServerError
	}
}

// WriteError answers with the error frame the socket would send and its status.
func WriteError(w http.ResponseWriter, code protocol.Code, msg string) {
	WriteJSON(w, statusFor(code), protocol.NewError(code, msg))
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"type":"error","code":"internal","message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// ErrBodyTooLarge is ReadBody's error for a body over its bound.
var ErrBodyTooLarge = errors.New("httpapi: body too large")

// ReadBody reads at most max bytes of r's body; a longer body is ErrBodyTooLarge,
// found before any of it is decoded (at most max+1 bytes are read).
func ReadBody(r *http.Request, max int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, ErrBodyTooLarge
	}
	return b, nil
}
