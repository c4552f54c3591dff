package service

import (
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/metrics"
)

// hooks is an observer with every optional hook, recording what it hears.
type hooks struct{ heard []string }

func (h *hooks) ReplayRead(start bool) {
	if start {
		h.heard = append(h.heard, "ReplayRead")
	}
}
func (h *hooks) PageRead(agentID string, _ time.Duration, polls int, _ time.Duration) {
	h.heard = append(h.heard, "PageRead "+agentID)
}
func (h *hooks) HelloEnded(connID string, end delivery.HelloEnd, _ int) {
	h.heard = append(h.heard, "HelloEnded "+connID+" "+string(end))
}

// TestDeliveryMetricsPassesHooksOn: the metrics observer every stack chains before a
// test's or the bench's own passes each optional hook on; without it the deliverer's
// type checks (SlotObserver, HelloObserver) find only the metrics observer, and the
// bench's reconnect-storm breakdown matched none of its clients.
func TestDeliveryMetricsPassesHooksOn(t *testing.T) {
	h := &hooks{}
	o := DeliveryMetrics(metrics.New(nil, ""), h)
	o.ReplayRead(true)
	slots, ok := o.(delivery.SlotObserver)
	if !ok {
		t.Fatal("the metrics observer is no delivery.SlotObserver")
	}
	slots.PageRead("a1", time.Millisecond, 2, time.Millisecond)
	hellos, ok := o.(delivery.HelloObserver)
	if !ok {
		t.Fatal("the metrics observer is no delivery.HelloObserver")
	}
	hellos.HelloEnded("c1", delivery.HelloLeft, 1)
	want := []string{"ReplayRead", "PageRead a1", "HelloEnded c1 left"}
	if len(h.heard) != len(want) {
		t.Fatalf("heard %v, want %v", h.heard, want)
	}
	for i := range want {
		if h.heard[i] != want[i] {
			t.Errorf("heard %v, want %v", h.heard, want)
			break
		}
	}
}
