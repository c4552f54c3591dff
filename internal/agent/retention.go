package agent

import (
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
// Cost: one UpdateItem per event, 1 write unit per KB of it, once in the event's life,
// when a compaction moves the checkpoint past it; a plain turn's release moves the
// checkpoint past nothing (it stays at the newest through_seq + 1), so a plain turn's
// writes are unchanged. TTL's deletes are free.
func (inv *invocation) expire(ctx context.Context, ck *checkpoint, log *slog.Logger) {
	w := inv.log
	if ck == nil || !w.begun {
		return
	}
	from := max(w.start, inv.expiredTo, 1)
	to := min(ck.Seq, w.last) // seqs [from, to): below the checkpoint, below the tip
	if to <= from {
		return
	}
	prof, err := inv.c.agentProfile(inv.profileJSON)
	if err != nil {
		log.WarnContext(ctx, "retention: no profile; events kept", "error", err.Error())
		return
	}
	inv.expiredTo = to
	days := inv.c.retentionDays(prof)
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
					at = inv.c.now()
				}
				if err := inv.c.log.Expire(ctx, inv.agent, ev.Seq, at.Add(keep).Unix()); err != nil {
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
	for _, ev := range w.evs {
		if ev.Seq < from || ev.Seq >= to || ev.Expires != 0 {
			continue
		}
		if skipped > 0 || inv.closeToDeadline(ctx) {
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
