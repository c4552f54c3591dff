package devstack_test

import (
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/devstack"
)

// holdFirst is a delivery.Gate that holds the first sender of agent to reach point
// until released, and lets every other one pass.
type holdFirst struct {
	point, agent string
	once         sync.Once
	reached      chan struct{}
	release      chan struct{}
}

func (g *holdFirst) ReplayRead(bool) {}

func (g *holdFirst) Wait(point, agentID string) {
	if point != g.point || agentID != g.agent {
		return
	}
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.reached)
		<-g.release
	}
}

// TestHelloBeforeSuperseded: a connection superseded before its hello went out still
// receives hello first, then superseded, then the close. The gate holds the first
// connection's sender in the window: before it takes the lease (the connect that
// supersedes finds no sender at work) and under the lease just before hello is posted
// (that sender is the one to close the connection).
func TestHelloBeforeSuperseded(t *testing.T) {
	t.Parallel()
	for _, point := range []string{delivery.GateKickPump, delivery.GateHello} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			g := &holdFirst{point: point, agent: "a1", reached: make(chan struct{}), release: make(chan struct{})}
			e := startStack(t, devstack.Options{Observer: g})
			tok := e.token(t, "a1")
			first := e.dial(t, "a1", tok)
			select {
			case <-g.reached:
			case <-time.After(hang()):
				t.Fatalf("the first connection's sender never reached the gate %s", point)
			}
			second := e.dial(t, "a1", tok) // its $connect supersedes first, whose hello is owed
			second.hello("a1")
			close(g.release)
			if f := first.must(hang()); f.Type != "hello" {
				t.Fatalf("superseded connection's first frame %s, want hello", f)
			}
			first.expectError("superseded")
			first.expectClosed()
			second.send(`{"type":"subscribe","from_seq":0}`)
			second.events(0, 0)
		})
	}
}
