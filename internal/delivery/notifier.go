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
// not subscribed) the session is left to the stream consumer for idleFor, so that an
// agent nobody watches costs one failed conditional write a second at most.
type Notifier struct {
	d      *Deliverer
	budget time.Duration

	mu        sync.Mutex
	pending   map[string][]sessionlog.Event
	idleUntil map[string]time.Time
	busy      int
	idle      *sync.Cond
}

// idleFor is how long the fast path leaves a session with nothing owed to the stream
// consumer.
const idleFor = time.Second

// NewNotifier returns a Notifier that gives each send at most budget.
func NewNotifier(d *Deliverer, budget time.Duration) *Notifier {
	n := &Notifier{d: d, budget: budget, pending: map[string][]sessionlog.Event{}, idleUntil: map[string]time.Time{}}
	n.idle = sync.NewCond(&n.mu)
	return n
}

// OnAppend queues ev for delivery. It never blocks on the network.
func (n *Notifier) OnAppend(ctx context.Context, ev sessionlog.Event) {
	n.mu.Lock()
	if until, ok := n.idleUntil[ev.SessionID]; ok {
		if time.Now().Before(until) {
			n.mu.Unlock()
			return
		}
		delete(n.idleUntil, ev.SessionID)
	}
	if len(n.idleUntil) > 1024 { // a long-lived process: forget sessions long quiet
		for s, until := range n.idleUntil {
			if time.Now().After(until) {
				delete(n.idleUntil, s)
			}
		}
	}
	_, queued := n.pending[ev.SessionID]
	n.pending[ev.SessionID] = append(n.pending[ev.SessionID], ev)
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
		n.mu.Unlock()
		idle, err := n.d.pump(ctx, session, hints, wake{stopAt: time.Now().Add(n.budget)})
		if err != nil {
			// The stream consumer delivers what this missed.
			n.d.logger.Warn("fast path", "agent_id", session, "error", err)
		}
		if idle {
			n.mu.Lock()
			n.idleUntil[session] = time.Now().Add(idleFor)
			n.mu.Unlock()
		}
	}
}

// Flush waits until every queued event has been handed to a sender. A Lambda handler
// calls it before returning, since the runtime freezes after the return.
func (n *Notifier) Flush() {
	n.mu.Lock()
	for n.busy > 0 {
		n.idle.Wait()
	}
	n.mu.Unlock()
}
