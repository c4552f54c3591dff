package delivery

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// The replay read path. A replay reads its pages one page ahead of its posts: as a
// sender takes page k it begins the read of page k+1 in the background, and posts page
// k meanwhile, so a replay costs about max(reads, posts) rather than their sum. At most
// one read is under way per sender, so memory stays at two pages.
//
// Each read holds one of the cluster-wide replay slots (Config.MaxConcurrentReplays)
// for the read only, never while events are posted, so the slots still bound replay
// reads, not replays. A read that finds its sender already waiting for it (the posts
// of the previous page done: the replay is bound by its reads) hands its slot to the
// next read, which begins at once: one slot take per replay instead of one per page,
// two DynamoDB writes and a read saved per page. A read that finishes while its sender
// still posts gives its slot back, and the next read takes one again, in the shadow of
// those posts.
//
// A page read in the background is posted only through the sender, with every check
// a freshly read one gets (renew before each post): it carries the subscription and
// the cursor it was read for, and is dropped when the sender adopts a resubscribe
// (adopt), finds its cursor elsewhere, or stops.

// slotLease is a replay slot a read holds: index i (-1: none), taken by holder at
// taken, so that a slot handed from read to read is taken afresh before its lease
// (Config.Lease) could run out under a read.
type slotLease struct {
	holder string
	i      int
	taken  time.Time
}

var noSlot = slotLease{i: -1}

// readAhead is a replay page read in the background for subscription sub, from seq
// from.
type readAhead struct {
	sub, from int64
	// stop, once closed, tells the read its page is no longer wanted: a read still
	// waiting for a slot gives up, one not begun does not begin.
	stop chan struct{}
	// handoff is unbuffered: a send succeeds only while the sender waits for the page,
	// and then carries the slot on to the sender's next read. done is buffered: the
	// page goes there otherwise, its slot given back.
	handoff, done chan pageRead
	// over is closed once the read has ended and given back any slot it did not hand
	// off; finish waits for it (sender.slotsBack).
	over    chan struct{}
	stopped bool
}

// pageRead is the outcome of a background read.
type pageRead struct {
	evs  []sessionlog.Event
	slot slotLease // handed to the sender's next read; noSlot when given back
	err  error
}

// errStopped ends a read whose page is no longer wanted.
var errStopped = errors.New("delivery: replay read stopped")

// waitLook is how often a sender waiting for a replay page keeps its lease (renew) and
// looks at its deadline and budget.
const waitLook = 250 * time.Millisecond

// read returns the next events from the log. Tail reads (from ReplayEnd on) are read
// here and never gated. Replay reads come from the read begun one page ahead, when it
// starts at next for the subscription in force; otherwise one is begun and awaited.
// Before returning a replay page, read begins the read of the page after it.
//
// A resubscribe adopted while read waits drops the page: read then returns no events
// in stateResubscribed, and the caller reads again from the new cursor.
func (s *sender) read(next int64) ([]sessionlog.Event, error) {
	d, o := s.d, s.o
	if next >= o.ReplayEnd {
		s.dropAhead()
		s.giveBackSlot()
		return d.log.Read(s.ctx, o.AgentID, next, d.cfg.OutboundQueue+1)
	}
	if !s.stopAt.IsZero() && o.ReplayEnd-next > int64(d.cfg.ReplayPage) {
		// More than one page owed to a sender with a time budget: the replay goes to
		// a deliver invocation now, before any read, rather than when the budget runs
		// out mid-page, which would drop the page read ahead and start the next
		// sender's reads off the page boundaries.
		s.dropAhead()
		return nil, errDeadline
	}
	if s.inflight == nil && s.unrecorded > 0 {
		// A page boundary: the cursor write covering the page posted begins before
		// the next page's read, so that the next page's posts need no other write
		// (renew) and this one never waits behind a read.
		s.inflight, s.unrecorded = s.checkpointAsync(), 0
	}
	if a := s.ahead; a == nil || a.sub != o.Sub || a.from != next {
		s.dropAhead()
		s.ahead = s.readAhead(next)
	}
	evs, err := s.await()
	if err != nil || s.st == stateResubscribed {
		return nil, err
	}
	if len(evs) > 0 {
		if after := evs[len(evs)-1].Seq + 1; after < s.o.ReplayEnd {
			s.ahead = s.readAhead(after)
		}
	}
	if s.ahead == nil {
		s.giveBackSlot() // the replay's last read is over
	}
	return evs, nil
}

// readAhead begins the replay read of the page from seq from, in the background,
// with the slot the sender holds from the previous read, if any.
func (s *sender) readAhead(from int64) *readAhead {
	d, o := s.d, s.o
	a := &readAhead{
		sub: o.Sub, from: from,
		stop: make(chan struct{}), handoff: make(chan pageRead), done: make(chan pageRead, 1), over: make(chan struct{}),
	}
	s.slotsBack = append(s.slotsBack, a.over)
	slot := s.slot
	s.slot = noSlot
	limit := int(min(int64(d.cfg.ReplayPage), o.ReplayEnd-from))
	go d.readPage(s.ctx, a, slot, o.AgentID, from, limit)
	return a
}

// SlotObserver is an Observer that also hears, for each replay page read, how long the
// read waited for its replay slot (zero, with no poll, when the slot came from the read
// before), how many polls that took, and how long the read itself took (the bench's
// reconnect storm breaks a replay down with it). Its method must not block.
type SlotObserver interface {
	Observer
	PageRead(agentID string, slotWait time.Duration, polls int, read time.Duration)
}

// readPage is the background read of a: it takes a replay slot unless given one, reads
// the page under it, and hands page and slot to the sender if the sender is waiting
// for it; otherwise it leaves the page in a.done and gives the slot back. It touches no
// sender state.
func (d *Deliverer) readPage(ctx context.Context, a *readAhead, slot slotLease, agentID string, from int64, limit int) {
	defer close(a.over)
	if slot.i >= 0 && time.Since(slot.taken) > d.cfg.Lease/2 {
		d.releaseSlot(ctx, slot) // held long: take a fresh lease on a slot
		slot = noSlot
	}
	waitBegan, polls := time.Now(), 0
	if slot.i < 0 {
		var err error
		if slot, polls, err = d.takeSlot(ctx, a.stop); err != nil {
			a.done <- pageRead{slot: noSlot, err: err}
			return
		}
	}
	readBegan := time.Now()
	select {
	case <-a.stop:
		d.releaseSlot(ctx, slot)
		a.done <- pageRead{slot: noSlot, err: errStopped}
		return
	default:
	}
	if obs := d.cfg.Observer; obs != nil {
		obs.ReplayRead(true)
	}
	evs, err := d.log.Read(ctx, agentID, from, limit)
	if obs := d.cfg.Observer; obs != nil {
		obs.ReplayRead(false)
	}
	if obs, ok := d.cfg.Observer.(SlotObserver); ok {
		obs.PageRead(agentID, readBegan.Sub(waitBegan), polls, time.Since(readBegan))
	}
	d.gate(GateReplayRead, agentID)
	if err == nil {
		select {
		case a.handoff <- pageRead{evs: evs, slot: slot}:
			return
		default:
		}
	}
	a.done <- pageRead{evs: evs, slot: noSlot, err: err}
	d.releaseSlot(ctx, slot)
}

// await waits for the read begun ahead (s.ahead) and takes its page, keeping the lease
// meanwhile: it renews it, takes the answer of a cursor write under way, and hands the
// work over once near the deadline or past the budget. A lease lost stops the wait; a
// resubscribe adopted drops the page (adopt) and returns none.
func (s *sender) await() ([]sessionlog.Event, error) {
	a := s.ahead
	if err := s.renew(); err != nil {
		return nil, err
	}
	look := time.NewTicker(waitLook)
	defer look.Stop()
	for s.ahead == a {
		var r pageRead
		select {
		case r = <-a.handoff:
		case r = <-a.done:
		case c := <-s.inflight: // nil when no write is under way: never ready
			if err := s.takeCheckpoint(c); err != nil {
				return nil, err
			}
			continue
		case <-look.C:
			if err := s.renew(); err != nil {
				return nil, err
			}
			if s.d.nearDeadline(s.ctx) || s.pastStop() {
				return nil, errDeadline
			}
			continue
		}
		s.ahead = nil
		if r.err != nil {
			return nil, r.err
		}
		s.slot = r.slot
		return r.evs, nil
	}
	return nil, nil // dropped: a resubscribe was adopted meanwhile
}

// dropAhead drops the read begun ahead, if any: its page is not posted, and its slot
// goes back (finish waits for that through slotsBack).
func (s *sender) dropAhead() {
	if a := s.ahead; a != nil {
		s.ahead = nil
		if !a.stopped {
			a.stopped = true
			close(a.stop)
		}
	}
}

// giveBackSlot gives back the slot kept from the last read, if any, in the background
// (finish waits for it).
func (s *sender) giveBackSlot() {
	slot := s.slot
	if slot.i < 0 {
		return
	}
	s.slot = noSlot
	done := make(chan struct{})
	s.slotsBack = append(s.slotsBack, done)
	go func() {
		defer close(done)
		s.d.releaseSlot(context.WithoutCancel(s.ctx), slot)
	}()
}

// releaseSlot gives slot back; a failure only leaves it held until its lease runs out.
func (d *Deliverer) releaseSlot(ctx context.Context, slot slotLease) {
	if slot.i < 0 {
		return
	}
	if err := d.slots.Release(context.WithoutCancel(ctx), slot.holder, slot.i); err != nil {
		d.logger.ErrorContext(ctx, "release replay slot", "error", err, "slot", slot.i)
	}
}

// takeSlot waits, with jittered polling, for a replay slot, until one is free or stop
// is closed. The connection stays open meanwhile; only this read waits, and the sender
// keeps the connection's lease renewed (await), handing the wait over should it run
// out of time.
//
// Each poll reads one group of slots, picked at random afresh (not by agent: a waiter
// must not starve behind one busy group while another has a free slot), so W waiters
// spread their reads over the G groups. The pause after a poll that found its group
// full (slotPause) doubles from 20 ms to 500 ms, and once the wait has gone on longer
// it is half the time waited so far, up to slotPauseCap: a waiter that has waited long
// is behind many others, and polling as often as a fresh one would only load the
// table the reads it waits for run on (docs/scale.md, "The replay slots").
func (d *Deliverer) takeSlot(ctx context.Context, stop <-chan struct{}) (_ slotLease, polls int, _ error) {
	holder := connections.NewHolder(connections.HolderOnce).ID
	began := time.Now()
	groups := d.slots.Groups()
	for wait := slotPauseFirst; ; wait = min(wait*2, slotPauseDoubled) {
		taken := time.Now()
		i, err := d.slots.TryAcquire(ctx, holder, mrand.IntN(groups))
		polls++
		if err != nil {
			return noSlot, polls, err
		}
		if i >= 0 {
			if waited := time.Since(began); waited > time.Second {
				d.logger.DebugContext(ctx, "waited for a replay slot", "wait_ms", waited.Milliseconds(), "polls", polls)
			}
			return slotLease{holder: holder, i: i, taken: taken}, polls, nil
		}
		p := slotPause(wait, time.Since(began))
		select {
		case <-stop:
			return noSlot, polls, errStopped
		case <-ctx.Done():
			return noSlot, polls, fmt.Errorf("delivery: wait for replay slot: %w", ctx.Err())
		case <-time.After(p/2 + mrand.N(p/2+1)):
		}
	}
}

// The replay slot wait's pauses (slotPause).
const (
	slotPauseFirst   = 20 * time.Millisecond
	slotPauseDoubled = 500 * time.Millisecond // where the doubling stops
	slotPauseCap     = 4 * time.Second
)

// slotPause is the pause before the next poll of a waiter that has waited for
// waited, whose doubling pause is now wait: the larger of wait and waited/2, at most
// slotPauseCap; the sleep is drawn from its upper half. Up to a second's wait this is
// the doubling alone. Past it each poll comes about 1.4 times as late as the one before,
// so a waiter polls about 3·ln(waited/1 s) more times, not waited/375 ms: over a 10 s
// wait 13 polls instead of 29, and W waiters that have waited t poll about 2.7W/t times
// a second in all where a fixed 500 ms cap has them poll 2.7W times.
func slotPause(wait, waited time.Duration) time.Duration {
	return min(max(wait, waited/2), slotPauseCap)
}
