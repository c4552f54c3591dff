package delivery

import (
	"context"
	"time"
)

// A reader that stops reading shows in one of two ways, and both feed one rule: the
// live tail more than OutboundQueue events ahead of the sender's cursor, the next event
// the client has not been handed (laggingAt), closes it with lagged.
//
//   - The local gateway answers a post once its frame is written to a socket whose
//     kernel send buffer is small (localgw.Config.SendBuffer), so posts slow down as
//     soon as the client's own receive buffer is full (slowPost below).
//   - API Gateway refuses a post with LimitExceededException when "the WebSocket client
//     side buffer is full" (ErrFull, post.go): the frame is not taken and the cursor
//     stays before it; a sender whose post is refused that way checks the bound.
//
// slowPost is how long a live post may take before the sender checks the
// outbound-queue bound at once (laggingAt) rather than at its next read of the log. A
// post waits for a slow reader only where the transport pushes back: the local
// gateway answers a post once its frame is written, or after its write timeout with
// the frame still queued. A sender in the middle of a batch (up to OutboundQueue+1
// events) would otherwise wait that long per event before noticing that the client
// stopped reading, and the gateway would drop the client before the protocol's bound
// (lagged) reached it. On API Gateway a post takes tens of milliseconds whatever the
// client does, so the check costs one read only after an unusually slow post.
const slowPost = 500 * time.Millisecond

// laggingAt reports whether the live tail of agentID is more than OutboundQueue events
// ahead of next, the sender's cursor: one read of the log's tip.
func (d *Deliverer) laggingAt(ctx context.Context, agentID string, next int64) (bool, error) {
	tip, err := d.log.Tip(ctx, agentID)
	if err != nil {
		return false, err
	}
	return tip-next+1 > int64(d.cfg.OutboundQueue), nil
}
