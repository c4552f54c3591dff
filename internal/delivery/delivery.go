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
// while Pending is set, so it looks at the log again — no wake-up is ever lost. Some
// waits do look again on a timer, each bounded and backing off: the backstop's looks
// before it marks a live holder behind its events (look), the watcher that outlives a
// marked holder and takes over a sender whose lease ran out (watch.go), the closer of a
// connection superseded before its hello (welcome.go), a sender waiting for a replay
// slot (replay.go) and a hello posted again while its connection finishes $connect
// (post.go). An event a wake-up announced is sent by that wake-up's sender or by the
// holder it marked; only should that holder die does the watcher's timer decide.
package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/invoke"
	"github.com/terret/terret-ws/internal/lease"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// Errors returned by this package.
var (
	ErrGone = errors.New("delivery: connection gone")
	ErrPost = errors.New("delivery: post failed")
	// ErrFull (with ErrPost) is a post API Gateway kept refusing with
	// LimitExceededException, which also means "the WebSocket client side buffer is
	// full": the frame was not taken, and the client is counted as not having it.
	ErrFull = errors.New("delivery: client buffer full")
	// errDeadline stops a sender that must hand its work to a fresh invocation.
	errDeadline = errors.New("delivery: invocation deadline near")
	// errLagging stops posting a batch to a live reader found past the outbound-queue
	// bound (lagged.go); the sender then closes the connection with lagged.
	errLagging = errors.New("delivery: reader past the outbound-queue bound")
)

// PostAPI is the part of the @connections client delivery uses.
type PostAPI interface {
	PostToConnection(context.Context, *apigatewaymanagementapi.PostToConnectionInput, ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error)
	DeleteConnection(context.Context, *apigatewaymanagementapi.DeleteConnectionInput, ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.DeleteConnectionOutput, error)
}

var _ PostAPI = (*apigatewaymanagementapi.Client)(nil)

// InvokeAPI is the Lambda Invoke API, used to hand work to a fresh invocation.
type InvokeAPI interface {
	Invoke(context.Context, *invoke.Input) (*invoke.Output, error)
}

var _ InvokeAPI = (*invoke.Client)(nil)

// LogReader is the part of the session log delivery reads.
type LogReader interface {
	Read(ctx context.Context, agentID string, from int64, limit int) ([]sessionlog.Event, error)
	Tip(ctx context.Context, agentID string) (int64, error)
	Epoch(ctx context.Context, agentID string) (string, error)
	// Retained is where a reader from seq from finds the retained log (from itself
	// unless retention expired events there).
	Retained(ctx context.Context, agentID string, from int64) (int64, error)
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
	HelloGrace           time.Duration // how long a fresh connection may answer Gone; default DefaultHelloGrace
	HandoverMargin       time.Duration // stop this long before the invocation deadline; default 10s
	// CheckpointEvery bounds the events a sender posts beyond its stored cursor
	// (default DefaultCheckpointEvery): a sender that dies re-sends at most this many
	// through its successor. It begins a cursor write every CheckpointEvery/4 events (a
	// replay pays one write unit per that many), and posts on while the write is under
	// way, waiting for it only at the bound; a batch holds at most CheckpointEvery/2
	// events.
	CheckpointEvery int
	Logger          *slog.Logger
	// Observer, if set, is told when a replay read starts and ends (metrics, tests);
	// one that is a DeliveryObserver also hears what senders post and drop (observe.go).
	Observer Observer
}

// DefaultCheckpointEvery is Config.CheckpointEvery's default. It is large enough for
// the cursor write (3–20 ms on DynamoDB Local, a few on DynamoDB) to hide behind the
// posts of a batched replay, whose 32 KB messages carry about a hundred events each, and
// it makes a turn's events go out with no cursor write before the release.
const DefaultCheckpointEvery = 1024

// Observer watches replay reads.
type Observer interface {
	ReplayRead(start bool)
}

// Gate is an Observer a test may add to hold a sender at a point of its work, to hit a
// race window deterministically. Points: GateKickPump (an asynchronous pump kick,
// before it takes the lease), GateHello (under the lease, before hello is posted),
// GateReplayRead (a replay page read in the background, before the sender may take it),
// GateBackstopLook (a backstop's look at a record held by a live sender, before it
// marks) and the
// closing points of welcome.go (GateCloseHello, GateCloseSuperseded).
type Gate interface {
	Wait(point, agentID string)
}

// Gate points.
const (
	GateKickPump   = "kick_pump"
	GateHello      = "hello"
	GateReplayRead = "replay_read"
	// GateBackstopLook: a backstop wake-up that met a live lease behind its events,
	// before each of its looks at the record before it marks (look).
	GateBackstopLook = "backstop_look"
)

func (d *Deliverer) gate(point, agentID string) {
	if g, ok := d.cfg.Observer.(Gate); ok {
		g.Wait(point, agentID)
	}
}

// Records is the part of the ownership-record store (connections.Store) the delivery
// core uses: the lease, the cursor and the Pending mark, each write conditional on the
// record as the caller holds it. See connections.Store for each method's contract.
type Records interface {
	Owner(ctx context.Context, agentID string) (connections.Owner, error)
	Conn(ctx context.Context, connID string) (connections.Conn, error)
	Subscribe(ctx context.Context, agentID, connID string, sub connections.Subscription) (connections.Owner, error)
	Acquire(ctx context.Context, agentID string, h connections.Holder, ttl time.Duration, upTo int64) (connections.AcquireResult, error)
	MarkPending(ctx context.Context, agentID string, upTo int64) (bool, error)
	Checkpoint(ctx context.Context, o connections.Owner, holder string, p connections.Progress, ttl time.Duration) (connections.Owner, error)
	Release(ctx context.Context, o connections.Owner, holder string, p connections.Progress) (connections.Owner, bool, error)
	Abandon(ctx context.Context, o connections.Owner, holder string, p connections.Progress) error
	ClaimWatch(ctx context.Context, agentID, watcher string, until time.Time) (bool, error)
	EndWatch(ctx context.Context, seen connections.Owner, watcher string, force bool) (bool, error)
	SetState(ctx context.Context, connID string, state connections.State) error
	// Departed: $disconnect recorded that connID, a connection without a record, has
	// left (connections.Store.Depart); the first-frame loop of a refused one reads it.
	Departed(ctx context.Context, connID string) (bool, error)
	Disown(ctx context.Context, agentID, connID string) error
	Forget(ctx context.Context, connID, agentID string) error
	// Hello first (welcome.go).
	OweReply(ctx context.Context, agentID, connID string, r connections.Reply) error
	TakeReplies(ctx context.Context, agentID, connID string) ([]connections.Reply, error)
	TakeClose(ctx context.Context, connID, holder string, ttl time.Duration, helloPosted bool) (connections.Conn, bool, error)
	ClearOwed(ctx context.Context, connID, holder string) error
	// Now is the clock the records' lease rules read (connections.NewWithClock): every
	// lease this package tests itself (lease.Live, covered) is tested at this time, so
	// that it agrees with the store's conditional writes to the millisecond.
	Now() time.Time
}

var _ Records = (*connections.Store)(nil)

// ReplaySlots is the cluster-wide bound on replay reads (connections.Slots), polled
// one group of slots at a time.
type ReplaySlots interface {
	Groups() int
	TryAcquire(ctx context.Context, holder string, group int) (int, error)
	Release(ctx context.Context, holder string, i int) error
}

var _ ReplaySlots = (*connections.Slots)(nil)

// Deliverer sends logs to sockets. It is safe for concurrent use.
type Deliverer struct {
	cfg    Config
	log    LogReader
	store  Records
	slots  ReplaySlots
	posts  PostAPI
	invoke InvokeAPI
	logger *slog.Logger
}

// New returns a Deliverer. invoke may be nil where no handover is possible (tests).
func New(cfg Config, log LogReader, store *connections.Store, posts PostAPI, invoke InvokeAPI) *Deliverer {
	cfg = cfg.withDefaults()
	return newDeliverer(cfg, log, store, store.NewSlots(cfg.MaxConcurrentReplays, cfg.Lease), posts, invoke)
}

// newDeliverer returns a Deliverer over any implementation of its dependencies: the
// delivery algorithm needs no more than these interfaces (memory_test.go runs it in
// memory).
func newDeliverer(cfg Config, log LogReader, store Records, slots ReplaySlots, posts PostAPI, invoke InvokeAPI) *Deliverer {
	cfg = cfg.withDefaults()
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Deliverer{
		cfg: cfg, log: log, store: store, slots: slots, posts: posts, invoke: invoke, logger: logger,
	}
}

// withDefaults fills in the defaults of the fields left zero.
func (cfg Config) withDefaults() Config {
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
		cfg.HelloGrace = DefaultHelloGrace
	}
	if cfg.HandoverMargin <= 0 {
		cfg.HandoverMargin = 10 * time.Second
	}
	if cfg.CheckpointEvery <= 0 {
		cfg.CheckpointEvery = DefaultCheckpointEvery
	}
	return cfg
}

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
	// retried: the caller is an asynchronous deliver invocation (connections.HolderRetried).
	retried bool
	// preRead: read the record before trying the lease, and stop if nothing is owed —
	// 1 read unit where a failed conditional write would cost 1 write unit. The stream
	// consumer does, since most of its wake-ups find the events sent or nobody
	// subscribed; the fast path does only for a session whose last wake-up found
	// nobody subscribed, since most of its wake-ups send.
	preRead bool
	// seen, with preRead, is the record as already read (pumpSeats reads an agent's
	// seats together); nil: the pump reads it itself. seenGone: it was found missing.
	seen     *connections.Owner
	seenGone bool
	// more, if set, lets a sender that has sent everything wait up to its argument for
	// the appender's next events before it lets the lease go (the fast path's linger):
	// a turn's events, streamed one after another, then go out under one lease, with no
	// lease write of their own. Each batch it returns renews the budget.
	more   func(time.Duration) []sessionlog.Event
	budget time.Duration
	// sent, if set, is told the sender's cursor each time it moved past events it
	// posted, and when a round found nothing owed below it: every event before next
	// has reached the connection (or was never its to receive). The fast path holds
	// an event's observer posts until the driver's sender says so (Notifier).
	sent func(next int64)
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

// pump wakes agentID's sender as w describes, following the steps of
// docs/architecture.md, "Delivery": the record read first if w asks (readFirst), then
// 1. the lease tried (acquire), 2. a holder found marked (markHeld), or 3 and 4 the
// events sent under the lease and the lease let go (serve). idle reports that nothing
// is owed to anyone — no owner connection, or one not subscribed — for the fast path's
// benefit.
func (d *Deliverer) pump(ctx context.Context, agentID string, hints []sessionlog.Event, w wake) (idle bool, err error) {
	upTo := reach(hints)
	hints = normalize(hints)
	var pre preRead
	if upTo >= 0 && w.preRead {
		if pre, err = d.readFirst(ctx, agentID, upTo, w); err != nil || pre.done {
			return pre.idle, err
		}
	}
	holder := holderFor(w)
	for {
		r, err := d.acquire(ctx, agentID, holder, upTo, pre.takeHeld())
		if err != nil {
			return false, err
		}
		switch r.Outcome {
		case connections.NoOwner:
			return true, nil // nobody owns the agent: the log keeps the events for the next subscribe
		case connections.NothingOwed:
			return r.Owner.HelloSent && r.Owner.Sub == 0, nil
		case connections.LeaseHeld:
			again, err := d.markHeld(ctx, agentID, r.Owner, upTo, w, pre.looked)
			if again {
				continue // the lease was let go meanwhile: try to take it
			}
			return false, err
		}
		return false, d.serve(ctx, r.Owner, holder.ID, hints, w)
	}
}

// reach is how far a wake-up's hints reach: the highest hinted event, past any gap in
// the hints (a split or reordered stream batch) — a mark reaches only as far as its
// seq; -1 (no hints): whatever is new.
func reach(hints []sessionlog.Event) int64 {
	upTo := int64(-1)
	for _, ev := range hints {
		upTo = max(upTo, ev.Seq)
	}
	return upTo
}

// holderFor is the lease holder a wake-up acquires as.
func holderFor(w wake) connections.Holder {
	if w.retried {
		return connections.NewHolder(connections.HolderRetried)
	}
	return connections.NewHolder(connections.HolderOnce)
}

// preRead is what the read of the record before the lease (readFirst) found.
type preRead struct {
	// done: nothing to do — the events sent, nobody subscribed, or a live holder's
	// mark already covering them; idle as pump reports it.
	done, idle bool
	// held: the record as found held by a live sender behind the events. The lease is
	// then not tried — a failed conditional write, 1 write unit — but the mark left
	// straight away; MarkPending finds out if the holder let go meanwhile.
	held *connections.AcquireResult
	// looked: the looks at the record a backstop made before it marks (look), in place
	// of the first of watch's looks.
	looked int
}

// takeHeld returns the live holder the read found, once: the next try is a real one.
func (p *preRead) takeHeld() *connections.AcquireResult {
	r := p.held
	p.held = nil
	return r
}

// readFirst reads agentID's record before the lease is tried (wake.preRead), and
// looks again while a live holder is behind the events upTo, as a backstop does
// before it marks (lookFirst).
func (d *Deliverer) readFirst(ctx context.Context, agentID string, upTo int64, w wake) (preRead, error) {
	var pre preRead
	o, err := d.seenOwner(ctx, agentID, w)
	for err == nil {
		if o.HelloSent && (o.Sub == 0 || o.Next > upTo) && !o.Pending {
			return preRead{done: true, idle: o.Sub == 0}, nil
		}
		now := d.store.Now()
		if o.Lease == "" || !lease.Live(o.LeaseUntil, now) {
			return pre, nil // let go or run out: try the lease
		}
		if servedBy(o, upTo, now) {
			return preRead{done: true}, nil
		}
		if pre.looked == lookFirst || !w.backstop || covered(o, now) {
			pre.held = &connections.AcquireResult{Owner: o, Outcome: connections.LeaseHeld}
			return pre, nil
		}
		o, err = d.look(ctx, agentID, watchLooks[pre.looked])
		pre.looked++
	}
	if errors.Is(err, connections.ErrNotFound) {
		return preRead{done: true, idle: true}, nil
	}
	return preRead{}, err
}

// seenOwner is the record as the wake-up already read it (wake.seen, wake.seenGone),
// or as read now.
func (d *Deliverer) seenOwner(ctx context.Context, agentID string, w wake) (connections.Owner, error) {
	switch {
	case w.seenGone:
		return connections.Owner{}, fmt.Errorf("%w: %s", connections.ErrNotFound, agentID)
	case w.seen != nil:
		return *w.seen, nil
	}
	return d.store.Owner(ctx, agentID)
}

// servedBy reports whether o, a record under a live lease, shows the events upTo
// served by its holder: the cursor past them, or a mark already left with the holder
// and served should it die. Watched: the watcher ends its claim only once it has seen
// the lease let go and found nothing owed after that (runWatch), so these events are
// sent by the holder, or found by the watcher's last check — whatever the mark's seq.
// A retried holder, which Lambda retries should it die, needs a mark that reaches
// these events: it reads the log before it lets go unless its cursor is past the
// mark's seq.
func servedBy(o connections.Owner, upTo int64, now time.Time) bool {
	if o.HelloSent && o.Next > upTo {
		return true
	}
	return o.Pending && (lease.Live(o.WatchUntil, now) || covered(o, now) && o.MarkReaches(upTo))
}

// acquire is step 1: the sender lease, tried — or held, the live holder readFirst
// found, in place of a try.
func (d *Deliverer) acquire(ctx context.Context, agentID string, holder connections.Holder, upTo int64, held *connections.AcquireResult) (connections.AcquireResult, error) {
	if held != nil {
		return *held, nil
	}
	return d.store.Acquire(ctx, agentID, holder, d.cfg.Lease, upTo)
}

// markHeld is step 2: agentID's lease is held by o's holder, so a Pending mark is left for
// it, and a backstop makes sure it is served (watch, with the looks made before as its
// first). again reports the lease let go meanwhile: try to take it.
func (d *Deliverer) markHeld(ctx context.Context, agentID string, o connections.Owner, upTo int64, w wake, looked int) (again bool, err error) {
	if upTo >= 0 && o.HelloSent && o.Next > upTo {
		return false, nil // already past every hinted event
	}
	marked, err := d.store.MarkPending(ctx, agentID, upTo)
	if err != nil || !marked {
		return err == nil, err
	}
	if w.backstop {
		return false, d.watch(ctx, o, upTo, watchLooks[looked:])
	}
	return false, nil
}

// serve is steps 3 and 4: send under the lease, then let it go (sender.run). A lease
// lost on the way is no error: another sender holds the connection now and continues
// from the cursor.
func (d *Deliverer) serve(ctx context.Context, o connections.Owner, holder string, hints []sessionlog.Event, w wake) error {
	err := d.newSender(ctx, o, holder, hints, w).run()
	if errors.Is(err, connections.ErrLeaseLost) {
		return nil
	}
	return err
}

// lookFirst is how many of watch's looks (watchLooks) a backstop wake-up that reads a
// live lease behind its events makes before it marks: the first two, 50 and 150 ms
// after its read. A fast-path holder that ends its turn lets go within them (under load,
// a plain turn's release often comes after the first).
const lookFirst = 2

// look is one of a backstop's looks at agentID's record before it marks (lookFirst),
// after its read found a live lease whose cursor is behind the batch's events: one
// strongly consistent read (1 read unit), pause later — a look watch would make after
// a mark, made before it instead, so the reads do not change. A holder that sends the
// events it holds and lets go meanwhile shows a cursor past them, and the backstop
// writes nothing: no mark (1 write unit). The read, not the lease it shows, decides: the
// cursor stored on the record only ever passes events that were posted, so a backstop
// that finds it past its batch skips the mark whatever the holder does next; any other
// record is served as before — a live lease marked (MarkPending is conditional on the
// lease and the cursor as they stand then), a free one tried (docs/architecture.md,
// "The looks before the mark").
func (d *Deliverer) look(ctx context.Context, agentID string, pause time.Duration) (connections.Owner, error) {
	select {
	case <-ctx.Done():
		return connections.Owner{}, ctx.Err()
	case <-time.After(pause):
	}
	d.gate(GateBackstopLook, agentID)
	return d.store.Owner(ctx, agentID)
}
