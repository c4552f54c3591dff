package agent

import "errors"

// Errors of Service's frame methods (socket.Controller), mapped to protocol error codes
// by the message function.
var (
	ErrNotRunning  = errors.New("agent: no turn running")
	ErrStaleCall   = errors.New("agent: no standing approval request for call")
	ErrUnsupported = errors.New("agent: approvals are not mounted")
	ErrBadSpec     = errors.New("agent: invalid model role or spec")
)
