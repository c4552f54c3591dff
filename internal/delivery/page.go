package delivery

import (
	"context"
	"fmt"

	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// Page is one page of an agent's log read over HTTP (GET /agents/{agent_id}/events):
// what a subscribe from the same seq would replay first, without a connection.
type Page struct {
	Epoch  string             // the log's epoch, as hello carries it
	Events []sessionlog.Event // gapless from From
	// From is where the page starts: the requested seq unless the replay limit,
	// retention or the tip moved it, and then Truncated is the replay_truncated frame a
	// subscribe from the same seq would have been sent.
	From      int64
	Truncated *protocol.ReplayTruncated
	Next      int64 // the seq after the page's last event (From when empty)
	Last      int64 // the log's tip when the page was read
}

// Page reads up to limit events of agentID's log from fromSeq on, starting where a
// subscribe from fromSeq would start its replay (replayStart: the replay limit,
// retention, the tip), so that the page's events and replay_truncated are byte for
// byte what that subscribe's replay sends first. limit is bounded by the replay limit
// (≤ 0: the replay limit). A read holds one of the replay slots
// (Config.MaxConcurrentReplays) as a connection's replay does; a page with nothing to
// read takes none. Cost: the tip and the epoch (2 read units), and for a page that
// reads anything, the retention look (1), a slot's take and release (2 write units)
// and the read itself.
func (d *Deliverer) Page(ctx context.Context, agentID string, fromSeq int64, limit int) (Page, error) {
	if limit <= 0 || limit > d.cfg.ReplayLimit {
		limit = d.cfg.ReplayLimit
	}
	type epochRead struct {
		epoch string
		err   error
	}
	epoch := make(chan epochRead, 1)
	go func() {
		e, err := d.log.Epoch(ctx, agentID)
		epoch <- epochRead{e, err}
	}()
	tip, err := d.log.Tip(ctx, agentID)
	e := <-epoch
	if err == nil {
		err = e.err
	}
	if err != nil {
		return Page{}, fmt.Errorf("delivery: page %s from %d: %w", agentID, fromSeq, err)
	}
	from, truncated, err := d.replayStart(ctx, agentID, fromSeq, tip)
	if err != nil {
		return Page{}, fmt.Errorf("delivery: page %s from %d: %w", agentID, fromSeq, err)
	}
	p := Page{Epoch: e.epoch, From: from, Next: from, Last: tip}
	if truncated {
		t := protocol.NewReplayTruncated(fromSeq, from)
		p.Truncated = &t
	}
	if from > tip {
		return p, nil
	}
	slot, _, err := d.takeSlot(ctx, nil)
	if err != nil {
		return Page{}, fmt.Errorf("delivery: page %s from %d: %w", agentID, fromSeq, err)
	}
	defer d.releaseSlot(ctx, slot)
	if obs := d.cfg.Observer; obs != nil {
		obs.ReplayRead(true)
	}
	evs, err := d.log.Read(ctx, agentID, from, int(min(int64(limit), tip+1-from)))
	if obs := d.cfg.Observer; obs != nil {
		obs.ReplayRead(false)
	}
	d.gate(GateReplayRead, agentID)
	if err != nil {
		return Page{}, fmt.Errorf("delivery: page %s from %d: %w", agentID, fromSeq, err)
	}
	p.Events = evs
	if n := len(evs); n > 0 {
		p.Next = evs[n-1].Seq + 1
	}
	return p, nil
}

// Tip is the highest seq of agentID's log (1 read unit): a waiting reader's look.
func (d *Deliverer) Tip(ctx context.Context, agentID string) (int64, error) {
	return d.log.Tip(ctx, agentID)
}

// Hello is the hello frame a connection to agentID would receive now (its tip and
// epoch: 2 read units).
func (d *Deliverer) Hello(ctx context.Context, agentID string) ([]byte, error) {
	return d.helloFrame(ctx, agentID, "") // the reader's role is not known here: the hello names none
}

// Read reads up to limit events of agentID's log from seq from on, under no replay
// slot: the live tail of a reader over HTTP, as a connection's tail reads.
func (d *Deliverer) Read(ctx context.Context, agentID string, from int64, limit int) ([]sessionlog.Event, error) {
	return d.log.Read(ctx, agentID, from, limit)
}
