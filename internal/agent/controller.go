package agent

import (
	"context"
	"errors"
)

// Controller serves the client frames other than subscribe. sessionID == agentID.
type Controller interface {
	// Inject queues text for the agent; with wake it also makes sure a turn runs.
	Inject(ctx context.Context, sessionID, text string, wake bool) error
	// Cancel asks the running turn to stop. It returns ErrNotRunning when no turn is open.
	Cancel(ctx context.Context, sessionID, reason string) error
	// Approve resolves a standing approval request. It returns ErrStaleCall when callID
	// has no standing request in the open turn, ErrUnsupported when approvals are not mounted.
	Approve(ctx context.Context, sessionID, callID string) error
	// Deny is Approve with the verdict denied.
	Deny(ctx context.Context, sessionID, callID, reason string) error
	// SetModel repoints a model role. It returns ErrBadSpec for an unknown role or spec.
	SetModel(ctx context.Context, sessionID, role, spec string) error
	// SetPolicy replaces the tool allow list; patterns are already validated.
	SetPolicy(ctx context.Context, sessionID string, patterns []string) error
}

// Errors of the Controller, mapped to protocol error codes by the message function.
var (
	ErrNotRunning  = errors.New("agent: no turn running")
	ErrStaleCall   = errors.New("agent: no standing approval request for call")
	ErrUnsupported = errors.New("agent: approvals are not mounted")
	ErrBadSpec     = errors.New("agent: invalid model role or spec")
)
