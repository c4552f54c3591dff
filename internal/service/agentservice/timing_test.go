package agentservice

import (
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/delivery"
)

// TestTimingChain: the runtime's chunk interval, the fast path's linger and the
// backstop's looks keep their order (delivery.CheckTiming), and a chain out of order is
// refused.
func TestTimingChain(t *testing.T) {
	t.Parallel()
	if err := delivery.CheckTiming(agent.DefaultChunkInterval); err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []time.Duration{delivery.Linger(), delivery.Linger() + time.Millisecond, time.Second} {
		if err := delivery.CheckTiming(chunk); err == nil {
			t.Errorf("chunk interval %v at or past the linger %v: accepted", chunk, delivery.Linger())
		}
	}
}
