package control

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ErrTokenGone: a control frame posted over HTTP whose token stopped being current
// (revoked, rotated, expired, deleted) between the door's check and the frame's write:
// nothing was applied. The HTTP path answers it as unauthorized.
var ErrTokenGone = errors.New("agent: the frame's token is no longer current")

// Frame is what the agent's writes for one control frame carry besides its fields.
type Frame struct {
	// ClientID is the frame's client_id ("": none): the same one for the same agent
	// is applied once within the dedup window (agent.DedupWindow).
	ClientID string
	// Guard, if set, is a check the frame's inbox write is conditional on, in the same
	// transaction: over HTTP, the token still current (auth.Store.Condition). A frame
	// whose guard fails applies nothing and is ErrTokenGone.
	Guard *types.TransactWriteItem
	// Epoch, if set, is a check in the same transaction that the agent's log is still
	// the one the frame was read against (sessionlog.Log.EpochCheck): over HTTP, the
	// epoch the handler read before applying the frame. A frame whose log was reset or
	// deleted in between applies nothing and is sessionlog.ErrEpoch, never queued for
	// the next session (as a socket's frame is ErrNotOwner then).
	Epoch *types.TransactWriteItem
}

type frameKey struct{}

// WithFrame returns ctx carrying f for the agent's frame methods.
func WithFrame(ctx context.Context, f Frame) context.Context {
	return context.WithValue(ctx, frameKey{}, f)
}

// FrameFrom is the Frame ctx carries (zero: none).
func FrameFrom(ctx context.Context) Frame {
	f, _ := ctx.Value(frameKey{}).(Frame)
	return f
}
