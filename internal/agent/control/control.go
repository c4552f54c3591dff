// Package control is what the agent's control frames (inject, cancel, approve, deny,
// set_model) can be refused with: the sentinels and the inject text bound that the
// message route maps to protocol error codes (internal/socket). It imports nothing of
// the agent runtime, so the routes that never run an agent — connect, disconnect,
// deliver — map these errors without carrying the runtime (models, tools, profiles)
// in their binaries. Package agent re-exports every name here.
package control

import (
	"errors"
	"fmt"
)

// Errors of the agent's frame methods (socket.Controller).
var (
	ErrNotRunning  = errors.New("agent: no turn running")
	ErrStaleCall   = errors.New("agent: no standing approval request for call")
	ErrUnsupported = errors.New("agent: approvals are not mounted")
	ErrBadSpec     = errors.New("agent: invalid model role or spec")
	// ErrTextTooLong: an inject's text is over MaxTextBytes (see TextTooLongError).
	ErrTextTooLong = errors.New("agent: inject text too long")
	// ErrNotOwner: the frame's connection no longer owns the agent (agent.ErrNotOwner
	// says when): the frame queued nothing.
	ErrNotOwner = errors.New("agent: the frame's connection no longer owns the agent")
)

// The inbox's bound (agent's inboxbound.go says how it is kept).
const (
	// MaxInboxItems is how many injects may wait as inbox items of their own.
	MaxInboxItems = 32
	// MaxInboxBytes is how many bytes of text the injects waiting as inbox items of
	// their own may hold together: four injects of MaxTextBytes.
	MaxInboxBytes = 4 * MaxTextBytes
)

// ErrInboxFull: the agent's inbox is at its bound (see InboxFullError).
var ErrInboxFull = errors.New("agent: inbox full")

// InboxFullError is an inject refused because the agent's inbox is at its bound: Items
// injects of Bytes bytes wait as items of their own. Nothing was queued.
type InboxFullError struct {
	Items, Bytes int64
}

func (e *InboxFullError) Error() string {
	return fmt.Sprintf("%v: %d injects of %d bytes wait (at most %d injects, %d bytes)", ErrInboxFull, e.Items, e.Bytes, MaxInboxItems, MaxInboxBytes)
}

// Is makes errors.Is(err, ErrInboxFull) hold.
func (e *InboxFullError) Is(target error) bool { return target == ErrInboxFull }

// MaxTextBytes bounds an inject's text (user/message, context/injected), JSON-encoded.
const MaxTextBytes = 64 << 10

// TextTooLongError refuses an inject whose text is over MaxTextBytes JSON-encoded: the
// one bound on injected text, for every caller (the message function answers it with
// bad_frame). Nothing is queued or logged, so nothing a client sent is cut.
type TextTooLongError struct {
	Bytes int // the text's JSON-encoded size, quotes included
}

func (e *TextTooLongError) Error() string {
	return fmt.Sprintf("agent: inject text is %d bytes JSON-encoded, at most %d allowed in one event", e.Bytes, MaxTextBytes)
}

// Is makes errors.Is(err, ErrTextTooLong) hold.
func (e *TextTooLongError) Is(target error) bool { return target == ErrTextTooLong }
