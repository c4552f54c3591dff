package delivery

import (
	"context"
	"errors"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/lease"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// watchSlack is how long past a lease's end a watcher looks: a live holder renews its
// lease long before the end, so only a dead one's is still there.
const watchSlack = 250 * time.Millisecond

// watchLooks are the pauses of a backstop wake-up's own looks at the record before it
// starts a watcher: a fast-path sender lets go within milliseconds.
var watchLooks = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}

// covered reports whether the record needs no watcher: nothing owed (hello sent, not
// subscribed), no mark and no lease, or a live lease held by a self-healing holder — which
// serves any mark, or dies and is retried by Lambda, its retry sending from the cursor.
// A live lease of any other holder is not covered even without a mark: a holder that
// took a mark is serving it, and would strand it if it died.
func covered(o connections.Owner, now time.Time) bool {
	live := o.Lease != "" && lease.Live(o.LeaseUntil, now)
	switch {
	case o.HelloSent && o.Sub == 0:
		return true
	case !o.Pending && o.Lease == "":
		return true
	default:
		return live && o.LeaseKind == connections.HolderRetried
	}
}

// watch is called by a backstop wake-up (see wake) that left a Pending mark with the
// lease holder of o. A live holder serves the mark before it lets go; a dead one never
// will, and no later wake-up may come. Unless the record is covered (its own looks —
// the pauses of looks, what is left of watchLooks after those made before the mark
// (lookFirst) — a few hundred milliseconds at most, usually see the holder let go), one watcher per
// agent — an asynchronous deliver invocation, claimed on the ownership record — waits
// for the lease to be let go or to run out, and takes over in the second case. A
// wake-up that finds a watcher already claimed relies on it: the watcher gives up its
// claim only while no mark is set (connections.EndWatch).
func (d *Deliverer) watch(ctx context.Context, o connections.Owner, upTo int64, looks []time.Duration) error {
	for _, pause := range looks {
		if covered(o, d.store.Now()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		var err error
		if o, err = d.store.Owner(ctx, o.Key()); errors.Is(err, connections.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		if lease.Live(o.WatchUntil, d.store.Now()) {
			// A watcher's claim, read after the mark was left: the watcher keeps it
			// while a mark is set (EndWatch), so a claim of our own — a failed write
			// most of the time — adds nothing.
			return nil
		}
	}
	if covered(o, d.store.Now()) {
		return nil
	}
	id := connections.NewHolder(connections.HolderRetried).ID
	until := o.LeaseUntil
	if now := d.store.Now(); until.Before(now) {
		until = now
	}
	// The claim runs to the lease's end and twice the slack past it, as the watcher's
	// own extensions do, so that it need not extend it at its first look.
	claimUntil := until.Add(2 * watchSlack)
	claimed, err := d.store.ClaimWatch(ctx, o.Key(), id, claimUntil)
	if err != nil || !claimed {
		return err
	}
	if err := d.kick(ctx, Kick{Kind: KickWatch, AgentID: o.Key(), Watcher: id, ClaimedUntil: claimUntil.UnixMilli()}); err != nil {
		// Nobody is watching: give the claim back so that the retried wake-up can claim.
		if _, eerr := d.store.EndWatch(context.WithoutCancel(ctx), o, id, true); eerr != nil {
			d.logger.ErrorContext(ctx, "end watch", "agent_id", o.AgentID, "error", eerr)
		}
		return err
	}
	d.logger.DebugContext(ctx, "watching a busy sender", "agent_id", o.AgentID, "up_to", upTo, "lease", o.Lease, "lease_until", o.LeaseUntil.UnixMilli())
	return nil
}

// runWatch serves a KickWatch: it looks at the record with a growing pause (one read
// each) until the lease is let go, checks that nothing is owed after that, and gives its
// claim up; a lease that runs out belonged to a dead holder, and the watcher sends in its
// place. Near its invocation's deadline it hands the watch to a fresh one.
//
// A wake-up that finds the claim taken and a mark left writes nothing, whatever the
// mark's seq, and a holder lets go once its cursor is past the mark's seq: so events of
// such a wake-up may be left behind a released lease. The watcher's last check finds
// them — after a look that shows no lease, it compares the cursor with the log's tip
// (one read) and sends what is owed — and EndWatch holds only if no holder has let go
// since that look.
func (d *Deliverer) runWatch(ctx context.Context, k Kick) error {
	lg := d.logger.With("agent_id", k.AgentID, "watcher", k.Watcher)
	pause := watchSlack
	var claimedUntil time.Time // the wake-up the claim covers: a slack before it runs out
	if k.ClaimedUntil > 0 {
		claimedUntil = time.UnixMilli(k.ClaimedUntil).Add(-watchSlack)
	}
	for {
		o, err := d.store.Owner(ctx, k.AgentID)
		if errors.Is(err, connections.ErrNotFound) {
			return nil // the connection is gone, and the watch with its record
		}
		if err != nil {
			return err
		}
		now := d.store.Now()
		live := o.Lease != "" && lease.Live(o.LeaseUntil, now)
		switch {
		case o.HelloSent && o.Sub == 0:
			// Nothing is owed to a connection not subscribed; a subscribe marks anew.
			_, err := d.store.EndWatch(ctx, o, k.Watcher, true)
			return err
		case o.Lease == "":
			owed, err := d.owed(ctx, o)
			if err != nil {
				return err
			}
			if owed {
				lg.InfoContext(ctx, "work owed after the lease was let go: sending", "next_seq", o.Next, "pending", o.Pending)
				if _, err := d.pump(ctx, k.AgentID, nil, wake{retried: true}); err != nil {
					return err
				}
				continue
			}
			done, err := d.store.EndWatch(ctx, o, k.Watcher, false)
			if err != nil || done {
				return err
			}
		case !live:
			lg.InfoContext(ctx, "lease holder gone with work owed: taking over", "lease", o.Lease, "lease_until", o.LeaseUntil.UnixMilli(), "pending", o.Pending)
			if _, err := d.pump(ctx, k.AgentID, nil, wake{retried: true}); err != nil {
				return err
			}
		case o.LeaseKind == connections.HolderRetried:
			// A retried holder serves a mark or dies and is retried: hand the watch to
			// it with a mark that reaches every seq, so that it reads the log before it
			// lets go, then give the claim up.
			if !o.MarkReaches(-1) {
				marked, err := d.store.MarkPending(ctx, k.AgentID, -1)
				if err != nil {
					return err
				}
				if !marked {
					continue // let go meanwhile: look again
				}
			}
			_, err := d.store.EndWatch(ctx, o, k.Watcher, true)
			return err
		default:
			wake := o.LeaseUntil.Add(watchSlack)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < time.Until(wake)+d.cfg.HandoverMargin {
				if !claimedUntil.IsZero() {
					k.ClaimedUntil = claimedUntil.Add(watchSlack).UnixMilli()
				}
				return d.kick(ctx, k) // carry on in a fresh invocation, under the same claim
			}
			if wake.After(claimedUntil) {
				claimed, err := d.store.ClaimWatch(ctx, k.AgentID, k.Watcher, wake.Add(watchSlack))
				if err != nil || !claimed {
					return err // someone else watches now
				}
				claimedUntil = wake
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(pause, time.Until(wake))):
			}
			pause = min(2*pause, 8*time.Second)
		}
	}
}

// owed reports whether o, read with no lease held, has something to send: a mark left,
// hello not sent, or events at or past the cursor of a subscription (one strongly
// consistent read of the log's tip).
func (d *Deliverer) owed(ctx context.Context, o connections.Owner) (bool, error) {
	switch {
	case o.Pending || !o.HelloSent:
		return true, nil
	case o.Sub == 0:
		return false, nil
	}
	tip, err := d.log.Tip(ctx, o.AgentID)
	if errors.Is(err, sessionlog.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return tip >= o.Next, nil
}
