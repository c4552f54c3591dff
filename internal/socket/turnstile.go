package socket

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
)

// The frame-order turnstile: a connection's numbered frames (protocol "order") take
// effect one after the other. Its records (connections.Store: the connection's last
// order taken effect, and how many of its frames wait) and its pacing live here alone.

// OrderWait is the default bound (Server.WithOrderWait) on how long a numbered frame
// waits for its predecessor (its order minus one) to take effect, counted from the
// frame's receipt. A predecessor that never came (a gap) or whose handler failed holds
// its successors up this long at most; they then take effect without the guarantee.
// Each waiting frame holds its handler (a Lambda invocation) that long: three seconds
// leave a predecessor slowed by a cold start or a few DynamoDB retries room to finish
// while keeping what a gap costs small.
const OrderWait = 3 * time.Second

// MaxWaitingFrames bounds the frames of one connection waiting in the turnstile at
// once (connections.Store.EnterWait: 1 write unit to enter, 1 to leave, only for a
// frame that finds its predecessor not yet taken effect). A frame beyond it is
// answered bad_frame at once and not applied, so a gap in a client's numbering holds
// at most this many handlers for at most OrderWait. Sixteen leaves room for a burst
// of numbered frames sent back to back, each waiting for the one before.
const MaxWaitingFrames = 16

// ErrWaitFull: MaxWaitingFrames of the connection's frames already wait; this one is
// not applied.
var ErrWaitFull = errors.New("socket: frame order wait full")

// OrderRecords is the part of the connection records the turnstile uses
// (connections.Store).
type OrderRecords interface {
	// Conn reads connID's record, strongly consistent; connections.ErrNotFound when
	// there is none.
	Conn(ctx context.Context, connID string) (connections.Conn, error)
	// EnterWait counts one more waiting frame of connID unless max already wait
	// (false).
	EnterWait(ctx context.Context, connID string, max int64) (bool, error)
	// LeaveWait counts one waiting frame of connID less.
	LeaveWait(ctx context.Context, connID string) error
	// MarkOrder records that connID's frame order has taken effect.
	MarkOrder(ctx context.Context, connID string, order int64) error
}

// Turnstile holds a numbered frame until its predecessor has taken effect.
type Turnstile interface {
	// Enter waits for st's turn on c (Message's read of its record). It returns
	// ErrWaitFull when the frame may not wait (nothing entered), an error wrapping
	// connections.ErrNotFound when the connection's record went while it waited, and
	// otherwise any read error or ctx's. On success the caller checks Turn.Conn's
	// state again before it applies anything, and calls Turn.Leave once done.
	Enter(ctx context.Context, lg *slog.Logger, c connections.Conn, st protocol.Stamp) (Turn, error)
}

// Turn is a numbered frame's passage through the turnstile.
type Turn struct {
	// Conn is the connection's record as last read.
	Conn connections.Conn
	// InOrder: the frame before this one took effect before it (false after a gap's
	// wait, or for a duplicate).
	InOrder bool
	// Taken marks the frame's order as taken effect (the next frame may go); calls
	// after the first do nothing.
	Taken func()
	// Leave leaves the wait, if the frame entered it; call it after Taken.
	Leave func()
}

// orderTurnstile is the Turnstile over the connection's records.
type orderTurnstile struct {
	records OrderRecords
	wait    time.Duration // OrderWait unless Server.WithOrderWait
}

func (t *orderTurnstile) Enter(ctx context.Context, lg *slog.Logger, c connections.Conn, st protocol.Stamp) (Turn, error) {
	connID, order := c.ID, st.Order
	leave := func() {}
	if c.Order < order-1 {
		// It would wait: at most MaxWaitingFrames of a connection do, so a gap in
		// the numbering cannot hold more than that many handlers.
		entered, err := t.records.EnterWait(ctx, connID, MaxWaitingFrames)
		switch {
		case err != nil:
			return Turn{}, fmt.Errorf("enter frame order wait: %w", err)
		case !entered:
			lg.Info("frame order wait full: frame refused", "order", order, "done", c.Order)
			return Turn{}, ErrWaitFull
		}
		leave = func() {
			if err := t.records.LeaveWait(context.WithoutCancel(ctx), connID); err != nil {
				lg.Warn("leave frame order wait", "order", order, "error", err)
			}
		}
	}
	inOrder, cur, err := t.await(ctx, lg, c, st)
	if err != nil {
		leave()
		return Turn{}, err
	}
	taken := sync.OnceFunc(func() {
		if err := t.records.MarkOrder(context.WithoutCancel(ctx), connID, order); err != nil {
			lg.Warn("mark frame order", "order", order, "error", err)
		}
	})
	return Turn{Conn: cur, InOrder: inOrder, Taken: taken, Leave: leave}, nil
}

// await returns once the frame before st (by order) has taken effect on c — true —
// or, false, once the order wait has passed since st's receipt. A frame whose order is
// not above the last mark (a duplicate, or one that came after its successor gave up
// waiting) does not wait. The first look reuses the connection record Message read;
// each further look is one strongly consistent read (1 read unit), paced 2, 4, … up to
// 32 ms apart times the frames still ahead of this one (turnPace): a frame deep in a
// burst looks rarely, so a burst of n numbered frames costs on the order of n·log n
// looks rather than n².
//
// It also returns the connection's record as last read, which the caller checks
// again before the frame applies anything: a frame that waited must not outlive its
// connection's access (docs/security.md, "Parked frames"). A look that finds the record
// gone returns connections.ErrNotFound and one that finds it no longer authorized stops
// waiting at once. No look is added for it: each pause ends at the deadline at the
// latest and is followed by a look, so the record returned is the one read last, at or
// after the deadline (or Message's own read, for a frame handled after it). Any other
// read error, or ctx done, is returned as it is.
func (t *orderTurnstile) await(ctx context.Context, lg *slog.Logger, c connections.Conn, st protocol.Stamp) (bool, connections.Conn, error) {
	deadline := time.UnixMilli(st.At).Add(t.wait)
	pause := 2 * time.Millisecond
	for {
		if c.State != connections.StateAuthorized {
			return false, c, nil
		}
		if c.Order >= st.Order-1 {
			return c.Order == st.Order-1, c, nil
		}
		if !time.Now().Before(deadline) {
			lg.Info("frame order gap: served without its predecessor", "order", st.Order, "done", c.Order)
			return false, c, nil
		}
		timer := time.NewTimer(min(pause, time.Until(deadline)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return false, c, ctx.Err()
		case <-timer.C:
		}
		cur, err := t.records.Conn(ctx, c.ID)
		if err != nil {
			return false, c, err
		}
		c = cur
		pause = turnPace(pause, st.Order-1-c.Order)
	}
}

// turnPace is the pause before the turnstile's next look: double the last, at most
// 32 ms per frame still to take effect before this one (ahead), and never over a second.
// The frame just before this one is looked for every 32 ms at most, as each frame
// ahead takes at least a handler's few requests to take effect.
func turnPace(last time.Duration, ahead int64) time.Duration {
	limit := 32 * time.Millisecond * time.Duration(max(ahead, 1))
	return min(2*last, limit, time.Second)
}
