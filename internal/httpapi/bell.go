package httpapi

import "sync"

// Bell tells the readers of an agent's log in this process that it may have grown: a
// waiting long-poll or Server-Sent Events stream peeks at once instead of at its next
// backoff peek. terret dev rings it from its log stream poller for every record; on
// AWS nothing rings it and the readers' peeks alone find new events (events.go). A
// ring is a hint, never the event itself: a reader reads the log after it.
type Bell struct {
	mu        sync.Mutex
	listeners map[string]map[chan struct{}]struct{}
}

// NewBell returns a Bell nobody listens to.
func NewBell() *Bell { return &Bell{listeners: map[string]map[chan struct{}]struct{}{}} }

// Ring wakes every listener of agentID; a listener not waiting keeps one pending wake.
func (b *Bell) Ring(agentID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.listeners[agentID] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// listen returns a channel that receives after each Ring of agentID, and the function
// that stops listening. Listen before reading the log, so that no ring between the
// read and the wait is missed.
func (b *Bell) listen(agentID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.listeners[agentID] == nil {
		b.listeners[agentID] = map[chan struct{}]struct{}{}
	}
	b.listeners[agentID][ch] = struct{}{}
	return ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.listeners[agentID], ch)
		if len(b.listeners[agentID]) == 0 {
			delete(b.listeners, agentID)
		}
	}
}
