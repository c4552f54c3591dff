package protocol

import (
	"errors"
	"fmt"
)

// ErrBadFrame is matched (via errors.Is) by every error [Parse] returns. The
// server answers such a frame with an error frame of code bad_frame and keeps
// the connection open.
var ErrBadFrame = errors.New("protocol: bad frame")

// BadFrameError describes why a client frame was rejected.
//
// Message is the client-facing explanation: short, naming the frame type and
// field where known, and free of server internals. It is meant to be sent
// verbatim as the message of a bad_frame error frame (see [BadFrameError.Frame]).
type BadFrameError struct {
	// FrameType is the frame's "type" when it was known and in the closed
	// set, otherwise "".
	FrameType string
	// Field is the name of the offending field when the problem is a single
	// field (for example "wake"), otherwise "".
	Field string
	// Message is the client-facing text; Error returns it unchanged.
	Message string
}

// Error returns the client-facing message.
func (e *BadFrameError) Error() string { return e.Message }

// Unwrap returns [ErrBadFrame], so errors.Is(err, ErrBadFrame) holds.
func (e *BadFrameError) Unwrap() error { return ErrBadFrame }

// Frame returns the bad_frame error frame to send to the client for e.
func (e *BadFrameError) Frame() Error { return NewError(CodeBadFrame, e.Message) }

// badFrame builds a frame-level error (no particular frame type or field).
func badFrame(format string, args ...any) *BadFrameError {
	return &BadFrameError{Message: fmt.Sprintf(format, args...)}
}

// badField builds an error about one field of a known frame type. The message
// reads `<frameType>: field "<field>" <problem>`.
func badField(frameType, field, problem string) *BadFrameError {
	return &BadFrameError{
		FrameType: frameType,
		Field:     field,
		Message:   fmt.Sprintf("%s: field %q %s", frameType, field, problem),
	}
}
