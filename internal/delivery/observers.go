package delivery

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/lease"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// Observers (docs/architecture.md, "Observers"): each observer connection of an agent
// has its own seat, a record with the ownership record's attributes (connections,
// seat.go), so the delivery core serves it exactly as the driver — its own cursor,
// sender lease, mark, watch, replay slot, queue bound and lagged rule — with the seat's
// key where the driver's is the agent id. What this file adds is how a wake-up of an
// agent reaches its observers' seats: one read of the agent's observer index per
// stream batch, whatever their number, and the appender's fast path from a cache of
// that index.

// ObserverIndex lists an agent's observer connections (connections.Store.Observers)
// and reads seats together (Seats). connections.Store and the contract suite's
// in-memory double implement it; a Records without it serves drivers only.
type ObserverIndex interface {
	Observers(ctx context.Context, agentID string) ([]connections.Observer, error)
	Seats(ctx context.Context, seats []string) (map[string]connections.Owner, error)
}

var _ ObserverIndex = (*connections.Store)(nil)

// observerSeats returns the seat keys of agentID's observers: one strongly consistent
// read of the observer index (1 read unit), none without an index.
func (d *Deliverer) observerSeats(ctx context.Context, agentID string) ([]string, error) {
	idx, ok := d.store.(ObserverIndex)
	if !ok {
		return nil, nil
	}
	obs, err := idx.Observers(ctx, agentID)
	if err != nil {
		return nil, err
	}
	seats := make([]string, len(obs))
	for i, o := range obs {
		seats[i] = o.Seat(agentID)
	}
	return seats, nil
}

// pumpSeats pumps agentID's driver seat and each of its observers' seats at once, each
// with budget, and waits for all: a slow observer holds up no other seat's sender, and
// the driver's sends never wait for an observer's. With observers, the seats' records
// are read in one request (Seats) and each pump starts from its record as read, in
// place of its own pre-read: two requests for the agent (the index, the seats),
// whatever the number of observers. Without any, the driver's pump reads its record as
// before: one request more than before observers (the index).
func (d *Deliverer) pumpSeats(ctx context.Context, agentID string, hints []sessionlog.Event, budget time.Duration) error {
	seats, oerr := d.observerSeats(ctx, agentID)
	if oerr != nil {
		d.logger.WarnContext(ctx, "read observers", "agent_id", agentID, "error", oerr)
	}
	all := append([]string{agentID}, seats...)
	var read map[string]connections.Owner
	if len(seats) > 0 {
		var err error
		if read, err = d.store.(ObserverIndex).Seats(ctx, all); err != nil {
			d.logger.WarnContext(ctx, "read seats", "agent_id", agentID, "error", err)
			read = nil // each pump reads its own
		}
	}
	upTo := int64(-1)
	for _, ev := range hints {
		upTo = max(upTo, ev.Seq)
	}
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, seat := range all {
		w := wake{stopAt: time.Now().Add(budget), backstop: true, preRead: true}
		if read != nil {
			o, ok := read[seat]
			switch {
			case !ok:
				w.seenGone = true
			case i > 0 && owedFree(o, upTo, d.store.Now()):
				// An observer owed events with nobody sending them: its posts go from an
				// asynchronous invocation, never from this batch's, so that a slow
				// observer's posts hold up neither the driver's nor the shard's next batch.
				errs[i] = d.kick(ctx, Kick{Kind: KickPump, AgentID: seat})
				continue
			}
			w.seen = &o
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = d.pump(ctx, seat, hints, w)
		}()
	}
	wg.Wait()
	return errors.Join(append(errs, oerr)...)
}

// owedFree reports whether seat record o is owed events up to upTo (or hello) with its
// sender lease free: a pump would post them itself.
func owedFree(o connections.Owner, upTo int64, now time.Time) bool {
	if o.HelloSent && (o.Sub == 0 || o.Next > upTo) && !o.Pending {
		return false
	}
	return o.Lease == "" || !lease.Live(o.LeaseUntil, now)
}

// closeObservers closes agentID's observer connections with code whose token is one of
// hashes (nil: every observer). Cost: 1 read of the index, 1 of each seat closed, and
// each close's writes.
func (d *Deliverer) closeObservers(ctx context.Context, agentID string, hashes []string, code protocol.Code, msg string) error {
	idx, ok := d.store.(ObserverIndex)
	if !ok {
		return nil
	}
	obs, err := idx.Observers(ctx, agentID)
	if err != nil {
		return err
	}
	drop := map[string]bool{}
	for _, h := range hashes {
		drop[h] = true
	}
	var errs []error
	for _, o := range obs {
		if hashes != nil && !drop[o.TokenHash] {
			continue
		}
		seat, err := d.store.Owner(ctx, o.Seat(agentID))
		if errors.Is(err, connections.ErrNotFound) {
			continue // closed already
		}
		if err == nil {
			err = d.Close(ctx, seat, code, msg)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
