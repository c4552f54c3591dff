package agent

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
)

// Retention (docs/architecture.md, "Retention"): events are appended without a TTL,
// and get one — expires_at, retention days after the event's `at` — only once the
// runner's checkpoint has passed them. The runner reads the log from its checkpoint
// on, so nothing it needs ever expires: the newest context/compacted and the events
// after its through_seq, the open turn, and any inject still queued are all at or
// above it (checkpoint.go's invariants), and the checkpoint never moves back. Readers
// that start lower (a subscribe, an export) treat an expired event as gone whether TTL
// has deleted it yet or not (sessionlog.Retained, sessionlog.Event.Expired).

// expireWorkers bounds the UpdateItems an expire has in flight.
const expireWorkers = 8

// retentionDays is prof's retention_days, else the deployment's; 0: keep forever.
func (c *core) retentionDays(prof tools.Profile) int64 {
	if prof.RetentionDays > 0 {
		return prof.RetentionDays
	}
	return int64(c.cfg.RetentionDays)
}

// expire sets the TTL of the events that ck, just written by this invocation's
// release, has passed since the window began (or since the last expire of this
// invocation). It never gives one to seq 0 (session/created: it carries the epoch, and
// a log without it could be created again) nor to the newest event the window holds (at
// most the log's tip: with the tip gone an append would reuse its seq). A failure only
// leaves events without a TTL — kept, never lost — and is logged; events the checkpoint
// passes while no retention applies are kept for good, as are those left when the
// invocation nears its deadline (closeToDeadline): a long first compaction of an agent
// from before checkpoints may leave part of its old log.
//
// The fold items (histfold.go) wholly below the floor get their TTL too, with the
// events they fold below the window (their own `at` unknown: the newest one's is
// used): a fold keeps nothing longer than the events it folds.
//
// Cost: one UpdateItem per event, 1 write unit per KB of it, once in the event's life,
// when a compaction moves the history's floor past it, and one per fold item then; a
// plain turn's release moves the floor past nothing (it stays at the newest
// through_seq + 1), so a plain turn gives nothing a TTL. TTL's deletes are free.
func (rn *activeRun) expire(ctx context.Context, ck *checkpoint, log *slog.Logger) {
	w := rn.log
	if ck == nil || !w.begun {
		return
	}
	from := max(w.start, rn.expiredTo, 1)
	to := min(ck.floor(), w.last)       // seqs [from, to): below the history's floor, below the tip
	lo := max(w.floor, rn.expiredTo, 1) // the folded events below the window from here to `to` get a TTL
	below := rn.foldedBelow(lo, to)     // the fold items holding them
	if to <= from && len(below) == 0 {
		return
	}
	prof, err := rn.c.agentProfile(rn.profileJSON)
	if err != nil {
		log.WarnContext(ctx, "retention: no profile; events kept", "error", err.Error())
		return
	}
	rn.expiredTo = max(rn.expiredTo, to)
	days := rn.c.retentionDays(prof)
	if days <= 0 {
		return
	}
	keep := time.Duration(days) * 24 * time.Hour
	jobs := make(chan sessionlog.Event)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed int
	var first error
	for range expireWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range jobs {
				at, perr := time.Parse(sessionlog.TimeFormat, ev.At)
				if perr != nil {
					at = rn.c.now()
				}
				if err := rn.c.log.Expire(ctx, rn.agent, ev.Seq, at.Add(keep).Unix()); err != nil {
					mu.Lock()
					failed++
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	n, skipped := 0, 0
	for _, p := range below {
		// The fold item, then the events it folds below the window's start (the
		// window's own are expired below): each at retention days after its newest.
		at, perr := time.Parse(sessionlog.TimeFormat, p.at)
		if perr != nil {
			at = rn.c.now()
		}
		exp := at.Add(keep).Unix()
		var errs []error
		if p.to < to { // wholly below the floor: the item too
			errs = append(errs, rn.c.store.expireFold(ctx, rn.agent, p.from, exp))
			p.expired = errs[0] == nil
		}
		for seq := max(p.from, lo); seq <= p.to && seq < min(to, w.start); seq++ {
			errs = append(errs, rn.c.log.Expire(ctx, rn.agent, seq, exp))
			n++
		}
		mu.Lock()
		for _, err := range errs {
			if err != nil {
				failed++
				first = cmp.Or(first, err)
			}
		}
		mu.Unlock()
	}
	for _, ev := range w.evs {
		if ev.Seq < from || ev.Seq >= to || ev.Expires != 0 {
			continue
		}
		if skipped > 0 || rn.closeToDeadline(ctx) {
			skipped++ // the invocation's end is near: these keep no TTL
			continue
		}
		jobs <- ev
		n++
	}
	close(jobs)
	wg.Wait()
	if failed > 0 || skipped > 0 {
		msg := ""
		if first != nil {
			msg = first.Error()
		}
		log.WarnContext(ctx, "retention: events left without expiry", "failed", failed, "skipped", skipped, "events", n, "from_seq", from, "to_seq", to, "error", msg)
		return
	}
	log.DebugContext(ctx, "retention: events expire", "events", n, "from_seq", from, "to_seq", to, "retention_days", days)
}

// foldedBelow returns the fold items the window holds that fold events in [lo, to)
// and have no TTL from this invocation yet.
func (rn *activeRun) foldedBelow(lo, to int64) []*pieceMeta {
	var out []*pieceMeta
	for i := range rn.log.pieces {
		if p := &rn.log.pieces[i]; !p.expired && p.from < to && p.to >= lo {
			out = append(out, p)
		}
	}
	return out
}
