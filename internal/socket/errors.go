package socket

import (
	"errors"
	"fmt"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// ErrUnsupported answers a frame that needs a part this deployment does not mount.
var ErrUnsupported = errors.New("socket: unsupported")

// ErrForbidden answers a control frame on an observer connection.
var ErrForbidden = errors.New("socket: forbidden")

// codeFor maps an error from serving a frame to the protocol's error code and the
// message the client sees. It is the one place where errors become codes; internal
// error text never reaches a client.
func codeFor(err error) (protocol.Code, string) {
	var bf *protocol.BadFrameError
	var long *control.TextTooLongError
	var full *control.InboxFullError
	var stale *control.StaleError
	var ahead *control.AheadError
	switch {
	case errors.As(err, &stale):
		return protocol.CodeStale, stale.Message()
	case errors.As(err, &ahead):
		return protocol.CodeBadFrame, fmt.Sprintf("%s: field \"expect_seq\" is %d, above the log's newest seq %d", ahead.Frame, ahead.Expect, ahead.Tip)
	case errors.As(err, &bf):
		return protocol.CodeBadFrame, bf.Message
	case errors.As(err, &long):
		return protocol.CodeBadFrame, fmt.Sprintf("inject: field \"text\" is %d bytes JSON-encoded, at most %d allowed in one event", long.Bytes, control.MaxTextBytes)
	case errors.As(err, &full):
		return protocol.CodeBadFrame, fmt.Sprintf("inject: the agent's inbox is full (%d injects of %d bytes wait; at most %d injects, %d bytes): this inject is not queued; send it again once the agent's turn has drained the inbox",
			full.Items, full.Bytes, control.MaxInboxItems, control.MaxInboxBytes)
	case errors.Is(err, control.ErrBadSpec):
		return protocol.CodeBadFrame, "set_model: invalid role or model spec"
	case errors.Is(err, sessionlog.ErrTooLarge):
		return protocol.CodeBadFrame, "frame content is too large for one event"
	case errors.Is(err, control.ErrNotRunning):
		return protocol.CodeNotRunning, "no turn is running"
	case errors.Is(err, control.ErrStaleCall):
		return protocol.CodeStaleCall, "no standing approval request for that call_id"
	case errors.Is(err, control.ErrUnsupported):
		return protocol.CodeUnsupported, "approvals are not mounted: run terret dev with --approvals, or deploy with Approvals=true"
	case errors.Is(err, ErrForbidden):
		return protocol.CodeForbidden, "this connection's token is an observer's: it may subscribe and read, and send no control frame"
	case errors.Is(err, ErrUnsupported):
		return protocol.CodeUnsupported, "this deployment does not mount the plugin this frame needs"
	case errors.Is(err, control.ErrNotOwner):
		// The frame's connection lost the agent while the frame was handled (another
		// connect took it over, or a reset or delete began): nothing was queued, and
		// the connection closes with internal — a client that may still connect
		// reconnects, one whose access ended is refused at the door.
		return protocol.CodeInternal, "internal error"
	case errors.Is(err, sessionlog.ErrEpoch):
		// The agent's log was reset or deleted while the frame was handled: nothing was
		// applied (over HTTP; a socket closes with internal, as for ErrNotOwner).
		return protocol.CodeInternal, "the session was reset or deleted while the frame was handled: nothing was applied; read the new log and send it again"
	case errors.Is(err, control.ErrTokenGone):
		// Over HTTP: the token stopped being current while the frame was handled.
		return protocol.CodeUnauthorized, protocol.Refusal(protocol.CodeUnauthorized).Message
	case errors.Is(err, connections.ErrNotOwner):
		return protocol.CodeSuperseded, protocol.Refusal(protocol.CodeSuperseded).Message
	default:
		return protocol.CodeInternal, "internal error"
	}
}
