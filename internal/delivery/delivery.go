// Package delivery pushes a session's log to the connection that owns the agent: hello,
// replay from a subscription's from_seq, then the live tail — in seq order, with no gap
// and no duplicate, although DynamoDB Streams delivers at least once and orders per item
// only, Lambda runs many senders at once, and API Gateway does not order two concurrent
// posts to one connection.
//
// The design (docs/architecture.md, "Delivery"): the ownership record carries a delivery
// cursor (the next seq to send) and a short sender lease. Only the lease holder posts, one
// frame at a time, each post awaited, so frames reach the socket in the order posted. The
// log table is the source of truth; stream records and appenders only wake a sender. A
// wake-up that finds the lease held sets Pending on the record; the holder cannot let go
// while Pending is set, so it looks at the log again — no wake-up is ever lost, and no
// one needs to poll.
package delivery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	gwtypes "github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// Errors returned by this package.
var (
	ErrGone = errors.New("delivery: connection gone")
	ErrPost = errors.New("delivery: post failed")
	// errDeadline stops a sender that must hand its work to a fresh invocation.
	errDeadline = errors.New("delivery: invocation deadline near")
)

// PostAPI is the part of the @connections client delivery uses.
type PostAPI interface {
	PostToConnection(context.Context, *apigatewaymanagementapi.PostToConnectionInput, ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error)
	DeleteConnection(context.Context, *apigatewaymanagementapi.DeleteConnectionInput, ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.DeleteConnectionOutput, error)
}

var _ PostAPI = (*apigatewaymanagementapi.Client)(nil)

// InvokeAPI is the part of the Lambda client used to hand work to a fresh invocation.
type InvokeAPI interface {
	Invoke(context.Context, *lambda.InvokeInput, ...func(*lambda.Options)) (*lambda.InvokeOutput, error)
}

var _ InvokeAPI = (*lambda.Client)(nil)

// LogReader is the part of the session log delivery reads.
type LogReader interface {
	Read(ctx context.Context, sessionID string, from int64, limit int) ([]sessionlog.Event, error)
	Tip(ctx context.Context, sessionID string) (int64, error)
}

var _ LogReader = (*sessionlog.Log)(nil)

// Config tunes a Deliverer.
type Config struct {
	ReplayLimit          int           // events one subscribe may replay (spec default 10000)
	MaxConcurrentReplays int           // replay reads at once across all instances (default 4)
	OutboundQueue        int           // live events a connection may fall behind (default 1024)
	DeliverFunction      string        // this function's name, for handing over work
	Lease                time.Duration // sender lease; default connections.DefaultLease
	ReplayPage           int           // events per replay read; default 1000
	HelloGrace           time.Duration // how long a fresh connection may answer Gone; default 5s
	HandoverMargin       time.Duration // stop this long before the invocation deadline; default 10s
	// CheckpointEvery bounds the events a sender posts beyond its stored cursor
	// (default 64): a sender that dies re-sends at most this many through its
	// successor. It writes its cursor every CheckpointEvery/2 events (a replay pays one
	// write unit per that many), the write overlapping the next post, and a batch holds
	// at most CheckpointEvery/2 events.
	CheckpointEvery int
	Logger          *slog.Logger
	// Observer, if set, is told when a replay read starts and ends (metrics, tests).
	Observer Observer
}

// Observer watches replay reads.
type Observer interface {
	ReplayRead(start bool)
}

// Gate is an Observer a test may add to hold a sender at a point of its work, to hit a
// race window deterministically. Points: GateKickPump (an asynchronous pump kick,
// before it takes the lease) and GateHello (under the lease, before hello is posted).
type Gate interface {
	Wait(point, agentID string)
}

// Gate points.
const (
	GateKickPump = "kick_pump"
	GateHello    = "hello"
)

func (d *Deliverer) gate(point, agentID string) {
	if g, ok := d.cfg.Observer.(Gate); ok {
		g.Wait(point, agentID)
	}
}

// Deliverer sends logs to sockets. It is safe for concurrent use.
type Deliverer struct {
	cfg    Config
	log    LogReader
	store  *connections.Store
	slots  *connections.Slots
	posts  PostAPI
	invoke InvokeAPI
	logger *slog.Logger
}

// New returns a Deliverer. invoke may be nil where no handover is possible (tests).
func New(cfg Config, log LogReader, store *connections.Store, posts PostAPI, invoke InvokeAPI) *Deliverer {
	if cfg.Lease <= 0 {
		cfg.Lease = connections.DefaultLease
	}
	if cfg.ReplayPage <= 0 {
		cfg.ReplayPage = 1000
	}
	if cfg.ReplayLimit <= 0 {
		cfg.ReplayLimit = 10000
	}
	if cfg.MaxConcurrentReplays <= 0 {
		cfg.MaxConcurrentReplays = 4
	}
	if cfg.OutboundQueue <= 0 {
		cfg.OutboundQueue = 1024
	}
	if cfg.HelloGrace <= 0 {
		cfg.HelloGrace = 5 * time.Second
	}
	if cfg.HandoverMargin <= 0 {
		cfg.HandoverMargin = 10 * time.Second
	}
	if cfg.CheckpointEvery <= 0 {
		cfg.CheckpointEvery = 64
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Deliverer{
		cfg: cfg, log: log, store: store, posts: posts, invoke: invoke, logger: logger,
		slots: store.NewSlots(cfg.MaxConcurrentReplays, cfg.Lease),
	}
}

// Lease holder ids start with "r" when the holder runs in an asynchronous deliver
// invocation, which Lambda retries if it dies — its retry takes the expired lease and
// sends from the cursor, so a Pending mark left with it needs no watcher — and "x"
// otherwise (the stream consumer, the message function, the appender's fast path).
const retriedPrefix = "r"

func newHolder(retried bool) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	if retried {
		return retriedPrefix + hex.EncodeToString(b)
	}
	return "x" + hex.EncodeToString(b)
}

// selfHealing reports whether holder's invocation is retried by Lambda should it die.
func selfHealing(holder string) bool { return strings.HasPrefix(holder, retriedPrefix) }

// wake describes a wake-up of a sender.
type wake struct {
	// stopAt, if set, is when a sender still busy hands its work to a fresh
	// asynchronous invocation.
	stopAt time.Time
	// backstop: this is the last wake-up its events get (the stream consumer, a
	// subscribe, a kick), so one that leaves a Pending mark makes sure somebody looks
	// again should the lease holder die (watch). The appender's fast path is not a
	// backstop: the stream consumer follows it.
	backstop bool
	// retried: the caller is an asynchronous deliver invocation (see retriedPrefix).
	retried bool
	// preRead: read the record before trying the lease, and stop if nothing is owed —
	// 1 read unit where a failed conditional write would cost 1 write unit. The stream
	// consumer does, since most of its wake-ups find the events sent or nobody
	// subscribed; the fast path does only for a session whose last wake-up found
	// nobody subscribed, since most of its wake-ups send.
	preRead bool
	// more, if set, lets a sender that has sent everything wait up to its argument for
	// the appender's next events before it lets the lease go (the fast path's linger):
	// a turn's events, streamed one after another, then go out under one lease, with no
	// lease write of their own. Each batch it returns renews the budget.
	more   func(time.Duration) []sessionlog.Event
	budget time.Duration
}

// lingerFor is how long a fast-path sender keeps its lease for the appender's next
// event: longer than the gap between a streamed answer's chunks (the runtime flushes
// every 200 ms), and shorter than a backstop wake-up's own looks (watchLooks), so that
// one meeting a lingering sender sees it let go instead of starting a watcher.
const lingerFor = 250 * time.Millisecond

// lingerLook is how often a lingering sender writes its cursor and looks at the record:
// a resubscribe or another process's Pending mark waits no longer than this for it.
const lingerLook = time.Second

// Subscribe starts connID's subscription of agentID from fromSeq: it applies the replay
// limit (pulling from forward and owing replay_truncated), pulls a fromSeq past the
// log's tip back to tip+1 (owing replay_truncated as well) and moves the cursor. It
// returns connections.ErrNotOwner if connID does not own the agent. Frames follow from
// Pump.
//
// The frame's protocol.Stamp (from ctx; the time of the call without one) orders
// subscribes: one that finds a later subscribe of the same connection in force
// changes nothing and returns nil, so the last subscribe the client sent is the one in
// force (docs/protocol.md, "Ordering").
func (d *Deliverer) Subscribe(ctx context.Context, agentID, connID string, fromSeq int64) error {
	return d.subscribe(ctx, agentID, connID, fromSeq, false)
}

func (d *Deliverer) subscribe(ctx context.Context, agentID, connID string, fromSeq int64, batch bool) error {
	tip, err := d.log.Tip(ctx, agentID)
	if err != nil {
		return fmt.Errorf("delivery: subscribe %s: %w", agentID, err)
	}
	stamp, ok := protocol.StampFrom(ctx)
	if !ok {
		stamp = protocol.Stamp{At: time.Now().UnixMilli()}
	}
	sub := connections.Subscription{From: fromSeq, Requested: fromSeq, ReplayEnd: tip + 1, Batch: batch, Stamp: stamp.Key()}
	if floor := tip + 1 - int64(d.cfg.ReplayLimit); fromSeq < floor {
		sub.From, sub.Truncated = floor, true
	}
	if fromSeq > tip+1 {
		// Past the tip: seqs tip+1 … from_seq-1 do not exist yet, so the client cannot
		// hold them. The stream starts at tip+1 instead, announced the way a moved
		// replay start always is (replay_truncated, requested_from_seq > from_seq),
		// never silently (docs/protocol.md, "subscribe").
		sub.From, sub.Truncated = tip+1, true
	}
	if _, err := d.store.Subscribe(ctx, agentID, connID, sub); err != nil {
		if errors.Is(err, connections.ErrSuperseded) {
			return nil
		}
		return err
	}
	return nil
}

// Pump sends whatever agentID's owner connection is owed, if no other sender is at it;
// otherwise it leaves a Pending mark for that sender. hints are freshly appended events
// (from a stream batch or an appender) that spare a log read when they are next in line;
// they are only ever a shortcut, never the source of truth.
func (d *Deliverer) Pump(ctx context.Context, agentID string, hints []sessionlog.Event) error {
	_, err := d.pump(ctx, agentID, hints, wake{backstop: true, preRead: true})
	return err
}

// PumpFor is Pump with a time budget: a sender still busy when it runs out (a long
// replay, a slow client) hands its work to a fresh asynchronous invocation and returns.
// The stream consumer uses it so that one session can never hold up the others of its
// shard.
func (d *Deliverer) PumpFor(ctx context.Context, agentID string, hints []sessionlog.Event, budget time.Duration) error {
	_, err := d.pump(ctx, agentID, hints, wake{stopAt: time.Now().Add(budget), backstop: true, preRead: true})
	return err
}

// pump wakes agentID's sender as w describes. idle reports that nothing is owed to
// anyone — no owner connection, or one not subscribed — for the fast path's benefit.
func (d *Deliverer) pump(ctx context.Context, agentID string, hints []sessionlog.Event, w wake) (idle bool, err error) {
	hints = normalize(hints)
	upTo := int64(-1)
	if len(hints) > 0 {
		upTo = hints[len(hints)-1].Seq
	}
	if upTo >= 0 && w.preRead {
		o, err := d.store.Owner(ctx, agentID)
		if errors.Is(err, connections.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if o.HelloSent && (o.Sub == 0 || o.Next > upTo) && !o.Pending {
			return o.Sub == 0, nil
		}
	}
	holder := newHolder(w.retried)
	for {
		o, ok, err := d.store.Acquire(ctx, agentID, holder, d.cfg.Lease, upTo)
		switch {
		case errors.Is(err, connections.ErrNotFound):
			return true, nil // nobody owns the agent: the log keeps the events for the next subscribe
		case errors.Is(err, connections.ErrLeaseHeld):
			if upTo >= 0 && o.HelloSent && o.Next > upTo {
				return false, nil // already past every hinted event
			}
			marked, err := d.store.MarkPending(ctx, agentID, upTo)
			if err != nil {
				return false, err
			}
			if marked {
				if w.backstop {
					return false, d.watch(ctx, o, upTo)
				}
				return false, nil
			}
			continue // the lease was let go meanwhile: try to take it
		case err != nil:
			return false, err
		case !ok:
			return o.HelloSent && o.Sub == 0, nil
		}
		err = d.send(ctx, o, holder, hints, w)
		if errors.Is(err, connections.ErrLeaseLost) {
			return false, nil // another sender holds the connection now and continues from the cursor
		}
		return false, err
	}
}

// send runs under the lease: hello if owed, then events from the cursor, until the log
// has nothing more and the lease can be let go.
func (d *Deliverer) send(ctx context.Context, o connections.Owner, holder string, hints []sessionlog.Event, w wake) (err error) {
	stopAt, looked := w.stopAt, time.Now()
	p := connections.Progress{Next: o.Next, HelloSent: o.HelloSent, Truncated: o.Truncated}
	lg := d.logger.With("agent_id", o.AgentID, "connection_id", o.ConnID)
	began, first := time.Now(), o.Next
	defer func() {
		lg.Debug("sender done", "from_seq", first, "next_seq", p.Next, "duration_ms", time.Since(began).Milliseconds(), "error", err)
	}()
	released := false
	var join func() error // waits for a cursor write under way (below)
	defer func() {
		if join != nil && !released {
			_ = join()
		}
		if !released {
			// Leave the progress made so that the next sender continues from it.
			if aerr := d.store.Abandon(context.WithoutCancel(ctx), o, holder, p); aerr != nil {
				lg.Error("abandon lease", "error", aerr)
			}
		}
	}()
	// renew keeps the lease well ahead of every post: a sender never posts on a lease
	// with less than half its term left, so a slow sender stops (ErrLeaseLost) rather
	// than overlapping the next one.
	// It also stores the cursor every CheckpointEvery/2 events, which bounds what a
	// successor re-sends should this sender die (an unavoidable window: a post and the
	// write recording it cannot be one atomic step). That write goes on while the next
	// frame is posted (checkpoint.go), so at most CheckpointEvery events are unrecorded.
	unrecorded, half := 0, max(d.cfg.CheckpointEvery/2, 1)
	var pending chan checkpointDone
	join = func() error {
		if pending == nil {
			return nil
		}
		r := <-pending
		pending = nil
		if errors.Is(r.err, connections.ErrLeaseLost) {
			released = true
		}
		if r.err != nil {
			return r.err
		}
		if r.cur.Sub != o.Sub {
			p, unrecorded = connections.Progress{Next: r.cur.Next, HelloSent: p.HelloSent || r.cur.HelloSent, Truncated: r.cur.Truncated}, 0
		}
		o = r.cur
		return nil
	}
	renew := func() error {
		if time.Until(o.LeaseUntil) > d.cfg.Lease/2 && unrecorded < half {
			return nil
		}
		if err := join(); err != nil {
			return err
		}
		if time.Until(o.LeaseUntil) > d.cfg.Lease/2 {
			if unrecorded >= half {
				pending, unrecorded = d.checkpointAsync(ctx, o, holder, p), 0
			}
			return nil
		}
		var err error
		o, err = d.checkpoint(ctx, o, holder, &p)
		if errors.Is(err, connections.ErrLeaseLost) {
			released = true
		}
		if err == nil {
			unrecorded = 0
		}
		return err
	}
	handover := func() error {
		if err := join(); err != nil {
			return err
		}
		return d.handover(ctx, o, holder, p, &released)
	}
	for {
		if !p.HelloSent {
			tip, err := d.log.Tip(ctx, o.AgentID)
			if err != nil {
				return err
			}
			if err := renew(); err != nil {
				return d.unwelcomed(ctx, o, err, false)
			}
			d.gate(GateHello, o.AgentID)
			if err := d.postHello(ctx, o.ConnID, protocol.Marshal(protocol.NewHello(o.AgentID, tip))); err != nil {
				return d.postFailed(ctx, o, err)
			}
			p.HelloSent = true
			if err := join(); err != nil {
				return err
			}
			// A lease lost here may mean the connection was superseded while hello was
			// posted: Supersede then left the closing to this sender.
			if o, err = d.checkpoint(ctx, o, holder, &p); err != nil {
				if errors.Is(err, connections.ErrLeaseLost) {
					released = true
				}
				return d.unwelcomed(ctx, o, err, true)
			}
		}
		var batch []sessionlog.Event
		fromHints := false
		if o.Sub > 0 {
			batch, fromHints = take(hints, p.Next)
			hints = nil
			if !fromHints {
				if !stopAt.IsZero() && time.Now().After(stopAt) {
					return handover()
				}
				batch, err = d.read(ctx, o, p.Next, stopAt, renew)
				if errors.Is(err, errDeadline) {
					return handover()
				}
				if err != nil {
					return err
				}
			}
		}
		if len(batch) > 0 {
			live := p.Next >= o.ReplayEnd
			if live && d.lagging(p.Next, batch) {
				if err := join(); err != nil {
					return err
				}
				released = true // the record is gone with the connection
				return d.Close(ctx, o, protocol.CodeLagged, message(protocol.CodeLagged))
			}
			sub := o.Sub
			if p.Truncated && p.Next == o.From {
				if err := renew(); err != nil {
					return err
				}
				if err := d.post(ctx, o.ConnID, protocol.Marshal(protocol.NewReplayTruncated(o.Requested, o.From))); err != nil {
					return d.postFailed(ctx, o, err)
				}
				p.Truncated = false
			}
			for i := 0; i < len(batch); {
				if err := renew(); err != nil {
					return err
				}
				if o.Sub != sub {
					break // resubscribed: the rest of this batch belongs to the old subscription
				}
				// One event per post, or several for a batching client (batch.go).
				b, k, err := frame(batch[i:], o.Batch, half-unrecorded)
				if err != nil {
					return err
				}
				posted := time.Now()
				if err := d.post(ctx, o.ConnID, b); err != nil {
					return d.postFailed(ctx, o, err)
				}
				i += k
				p.Next = batch[i-1].Seq + 1
				unrecorded += k
				if live && time.Since(posted) >= slowPost {
					// A reader pushing back (lagged.go): check the outbound-queue bound now.
					if lag, err := d.laggingAt(ctx, o.AgentID, p.Next); err != nil || lag {
						if err == nil {
							err = join()
						}
						if err != nil {
							return err
						}
						released = true // the record is gone with the connection
						return d.Close(ctx, o, protocol.CodeLagged, message(protocol.CodeLagged))
					}
				}
				if !stopAt.IsZero() && time.Now().After(stopAt) {
					return handover()
				}
			}
			if d.nearDeadline(ctx) {
				return handover()
			}
			if err := join(); err != nil { // a resubscribe it found shows in o.Sub
				return err
			}
			if !fromHints || o.Sub != sub {
				continue // there may be more in the log
			}
		}
		if w.more != nil && o.Sub > 0 && (stopAt.IsZero() || time.Until(stopAt) > lingerFor) {
			if next := w.more(lingerFor); len(next) > 0 {
				hints = normalize(next)
				if w.budget > 0 {
					stopAt = time.Now().Add(w.budget)
				}
				if time.Since(looked) >= lingerLook {
					if err := join(); err != nil {
						return err
					}
					if o, err = d.checkpoint(ctx, o, holder, &p); err != nil {
						if errors.Is(err, connections.ErrLeaseLost) {
							released = true
						}
						return err
					}
					unrecorded, looked = 0, time.Now()
					if o.Pending {
						hints = nil // another process appended or asked: read the log
					}
				}
				continue
			}
		}
		if err := join(); err != nil {
			return err
		}
		cur, ok, err := d.store.Release(ctx, o, holder, p)
		if err != nil {
			if errors.Is(err, connections.ErrLeaseLost) {
				released = true
				return nil // superseded or expired: the new owner's sender takes over
			}
			return err
		}
		if ok {
			released = true
			return nil
		}
		// Pending or resubscribed: look at the log again under the same lease.
		lg.Debug("looking again", "pending", o.Sub == cur.Sub, "next_seq", p.Next)
		if cur.Sub != o.Sub {
			p = connections.Progress{Next: cur.Next, HelloSent: p.HelloSent || cur.HelloSent, Truncated: cur.Truncated}
		}
		o = cur
	}
}

// checkpoint writes p and, if the subscription moved, adopts the new one into p.
func (d *Deliverer) checkpoint(ctx context.Context, o connections.Owner, holder string, p *connections.Progress) (connections.Owner, error) {
	cur, err := d.store.Checkpoint(ctx, o, holder, *p, d.cfg.Lease)
	if err != nil {
		return o, err
	}
	if cur.Sub != o.Sub {
		*p = connections.Progress{Next: cur.Next, HelloSent: p.HelloSent || cur.HelloSent, Truncated: cur.Truncated}
	}
	return cur, nil
}

// read returns the next events from the log. Replay reads (below ReplayEnd) hold one of
// the cluster-wide replay slots for the duration of the read only; tail reads are never
// gated.
func (d *Deliverer) read(ctx context.Context, o connections.Owner, next int64, stopAt time.Time, renew func() error) ([]sessionlog.Event, error) {
	if next >= o.ReplayEnd {
		return d.log.Read(ctx, o.AgentID, next, d.cfg.OutboundQueue+1)
	}
	limit := int(min(int64(d.cfg.ReplayPage), o.ReplayEnd-next))
	holder := newHolder(false)
	slot, err := d.acquireSlot(ctx, holder, stopAt, renew)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := d.slots.Release(context.WithoutCancel(ctx), holder, slot); err != nil {
			d.logger.Error("release replay slot", "error", err, "slot", slot)
		}
	}()
	if obs := d.cfg.Observer; obs != nil {
		obs.ReplayRead(true)
		defer obs.ReplayRead(false)
	}
	return d.log.Read(ctx, o.AgentID, next, limit)
}

// acquireSlot waits, with jittered polling, for a replay slot. The connection stays
// open meanwhile; only this read waits, and the connection's lease is kept renewed. A
// sender with a budget (stopAt) hands the wait over when it runs out.
func (d *Deliverer) acquireSlot(ctx context.Context, holder string, stopAt time.Time, renew func() error) (int, error) {
	began := time.Now()
	for wait := 20 * time.Millisecond; ; wait = min(wait*2, 500*time.Millisecond) {
		slot, err := d.slots.TryAcquire(ctx, holder, mrand.IntN(d.cfg.MaxConcurrentReplays))
		if err != nil || slot >= 0 {
			if waited := time.Since(began); waited > time.Second {
				d.logger.Debug("waited for a replay slot", "wait_ms", waited.Milliseconds())
			}
			return slot, err
		}
		if err := renew(); err != nil {
			return -1, err
		}
		if d.nearDeadline(ctx) || (!stopAt.IsZero() && time.Now().After(stopAt)) {
			return -1, errDeadline
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("delivery: wait for replay slot: %w", ctx.Err())
		case <-time.After(wait/2 + mrand.N(wait/2+1)):
		}
	}
}

// lagging reports whether the live tail is more than OutboundQueue events behind.
func (d *Deliverer) lagging(next int64, batch []sessionlog.Event) bool {
	tip := batch[len(batch)-1].Seq
	if len(batch) > d.cfg.OutboundQueue {
		return true
	}
	return tip-next+1 > int64(d.cfg.OutboundQueue)
}

func (d *Deliverer) nearDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < d.cfg.HandoverMargin
}

// handover leaves the progress and asks a fresh invocation to continue.
func (d *Deliverer) handover(ctx context.Context, o connections.Owner, holder string, p connections.Progress, released *bool) error {
	if err := d.store.Abandon(ctx, o, holder, p); err != nil {
		return err
	}
	*released = true
	return d.Kick(ctx, Kick{Kind: KickPump, AgentID: o.AgentID})
}

// post sends one frame. It returns ErrGone if the connection no longer exists.
func (d *Deliverer) post(ctx context.Context, connID string, data []byte) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		_, err = d.posts.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(connID), Data: data})
		if err == nil {
			return nil
		}
		var gone *gwtypes.GoneException
		if errors.As(err, &gone) {
			return fmt.Errorf("%w: %s", ErrGone, connID)
		}
		if ctx.Err() != nil {
			break
		}
		// Throttled (LimitExceeded) or a passing failure: back off and try again; the
		// frame order is kept because nothing else is posted meanwhile.
		time.Sleep(time.Duration(25<<attempt)*time.Millisecond + mrand.N(25*time.Millisecond))
	}
	return fmt.Errorf("%w: %s: %v", ErrPost, connID, err)
}

// postHello posts hello, allowing a freshly accepted connection a grace period: on AWS
// a post can race the end of $connect and answer Gone until the socket is open.
func (d *Deliverer) postHello(ctx context.Context, connID string, data []byte) error {
	deadline := time.Now().Add(d.cfg.HelloGrace)
	for {
		err := d.post(ctx, connID, data)
		if !errors.Is(err, ErrGone) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// postFailed handles a post error under the lease: a gone connection is forgotten.
func (d *Deliverer) postFailed(ctx context.Context, o connections.Owner, err error) error {
	if errors.Is(err, ErrGone) {
		d.logger.Info("connection gone", "agent_id", o.AgentID, "connection_id", o.ConnID)
		if ferr := d.store.Forget(ctx, o.ConnID, o.AgentID); ferr != nil {
			return ferr
		}
		return nil
	}
	return err
}

// Close tells the owner connection why it is being dropped and drops it: an error
// frame, then DeleteConnection; the records go with it.
func (d *Deliverer) Close(ctx context.Context, o connections.Owner, code protocol.Code, msg string) error {
	d.logger.Info("closing connection", "agent_id", o.AgentID, "connection_id", o.ConnID, "code", string(code))
	if err := d.store.SetState(ctx, o.ConnID, stateFor(code)); err != nil {
		return err
	}
	if err := d.store.Disown(ctx, o.AgentID, o.ConnID); err != nil {
		return err
	}
	return d.Drop(ctx, o.ConnID, code, msg)
}

// Supersede drops prev, the ownership record a connect has just replaced (see
// connections.Store.Claim), with superseded — hello first if the connection was never
// sent it, since hello comes before anything else (docs/protocol.md):
//
//   - hello went out (the common case): Drop — one post and one DeleteConnection, as
//     for any drop;
//   - no hello yet, and a sender holds a live lease on the record: that sender is
//     posting hello or about to. It finds its lease lost when it records hello, and
//     then sends superseded and closes (unwelcomed). Nothing is posted here, so the two
//     never race on the socket;
//   - no hello yet and no live lease: nobody else can post to the connection any more
//     (a sender acquires only the record, which now names the new owner). An
//     asynchronous deliver invocation sends hello, superseded and closes, allowing the
//     hello grace of a connection still finishing $connect (KickDrop with Hello).
func (d *Deliverer) Supersede(ctx context.Context, prev connections.Owner) error {
	switch {
	case prev.ConnID == "":
		return nil
	case prev.HelloSent:
		return d.Drop(ctx, prev.ConnID, protocol.CodeSuperseded, message(protocol.CodeSuperseded))
	case prev.Lease != "" && prev.LeaseUntil.After(time.Now()):
		d.logger.Info("superseded before hello: its sender closes it", "agent_id", prev.AgentID, "connection_id", prev.ConnID)
		return nil
	default:
		return d.Kick(ctx, Kick{Kind: KickDrop, AgentID: prev.AgentID, ConnectionID: prev.ConnID, Code: protocol.CodeSuperseded, Hello: true})
	}
}

// unwelcomed finishes a sender that lost its lease (cause) while hello was owed to
// o.ConnID: if the connection was superseded meanwhile, Supersede left it to this
// sender, which sends hello (unless helloPosted), superseded, and closes it. Any other
// loss (the connection gone, the lease expired and taken) returns cause. It costs one
// read, on this path only.
func (d *Deliverer) unwelcomed(ctx context.Context, o connections.Owner, cause error, helloPosted bool) error {
	if !errors.Is(cause, connections.ErrLeaseLost) {
		return cause
	}
	c, err := d.store.Conn(ctx, o.ConnID)
	if errors.Is(err, connections.ErrNotFound) {
		return cause
	}
	if err != nil {
		return err
	}
	if c.State != connections.StateSuperseded {
		return cause
	}
	if !helloPosted {
		tip, err := d.log.Tip(ctx, o.AgentID)
		if err != nil {
			return err
		}
		if err := d.postHello(ctx, o.ConnID, protocol.Marshal(protocol.NewHello(o.AgentID, tip))); err != nil {
			if errors.Is(err, ErrGone) {
				return nil
			}
			return err
		}
	}
	return d.Drop(ctx, o.ConnID, protocol.CodeSuperseded, message(protocol.CodeSuperseded))
}

// Drop posts an error frame with code to connID and closes it. A connection already
// gone is not an error.
func (d *Deliverer) Drop(ctx context.Context, connID string, code protocol.Code, msg string) error {
	err := d.post(ctx, connID, protocol.Marshal(protocol.NewError(code, msg)))
	if err != nil && !errors.Is(err, ErrGone) {
		d.logger.Warn("post error frame", "connection_id", connID, "code", string(code), "error", err)
	}
	return d.deleteConn(ctx, connID)
}

func (d *Deliverer) deleteConn(ctx context.Context, connID string) error {
	_, err := d.posts.DeleteConnection(ctx, &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(connID)})
	var gone *gwtypes.GoneException
	if err != nil && !errors.As(err, &gone) {
		return fmt.Errorf("delivery: delete connection %s: %w", connID, err)
	}
	return nil
}

// take returns the run of hints that starts exactly at next, if any.
func take(hints []sessionlog.Event, next int64) ([]sessionlog.Event, bool) {
	for i, ev := range hints {
		if ev.Seq == next {
			return hints[i:], true
		}
		if ev.Seq > next {
			return nil, false
		}
	}
	return nil, false
}

// normalize sorts hints by seq, drops duplicates and keeps only the first contiguous run
// of the sorted list's tail that can be sent without a read.
func normalize(hints []sessionlog.Event) []sessionlog.Event {
	if len(hints) == 0 {
		return nil
	}
	out := append([]sessionlog.Event(nil), hints...)
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	k := 0
	for i := range out {
		if k > 0 && out[k-1].Seq == out[i].Seq {
			continue
		}
		out[k] = out[i]
		k++
	}
	out = out[:k]
	// Only a gapless run can be sent from hints; cut at the first gap.
	for i := 1; i < len(out); i++ {
		if out[i].Seq != out[i-1].Seq+1 {
			return out[:i]
		}
	}
	return out
}

// Kick kinds: what a deliver invocation started asynchronously should do.
const (
	KickPump = "pump" // send what the owner is owed (hello after connect, handover)
	KickDrop = "drop" // tell a connection Code and close it (unauthorized at connect)
	// KickWatch outlives a lease holder that was left a Pending mark: see watch.
	KickWatch = "watch"
)

// Kick is the payload of an asynchronous deliver invocation.
type Kick struct {
	Kind         string        `json:"kind"`
	AgentID      string        `json:"agent_id,omitempty"`
	ConnectionID string        `json:"connection_id,omitempty"`
	Code         protocol.Code `json:"code,omitempty"`
	Watcher      string        `json:"watcher,omitempty"` // KickWatch: the claim to act under
	// Hello (KickDrop): the connection was never sent hello; send it (with AgentID's
	// tip) before the error frame.
	Hello bool `json:"hello,omitempty"`
}

// Kick invokes the deliver function asynchronously with k.
func (d *Deliverer) Kick(ctx context.Context, k Kick) error {
	if d.invoke == nil {
		return errors.New("delivery: no invoker configured")
	}
	payload, _ := json.Marshal(k)
	_, err := d.invoke.Invoke(ctx, &lambda.InvokeInput{
		FunctionName:   aws.String(d.cfg.DeliverFunction),
		InvocationType: lambdatypes.InvocationTypeEvent,
		Payload:        payload,
	})
	if err != nil {
		return fmt.Errorf("delivery: kick %s %s: %w", k.Kind, k.AgentID, err)
	}
	return nil
}

// HandleKick serves an asynchronous invocation.
func (d *Deliverer) HandleKick(ctx context.Context, k Kick) error {
	switch k.Kind {
	case KickPump:
		d.gate(GateKickPump, k.AgentID)
		_, err := d.pump(ctx, k.AgentID, nil, wake{backstop: true, retried: true})
		return err
	case KickWatch:
		return d.runWatch(ctx, k)
	case KickDrop:
		frames := [][]byte{protocol.Marshal(protocol.NewError(k.Code, message(k.Code)))}
		if k.Hello {
			tip, err := d.log.Tip(ctx, k.AgentID)
			if err != nil {
				return err
			}
			frames = append([][]byte{protocol.Marshal(protocol.NewHello(k.AgentID, tip))}, frames...)
		}
		// The connection may still be finishing $connect: allow the hello grace on the
		// first post.
		deadline := time.Now().Add(d.cfg.HelloGrace)
		for i := 0; i < len(frames); {
			err := d.post(ctx, k.ConnectionID, frames[i])
			if errors.Is(err, ErrGone) && i == 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if errors.Is(err, ErrGone) {
				return nil
			}
			if err != nil {
				return err
			}
			i++
		}
		return d.deleteConn(ctx, k.ConnectionID)
	default:
		return fmt.Errorf("delivery: unknown kick kind %q", k.Kind)
	}
}

func message(code protocol.Code) string { return protocol.Refusal(code).Message }

// Send posts one protocol frame to connID outside the event stream (an error reply).
// It returns ErrGone if the connection no longer exists.
func (d *Deliverer) Send(ctx context.Context, connID string, frame []byte) error {
	return d.post(ctx, connID, frame)
}

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
	live := o.Lease != "" && !o.LeaseUntil.Before(now)
	switch {
	case o.HelloSent && o.Sub == 0:
		return true
	case !o.Pending && o.Lease == "":
		return true
	default:
		return live && selfHealing(o.Lease)
	}
}

// watch is called by a backstop wake-up (see wake) that left a Pending mark with the
// lease holder of o. A live holder serves the mark before it lets go; a dead one never
// will, and no later wake-up may come. Unless the record is covered (its own looks, a
// few hundred milliseconds at most, usually see the holder let go), one watcher per
// agent — an asynchronous deliver invocation, claimed on the ownership record — waits
// for the lease to be let go or to run out, and takes over in the second case. A
// wake-up that finds a watcher already claimed relies on it: the watcher gives up its
// claim only while no mark is set (connections.EndWatch).
func (d *Deliverer) watch(ctx context.Context, o connections.Owner, upTo int64) error {
	for _, pause := range watchLooks {
		if covered(o, time.Now()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		var err error
		if o, err = d.store.Owner(ctx, o.AgentID); errors.Is(err, connections.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
	}
	if covered(o, time.Now()) {
		return nil
	}
	id := newHolder(true)
	until := o.LeaseUntil
	if now := time.Now(); until.Before(now) {
		until = now
	}
	claimed, err := d.store.ClaimWatch(ctx, o.AgentID, id, until.Add(watchSlack))
	if err != nil || !claimed {
		return err
	}
	if err := d.Kick(ctx, Kick{Kind: KickWatch, AgentID: o.AgentID, Watcher: id}); err != nil {
		// Nobody is watching: give the claim back so that the retried wake-up can claim.
		if _, eerr := d.store.EndWatch(context.WithoutCancel(ctx), o.AgentID, id, true); eerr != nil {
			d.logger.Error("end watch", "agent_id", o.AgentID, "error", eerr)
		}
		return err
	}
	d.logger.Debug("watching a busy sender", "agent_id", o.AgentID, "up_to", upTo, "lease", o.Lease, "lease_until", o.LeaseUntil.UnixMilli())
	return nil
}

// runWatch serves a KickWatch: it looks at the record with a growing pause (one read
// each) until it is covered, then gives its claim up; a lease that runs out uncovered
// belonged to a dead holder, and the watcher sends in its place. Near its invocation's
// deadline it hands the watch to a fresh one.
func (d *Deliverer) runWatch(ctx context.Context, k Kick) error {
	lg := d.logger.With("agent_id", k.AgentID, "watcher", k.Watcher)
	pause := watchSlack
	var claimedUntil time.Time
	for {
		o, err := d.store.Owner(ctx, k.AgentID)
		if errors.Is(err, connections.ErrNotFound) {
			return nil // the connection is gone, and the watch with its record
		}
		if err != nil {
			return err
		}
		now := time.Now()
		live := o.Lease != "" && !o.LeaseUntil.Before(now)
		switch {
		case covered(o, now):
			// Forced only where the record is covered with a mark set; otherwise a mark
			// that lands meanwhile makes EndWatch refuse, and we look again.
			done, err := d.store.EndWatch(ctx, k.AgentID, k.Watcher, o.Pending)
			if err != nil || done {
				return err
			}
		case !live:
			lg.Info("lease holder gone with work owed: taking over", "lease", o.Lease, "lease_until", o.LeaseUntil.UnixMilli(), "pending", o.Pending)
			if _, err := d.pump(ctx, k.AgentID, nil, wake{retried: true}); err != nil {
				return err
			}
		default:
			wake := o.LeaseUntil.Add(watchSlack)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < time.Until(wake)+d.cfg.HandoverMargin {
				return d.Kick(ctx, k) // carry on in a fresh invocation, under the same claim
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
