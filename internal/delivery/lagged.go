package delivery

import (
	"context"
	"time"
)

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
