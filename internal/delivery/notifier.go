package delivery

import (
	"context"
	"sync"
	"time"

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
	pending   map[string][]sessionlog.Event
	unwatched map[string]bool          // sessions whose last wake-up found nothing owed
	arrived   map[string]chan struct{} // a lingering sender's wake-up, by session
	flushes   int                      // Flush calls so far: a linger ends at the next
	flushing  int                      // Flush calls under way: no linger starts
	busy      int
	idle      *sync.Cond
}

// NewNotifier returns a Notifier that gives each send at most budget.
func NewNotifier(d *Deliverer, budget time.Duration) *Notifier {
	n := &Notifier{d: d, budget: budget, pending: map[string][]sessionlog.Event{}, unwatched: map[string]bool{}, arrived: map[string]chan struct{}{}}
	n.idle = sync.NewCond(&n.mu)
	return n
}

// OnAppend queues ev for delivery. It never blocks on the network.
func (n *Notifier) OnAppend(ctx context.Context, ev sessionlog.Event) {
	n.mu.Lock()
	_, queued := n.pending[ev.SessionID]
	n.pending[ev.SessionID] = append(n.pending[ev.SessionID], ev)
	if c, ok := n.arrived[ev.SessionID]; ok {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	if !queued {
		n.busy++
		go n.send(context.WithoutCancel(ctx), ev.SessionID)
	}
	n.mu.Unlock()
}

// send delivers the queued events of one session until none are left.
func (n *Notifier) send(ctx context.Context, session string) {
	for {
		n.mu.Lock()
		hints := n.pending[session]
		if len(hints) == 0 {
			delete(n.pending, session)
			n.busy--
			n.idle.Broadcast()
			n.mu.Unlock()
			return
		}
		n.pending[session] = hints[:0:0]
		unwatched := n.unwatched[session]
		n.mu.Unlock()
		idle, err := n.d.pump(ctx, session, hints, wake{stopAt: time.Now().Add(n.budget), budget: n.budget, more: n.more(session), preRead: unwatched})
		if err != nil {
			// The stream consumer delivers what this missed.
			n.d.logger.Warn("fast path", "agent_id", session, "error", err)
		}
		n.mu.Lock()
		switch {
		case idle && len(n.unwatched) < 4096: // bounded: a long-lived process forgets
			n.unwatched[session] = true
		case !idle:
			delete(n.unwatched, session)
		}
		n.mu.Unlock()
	}
}

// Flush waits until every queued event has been handed to a sender. A Lambda handler
// calls it before returning, since the runtime freezes after the return; no more of its
// events are coming, so lingering senders let go at once rather than hold the lease
// (and the invocation) for the rest of their linger.
func (n *Notifier) Flush() {
	n.mu.Lock()
	n.flushes++
	n.flushing++
	defer func() { n.flushing--; n.mu.Unlock() }()
	for _, c := range n.arrived {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	for n.busy > 0 {
		n.idle.Wait()
	}
}

// more returns the session's sender's linger: the events queued for it, waiting up to
// wait for the first.
func (n *Notifier) more(session string) func(time.Duration) []sessionlog.Event {
	return func(wait time.Duration) []sessionlog.Event {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		n.mu.Lock()
		flushes := n.flushes
		n.mu.Unlock()
		for {
			n.mu.Lock()
			if hints := n.pending[session]; len(hints) > 0 {
				n.pending[session] = hints[:0:0]
				n.mu.Unlock()
				return hints
			}
			if n.flushes != flushes || n.flushing > 0 {
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
