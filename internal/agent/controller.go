package agent

import "github.com/terret/terret-ws/internal/agent/control"

// Errors of Service's frame methods (socket.Controller), mapped to protocol error codes
// by the message function. They live in package control, which the routes import
// without the runtime; these are the same values.
var (
	ErrNotRunning  = control.ErrNotRunning
	ErrStaleCall   = control.ErrStaleCall
	ErrUnsupported = control.ErrUnsupported
	ErrBadSpec     = control.ErrBadSpec
	// ErrTextTooLong: an inject's text is over MaxTextBytes (see TextTooLongError).
	ErrTextTooLong = control.ErrTextTooLong
)

// TextTooLongError refuses an inject whose text is over MaxTextBytes JSON-encoded
// (control.TextTooLongError).
type TextTooLongError = control.TextTooLongError
