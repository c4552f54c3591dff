package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
)

// Subscribe starts connID's subscription of agentID from fromSeq: it applies the replay
// limit and retention (pulling from forward to the oldest seq both keep, owing
// replay_truncated), pulls a fromSeq past the log's tip back to tip+1 (owing
// replay_truncated as well) and moves the cursor. Cost: the tip's read, and for a
// subscribe that replays anything one more read of one item (sessionlog.Retained). It
// returns connections.ErrNotOwner if connID does not own the agent. Frames follow from
// Pump.
//
// The frame's protocol.Stamp (from ctx; the time of the call without one) orders
// subscribes: one that finds a later subscribe of the same connection in force
// changes nothing and returns nil, so the last subscribe the client sent is the one in
// force (docs/protocol.md, "Ordering").
//
// batch is whether the client takes batched event frames. The choice is stored with
// the subscription, so every sender of the connection — the fast path, the stream
// consumer, a watcher, an asynchronous deliver invocation — honours it; a resubscribe
// may change it.
//
// agentID is a seat key (connections.ObserverSeat for an observer's subscription): the
// log read is the seat's agent's.
func (d *Deliverer) Subscribe(ctx context.Context, agentID, connID string, fromSeq int64, batch bool) error {
	seat, agentID := agentID, connections.SeatAgent(agentID)
	tip, err := d.log.Tip(ctx, agentID)
	if err != nil {
		return fmt.Errorf("delivery: subscribe %s: %w", agentID, err)
	}
	stamp, ok := protocol.StampFrom(ctx)
	if !ok {
		stamp = protocol.Stamp{At: time.Now().UnixMilli()}
	}
	from, truncated, err := d.replayStart(ctx, agentID, fromSeq, tip)
	if err != nil {
		return fmt.Errorf("delivery: subscribe %s: %w", agentID, err)
	}
	sub := connections.Subscription{From: from, Requested: fromSeq, ReplayEnd: tip + 1, Batch: batch, Stamp: stamp.Key(), Truncated: truncated}
	if _, err := d.store.Subscribe(ctx, seat, connID, sub); err != nil {
		if errors.Is(err, connections.ErrSuperseded) {
			return nil
		}
		return err
	}
	return nil
}

// replayStart is where a reader of agentID's log asking for fromSeq starts, the log's
// tip being tip, and whether that start was moved (replay_truncated owed): the replay
// limit's floor, retention's oldest kept event, or tip+1 for a fromSeq past the tip.
// A subscribe and a page of the HTTP read path (Page) both start here, so both say
// the same thing. Cost: for a start at or below the tip, one read of one item
// (sessionlog.Retained).
func (d *Deliverer) replayStart(ctx context.Context, agentID string, fromSeq, tip int64) (from int64, truncated bool, err error) {
	from = fromSeq
	if floor := tip + 1 - int64(d.cfg.ReplayLimit); fromSeq < floor {
		from, truncated = floor, true
	}
	if from <= tip {
		// Retention: events expired below the oldest retained one are gone, so the
		// replay starts there, announced as the cap's floor is (docs/architecture.md,
		// "Retention").
		kept, err := d.log.Retained(ctx, agentID, from)
		if err != nil {
			return 0, false, err
		}
		if kept > from {
			from, truncated = kept, true
		}
	}
	if fromSeq > tip+1 {
		// Past the tip: seqs tip+1 … from_seq-1 do not exist yet, so the client cannot
		// hold them. The stream starts at tip+1 instead, announced the way a moved
		// replay start always is (replay_truncated, requested_from_seq > from_seq),
		// never silently (docs/protocol.md, "subscribe").
		from, truncated = tip+1, true
	}
	return from, truncated, nil
}
