package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/socket"
)

// FramesPath is the path of a control frame posted over HTTP.
const FramesPath = "POST /agents/{agent_id}/frames"

// Guards builds the check a frame posted with a token is conditional on (auth.Store).
type Guards interface {
	// Condition holds only while hash is a current, unexpired token of agentID.
	Condition(agentID, hash string) types.TransactWriteItem
}

var _ Guards = (*auth.Store)(nil)

// Sessions creates an agent's log (sessionlog.Log), as $connect does, and fences a
// frame to the log it was read against.
type Sessions interface {
	// Create appends session/created at seq 0 unless the session exists.
	Create(ctx context.Context, agentID string) (bool, error)
	// Epoch is the log's epoch (seq 0's id), sessionlog.ErrNotFound without a log.
	Epoch(ctx context.Context, agentID string) (string, error)
	// EpochCheck holds only while the log is still the one of epoch.
	EpochCheck(agentID, epoch string) types.TransactWriteItem
}

var _ Sessions = (*sessionlog.Log)(nil)

// Accepted is the body of a frame's success answer (status 202).
type Accepted struct {
	Accepted bool `json:"accepted"`
}

// Frames serves POST /agents/{agent_id}/frames: the body is one control frame exactly
// as on the socket, applied through the socket's path (socket.Apply) with its codes
// (socket.CodeFor) and the contract's statuses; success is 202 {"accepted": true}.
// The body is bounded by protocol.MaxFrameBytes before it is decoded. The header
// Idempotency-Key is the frame's client_id (a client_id in the body too must be the
// same). An inject is queued only while the request's token is still current
// (guards.Condition, in the inbox write's transaction): a token revoked while the
// frame was handled applies nothing and is answered unauthorized. A valid frame for an
// agent whose log does not exist yet creates it first (sessions.Create), as a connect
// does: an agent may be driven over HTTP alone. The log's epoch is read before the
// frame is applied, and an inject is queued only while the log is still that one
// (sessions.EpochCheck, in the same transaction): an inject racing `terret session
// reset` is queued in the old session, which the reset then erases, or refused with
// internal (status 500, nothing applied; a resend with the same Idempotency-Key
// applies it to the new session), never queued for the new one, as a socket's frame
// is refused once a reset began. agent nil: every frame is unsupported.
func (s *Server) Frames(agent socket.Controller, guards Guards, sessions Sessions) {
	s.RouteDriver(FramesPath, func(w http.ResponseWriter, r *http.Request, c Caller) {
		code, msg := s.frame(r.Context(), r, c, agent, guards, sessions)
		if code != "" {
			WriteError(w, code, msg)
			return
		}
		WriteJSON(w, http.StatusAccepted, Accepted{Accepted: true})
	})
}

// frame applies the request's frame: the code and message of its refusal, or "".
func (s *Server) frame(ctx context.Context, r *http.Request, c Caller, agent socket.Controller, guards Guards, sessions Sessions) (protocol.Code, string) {
	key, hasKey := "", false
	if vs, ok := r.Header[http.CanonicalHeaderKey(protocol.IdempotencyKeyHeader)]; ok {
		if len(vs) != 1 {
			return protocol.CodeBadFrame, fmt.Sprintf("header %s: given %d times, at most once allowed", protocol.IdempotencyKeyHeader, len(vs))
		}
		key, hasKey = vs[0], true
		if p := protocol.ValidClientID(key); p != "" {
			return protocol.CodeBadFrame, fmt.Sprintf("header %s %s", protocol.IdempotencyKeyHeader, p)
		}
	}
	body, err := ReadBody(r, protocol.MaxFrameBytes)
	switch {
	case errors.Is(err, ErrBodyTooLarge):
		return protocol.CodeBadFrame, fmt.Sprintf("frame is over %d bytes, at most %d allowed", protocol.MaxFrameBytes, protocol.MaxFrameBytes)
	case err != nil:
		return protocol.CodeBadFrame, "frame could not be read: the request body ended early"
	}
	frame, meta, err := protocol.ParseMeta(body)
	if err != nil {
		var bf *protocol.BadFrameError
		if errors.As(err, &bf) {
			return protocol.CodeBadFrame, bf.Message
		}
		s.log.ErrorContext(ctx, "parse frame", "agent_id", c.AgentID, "error", err)
		return protocol.CodeInternal, "internal error"
	}
	if _, ok := frame.(protocol.Subscribe); ok {
		return protocol.CodeBadFrame, "subscribe is a socket frame: over HTTP, post a control frame (inject, cancel, approve, deny, set_model, set_policy)"
	}
	if hasKey && meta.ClientID != "" && meta.ClientID != key {
		return protocol.CodeBadFrame, fmt.Sprintf("%s: field %q differs from the header %s (the header is the frame's client_id)", frame.FrameType(), protocol.FieldClientID, protocol.IdempotencyKeyHeader)
	}
	if hasKey {
		meta.ClientID = key
	}
	f := control.Frame{ClientID: meta.ClientID}
	if agent != nil {
		epoch, err := s.epoch(ctx, c.AgentID, sessions)
		if err != nil {
			s.log.ErrorContext(ctx, "read or create session", "agent_id", c.AgentID, "error", err)
			return protocol.CodeInternal, "internal error"
		}
		check := sessions.EpochCheck(c.AgentID, epoch)
		f.Epoch = &check
	}
	guard := guards.Condition(c.AgentID, c.TokenHash)
	f.Guard = &guard
	ctx = control.WithFrame(ctx, f)
	err = socket.Apply(ctx, agent, c.AgentID, "", frame)
	if err == nil {
		s.log.InfoContext(ctx, "frame applied", "agent_id", c.AgentID, "frame", frame.FrameType())
		return "", ""
	}
	code, msg := socket.CodeFor(err)
	if code == protocol.CodeInternal && !errors.Is(err, sessionlog.ErrEpoch) {
		s.log.ErrorContext(ctx, "serve frame", "agent_id", c.AgentID, "frame", frame.FrameType(), "error", err)
	} else {
		s.log.InfoContext(ctx, "frame refused", "agent_id", c.AgentID, "frame", frame.FrameType(), "code", string(code))
	}
	return code, msg
}

// epoch reads agentID's log's epoch, creating the log first when there is none. Cost:
// 1 read unit (a strongly consistent read of seq 0); for a new log, the put of its
// seq 0 and 1 read unit more.
func (s *Server) epoch(ctx context.Context, agentID string, sessions Sessions) (string, error) {
	epoch, err := sessions.Epoch(ctx, agentID)
	if !errors.Is(err, sessionlog.ErrNotFound) {
		return epoch, err
	}
	if _, err := sessions.Create(ctx, agentID); err != nil {
		return "", err
	}
	return sessions.Epoch(ctx, agentID)
}
