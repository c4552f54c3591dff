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
type Notifier struct {
	d      *Deliverer
	budget time.Duration

	mu      sync.Mutex
	pending map[string][]sessionlog.Event
	busy    int
	idle    *sync.Cond
}

// NewNotifier returns a Notifier that gives each send at most budget.
func NewNotifier(d *Deliverer, budget time.Duration) *Notifier {
	n := &Notifier{d: d, budget: budget, pending: map[string][]sessionlog.Event{}}
	n.idle = sync.NewCond(&n.mu)
	return n
}

// OnAppend queues ev for delivery. It never blocks on the network.
func (n *Notifier) OnAppend(ctx context.Context, ev sessionlog.Event) {
	n.mu.Lock()
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
		if err := n.d.PumpFor(ctx, session, hints, n.budget); err != nil {
			// The stream consumer delivers what this missed.
			n.d.logger.Warn("fast path", "agent_id", session, "error", err)
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
