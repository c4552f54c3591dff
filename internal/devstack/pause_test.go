package devstack_test

import (
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
)

// pauser is a stack's agent.Config.Pause hook: a flow arms a hold on a pause point of
// its agent before the stimulus that reaches it, waits until the runtime is there, and
// releases it. Arrivals nobody armed pass at once.
type pauser struct {
	mu     sync.Mutex
	arms   map[string][]*hold // by point and agent, in arming order
	all    []*hold
	closed bool
}

// hold is one armed arrival at a pause point.
type hold struct {
	what     string
	reached  chan struct{}
	released chan struct{}
	once     sync.Once
}

// newPauser returns a pauser; it releases every hold when the test ends, so a failed
// flow leaves no handler waiting.
func newPauser() *pauser { return &pauser{arms: map[string][]*hold{}} }

func (p *pauser) hook(point, agentID string) {
	p.mu.Lock()
	k := point + " " + agentID
	q := p.arms[k]
	if p.closed || len(q) == 0 {
		p.mu.Unlock()
		return
	}
	h := q[0]
	p.arms[k] = q[1:]
	p.mu.Unlock()
	close(h.reached)
	<-h.released
}

// arm holds the next arrival of agentID's runtime at point that no earlier hold took.
func (p *pauser) arm(point, agentID string) *hold {
	h := &hold{what: point + " of " + agentID, reached: make(chan struct{}), released: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		h.release()
	}
	p.arms[point+" "+agentID] = append(p.arms[point+" "+agentID], h)
	p.all = append(p.all, h)
	return h
}

// close releases every hold, reached or not, and lets later arrivals pass.
func (p *pauser) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, h := range p.all {
		h.release()
	}
}

// wait returns once the runtime is held at h; a flow fails only on a hang (hang).
func (h *hold) wait(a *agentConn) {
	select {
	case <-h.reached:
	case <-time.After(hang()):
		a.failf("the runtime never reached %s", h.what)
	}
}

func (h *hold) release() { h.once.Do(func() { close(h.released) }) }

// TestPauserHoldsUntilRelease: an armed arrival waits for its release, in arming
// order; an unarmed one passes; close releases what is held.
func TestPauserHoldsUntilRelease(t *testing.T) {
	t.Parallel()
	p := newPauser()
	p.hook(agent.PauseRun, "a1") // unarmed: passes
	first, second := p.arm(agent.PauseRun, "a1"), p.arm(agent.PauseRun, "a1")
	passed := make(chan int, 3)
	for i := range 2 {
		go func() { p.hook(agent.PauseRun, "a1"); passed <- i }()
	}
	<-first.reached
	<-second.reached
	p.hook(agent.PauseRun, "a2") // another agent's arrival: passes
	select {
	case i := <-passed:
		t.Fatalf("arrival %d passed before any release; want both held", i)
	default:
	}
	first.release()
	<-passed
	p.close()
	<-passed
	if got := len(passed); got != 0 {
		t.Fatalf("%d arrivals passed after both releases, want 0 more", got)
	}
}
