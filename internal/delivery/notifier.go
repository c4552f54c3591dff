package delivery

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// Notifier is the appender's fast path: an appender (the runner) hands it every event it
// appends, and a background sender delivers them at once when the connection's lease is
// free — one DynamoDB write after the append instead of a Streams polling delay. Events
// appended while a send is under way are coalesced into the next one. The stream
// consumer stays the backstop: whatever the fast path misses, it delivers.
//
// The fast path tries the lease straight away, without reading the ownership record
// first: most of its wake-ups send. When one finds nothing owed (nobody connected, or
// not subscribed), the session's next wake-ups read the record first again (1 read unit
// instead of a failed conditional write's 1 write unit) until one finds something to
// send: an agent nobody watches costs what it did before the fast path skipped the read.
type Notifier struct {
	d      *Deliverer
	budget time.Duration

	mu        sync.Mutex
	queues    map[string]*queue        // by session, while a sender runs for it
	unwatched map[string]bool          // sessions whose last wake-up found nothing owed
	arrived   map[string]chan struct{} // a lingering sender's wake-up, by session
	flushes   int                      // FlushAll calls so far: a linger ends at the next
	flushing  int                      // FlushAll calls under way: no linger starts
	busy      int
	idle      *sync.Cond // broadcast whenever a send ends: flushes look again
	// observers caches each session's observer seats (observers.go): an append is
	// queued for each of them too, each seat with its own sender.
	observers map[string]*seatCache
	// held keeps, by session, the appended events whose observer posts wait for the
	// driver's: the driver's sender reports its cursor (wake.sent) and each event
	// below it goes to the observers' seats then, or all of them once the driver's
	// send ends, whatever it found (nobody subscribed, the lease held elsewhere, an
	// error). So the observers' posts never compete with the driver's own post of the
	// same event, and an observer gets an event no later than one driver send after it.
	held map[string][]heldEvent
}

// heldEvent is an appended event waiting for the driver's post before its observers'.
type heldEvent struct {
	ctx   context.Context
	ev    sessionlog.Event
	inv   *invocation
	seats []string
}

// seatCache is a session's observer seats as last read, and when.
type seatCache struct {
	seats []string
	at    time.Time
}

// ObserverRefresh is how long the fast path trusts its cache of a session's observers
// before its sender reads the observer index again (1 read unit): an observer that
// connected meanwhile is served by the stream consumer until then.
const ObserverRefresh = time.Second

// queue is the work of one session's sender.
type queue struct {
	events []sessionlog.Event  // appended, not yet taken by the sender
	queued map[*invocation]int // the invocations whose events are in events, and how many
	taken  map[*invocation]int // the same for the events the send under way took
}

// take hands the queued events to the send under way.
func (q *queue) take() []sessionlog.Event {
	hints := q.events
	q.events = nil
	for inv, k := range q.queued {
		q.taken[inv] += k
	}
	clear(q.queued)
	return hints
}

// flushing reports whether an invocation whose events the send under way carries is
// flushing: it appends no more, so a linger would only hold it up.
func (q *queue) flushing() bool {
	for inv := range q.taken {
		if inv.flushing {
			return true
		}
	}
	return false
}

// invocation is one handler invocation's share of the fast path (Notifier.Invocation).
// Its fields are guarded by n.mu.
type invocation struct {
	n        *Notifier
	owed     int  // its events whose send has not finished
	flushing bool // its flush has begun
}

type invocationKey struct{}

// NewNotifier returns a Notifier that gives each send at most budget.
func NewNotifier(d *Deliverer, budget time.Duration) *Notifier {
	n := &Notifier{d: d, budget: budget, queues: map[string]*queue{}, unwatched: map[string]bool{}, arrived: map[string]chan struct{}{},
		observers: map[string]*seatCache{}, held: map[string][]heldEvent{}}
	n.idle = sync.NewCond(&n.mu)
	return n
}

// Invocation begins one handler invocation's share of the fast path. The events
// appended with the returned context (OnAppend) are the invocation's; flush, called
// before the handler returns, waits until the sends carrying them have finished — and
// for no other send: another invocation's long send (the runner's turn, in a process
// that serves both) does not hold this one up. A Lambda runtime freezes a returned
// invocation's goroutines until its next invocation, so a send still under way at the
// return would stall, holding the session's lease; flush is what prevents that. As its
// invocation appends no more, flush also ends at once the linger of the senders that
// carry its events. Cost: none beyond the wait.
func (n *Notifier) Invocation(ctx context.Context) (context.Context, func()) {
	inv := &invocation{n: n}
	return context.WithValue(ctx, invocationKey{}, inv), func() { n.flush(inv) }
}

// OnAppend queues ev for delivery, as a part of ctx's invocation if it has one
// (Invocation). It never blocks on the network.
func (n *Notifier) OnAppend(ctx context.Context, ev sessionlog.Event) {
	inv, _ := ctx.Value(invocationKey{}).(*invocation)
	n.mu.Lock()
	n.enqueue(ctx, ev.SessionID, ev, inv)
	if c := n.observers[ev.SessionID]; c != nil && len(c.seats) > 0 {
		// The driver's sender now runs for the session (enqueue): it releases these.
		n.held[ev.SessionID] = append(n.held[ev.SessionID], heldEvent{ctx: ctx, ev: ev, inv: inv, seats: c.seats})
		if inv != nil && inv.n == n {
			inv.owed++ // the invocation's flush waits for the observers' sends too
		}
	}
	n.mu.Unlock()
}

// release queues for their observers' seats the held events of session below next.
// n.mu is held.
func (n *Notifier) release(session string, next int64) {
	held := n.held[session]
	k := 0
	for k < len(held) && held[k].ev.Seq < next {
		h := held[k]
		for _, seat := range h.seats {
			n.enqueue(h.ctx, seat, h.ev, h.inv)
		}
		if h.inv != nil && h.inv.n == n {
			h.inv.owed-- // counted again by each seat's enqueue
		}
		k++
	}
	if k == 0 {
		return
	}
	if k == len(held) {
		delete(n.held, session)
		return
	}
	n.held[session] = held[k:]
}

// sent is the driver's sender's report of its cursor (wake.sent): the held events
// below it go to the observers.
func (n *Notifier) sent(session string) func(int64) {
	return func(next int64) {
		n.mu.Lock()
		n.release(session, next)
		n.mu.Unlock()
	}
}

// enqueue queues ev for the sender of key (a session's driver seat, or one of its
// observers' seats), starting it if none runs. n.mu is held.
func (n *Notifier) enqueue(ctx context.Context, key string, ev sessionlog.Event, inv *invocation) {
	q, running := n.queues[key]
	if !running {
		q = &queue{queued: map[*invocation]int{}, taken: map[*invocation]int{}}
		n.queues[key] = q
	}
	q.events = append(q.events, ev)
	if inv != nil && inv.n == n {
		q.queued[inv]++
		inv.owed++
	}
	if c, ok := n.arrived[key]; ok {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	if !running {
		n.busy++
		go n.send(context.WithoutCancel(ctx), key)
	}
}

// refreshObservers reads session's observer seats again once its cache is older than
// ObserverRefresh; called by the session's driver sender, outside n.mu.
func (n *Notifier) refreshObservers(ctx context.Context, session string) {
	if connections.IsObserverSeat(session) {
		return
	}
	n.mu.Lock()
	c := n.observers[session]
	fresh := c != nil && time.Since(c.at) < ObserverRefresh
	n.mu.Unlock()
	if fresh {
		return
	}
	seats, err := n.d.observerSeats(ctx, session)
	if err != nil {
		n.d.logger.WarnContext(ctx, "fast path: read observers", "agent_id", session, "error", err)
		return
	}
	n.mu.Lock()
	if len(n.observers) >= 4096 { // bounded: a long-lived process forgets
		clear(n.observers)
	}
	n.observers[session] = &seatCache{seats: seats, at: time.Now()}
	n.mu.Unlock()
}

// send delivers the queued events of one session until none are left.
func (n *Notifier) send(ctx context.Context, session string) {
	for {
		n.mu.Lock()
		q := n.queues[session]
		if len(q.events) == 0 {
			delete(n.queues, session)
			n.busy--
			n.idle.Broadcast()
			n.mu.Unlock()
			return
		}
		hints := q.take()
		unwatched := n.unwatched[session]
		n.mu.Unlock()
		w := wake{stopAt: time.Now().Add(n.budget), budget: n.budget, more: n.more(session), preRead: unwatched}
		if !connections.IsObserverSeat(session) {
			w.sent = n.sent(session)
		}
		idle, err := n.d.pump(ctx, session, hints, w)
		if err != nil {
			// The stream consumer delivers what this missed.
			n.d.logger.WarnContext(ctx, "fast path", "agent_id", session, "error", err)
		}
		// The driver's send is over, whatever it found: its observers go now, before
		// the observer index read below can delay them.
		n.mu.Lock()
		n.release(session, math.MaxInt64)
		n.mu.Unlock()
		n.refreshObservers(ctx, session)
		n.mu.Lock()
		for inv, k := range q.taken {
			inv.owed -= k
		}
		clear(q.taken)
		n.idle.Broadcast()
		switch {
		case idle && len(n.unwatched) < 4096: // bounded: a long-lived process forgets
			n.unwatched[session] = true
		case !idle:
			delete(n.unwatched, session)
		}
		n.mu.Unlock()
	}
}

// flush is an invocation's flush (Invocation).
func (n *Notifier) flush(inv *invocation) {
	n.mu.Lock()
	defer n.mu.Unlock()
	inv.flushing = true
	n.wakeLingerers()
	for inv.owed > 0 {
		n.idle.Wait()
	}
}

// FlushAll waits until every send of the process has finished, ending every linger at
// once. It is for a process that is a single appender (cmd/bench, tests); a handler
// sharing the Notifier with others uses its invocation's flush (Invocation), which
// waits for its own sends only.
func (n *Notifier) FlushAll() {
	n.mu.Lock()
	n.flushes++
	n.flushing++
	defer func() { n.flushing--; n.mu.Unlock() }()
	n.wakeLingerers()
	for n.busy > 0 {
		n.idle.Wait()
	}
}

// wakeLingerers makes every lingering sender look whether it should stop. n.mu is held.
func (n *Notifier) wakeLingerers() {
	for _, c := range n.arrived {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// more returns the session's sender's linger: the events queued for it, waiting up to
// wait for the first. It returns none at once when a flush concerns the send.
func (n *Notifier) more(session string) func(time.Duration) []sessionlog.Event {
	return func(wait time.Duration) []sessionlog.Event {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		n.mu.Lock()
		flushes := n.flushes
		n.mu.Unlock()
		for {
			n.mu.Lock()
			q := n.queues[session]
			if len(q.events) > 0 {
				hints := q.take()
				n.mu.Unlock()
				return hints
			}
			if n.flushes != flushes || n.flushing > 0 || q.flushing() {
				delete(n.arrived, session)
				n.mu.Unlock()
				return nil
			}
			c, ok := n.arrived[session]
			if !ok {
				c = make(chan struct{}, 1)
				n.arrived[session] = c
			}
			n.mu.Unlock()
			select {
			case <-c:
			case <-timer.C:
				n.mu.Lock()
				delete(n.arrived, session)
				n.mu.Unlock()
				return nil
			}
		}
	}
}
