package socket

import (
	"context"
	"github.com/terret/terret-ws/internal/agent/control"

	"github.com/terret/terret-ws/internal/protocol"
)

// Apply applies one control frame (any but subscribe) of agentID through agent: the
// socket's frames and those posted over HTTP (package httpapi) take this one path, and
// its errors become codes in CodeFor alone. connID is the socket connection an inject
// is conditional on owning the agent ("" over HTTP, where the frame's control.Frame
// guard in ctx fences it instead). A nil agent, or a subscribe, is ErrUnsupported.
func Apply(ctx context.Context, agent Controller, agentID, connID string, frame protocol.ClientFrame) error {
	if agent == nil {
		return ErrUnsupported
	}
	// A frame's expect_seq precondition travels in ctx to the frame methods, which
	// check it (control.WithExpect): a frame without one is served as before.
	ctx = control.WithExpect(ctx, protocol.Expecting(frame))
	switch f := frame.(type) {
	case protocol.Inject:
		return agent.InjectFrom(ctx, agentID, f.Text, f.Wake, connID)
	case protocol.Cancel:
		return agent.Cancel(ctx, agentID, f.Reason)
	case protocol.Approve:
		return agent.Approve(ctx, agentID, f.CallID)
	case protocol.Deny:
		return agent.Deny(ctx, agentID, f.CallID, f.Reason)
	case protocol.SetModel:
		return agent.SetModel(ctx, agentID, f.Role, f.Spec)
	case protocol.SetPolicy:
		return agent.SetPolicy(ctx, agentID, f.Patterns)
	}
	return ErrUnsupported
}

// CodeFor is the protocol code and client message of an error from Apply (codeFor).
func CodeFor(err error) (protocol.Code, string) { return codeFor(err) }
