package service

import (
	"time"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/metrics"
	"github.com/terret/terret-ws/internal/protocol"
)

// DeliveryMetrics returns delivery's observer that records its metrics on rec (nil: the
// process's default recorder, as the functions use) and then tells next (a test's or
// the bench's observer; may be nil). Every metric is in namespace terret with the
// recorder's function dimension:
//
//	EventsDelivered{Path}  Count: events posted, Path fast, stream or replay (delivery.Path)
//	DeliveryLag            Milliseconds: append→post lag of each live event posted (not
//	                       replayed ones); no Path, since the alarms read it by function only
//	Replays, ReplayLength  Count: a replay whose first event was posted, and its events
//	ReplayTruncated        Count: replay_truncated frames posted
//	Lagged, Superseded     Count: connections dropped with that code
//	Unauthorized           Count: connections dropped with unauthorized (refused at
//	                       connect, or token revoked or expired while open)
//	ReplayReads            Count: replay pages read
//
// Delivery reports per sender, not per post (delivery.Delivered), so a busy sender
// writes a few EMF lines per hundred events.
func DeliveryMetrics(rec *metrics.Recorder, next delivery.Observer) delivery.Observer {
	return deliveryMetrics{rec: rec, next: next}
}

type deliveryMetrics struct {
	rec  *metrics.Recorder
	next delivery.Observer
}

func (m deliveryMetrics) recorder() *metrics.Recorder {
	if m.rec != nil {
		return m.rec
	}
	return metrics.Default()
}

func (m deliveryMetrics) ReplayRead(start bool) {
	if start {
		m.recorder().Add("ReplayReads", metrics.Count, 1)
	}
	if m.next != nil {
		m.next.ReplayRead(start)
	}
}

func (m deliveryMetrics) Delivered(d delivery.Delivered) {
	r := m.recorder()
	for _, p := range []struct {
		path delivery.Path
		n    int
	}{{delivery.PathFast, d.Fast}, {delivery.PathStream, d.Stream}, {delivery.PathReplay, d.Replay}} {
		if p.n > 0 {
			r.Add("EventsDelivered", metrics.Count, float64(p.n), metrics.Dim{Name: "Path", Value: string(p.path)})
		}
	}
	if len(d.Lags) > 0 {
		var buf [metrics.MaxValues]float64
		ms := buf[:0]
		for _, l := range d.Lags {
			ms = append(ms, float64(l.Microseconds())/1000)
		}
		r.AddValues("DeliveryLag", metrics.Milliseconds, ms)
	}
	for _, n := range d.ReplayLengths {
		r.Add("Replays", metrics.Count, 1)
		r.Add("ReplayLength", metrics.Count, float64(n))
	}
	if d.Truncated > 0 {
		r.Add("ReplayTruncated", metrics.Count, float64(d.Truncated))
	}
	if o, ok := m.next.(delivery.DeliveryObserver); ok {
		o.Delivered(d)
	}
}

// dropMetrics names the metric of each code a connection is dropped with.
var dropMetrics = map[protocol.Code]string{
	protocol.CodeLagged:       "Lagged",
	protocol.CodeSuperseded:   "Superseded",
	protocol.CodeUnauthorized: "Unauthorized",
}

func (m deliveryMetrics) Dropped(code protocol.Code) {
	if name, ok := dropMetrics[code]; ok {
		m.recorder().Add(name, metrics.Count, 1)
	}
	if o, ok := m.next.(delivery.DeliveryObserver); ok {
		o.Dropped(code)
	}
}

// PageRead passes a replay page's slot wait and read on (delivery.SlotObserver: the
// bench's reconnect storm breaks a client's time down with it).
func (m deliveryMetrics) PageRead(agentID string, slotWait time.Duration, polls int, read time.Duration) {
	if o, ok := m.next.(delivery.SlotObserver); ok {
		o.PageRead(agentID, slotWait, polls, read)
	}
}

// HelloEnded passes how a first-frame loop ended on (delivery.HelloObserver).
func (m deliveryMetrics) HelloEnded(connID string, end delivery.HelloEnd, posts int) {
	if o, ok := m.next.(delivery.HelloObserver); ok {
		o.HelloEnded(connID, end, posts)
	}
}

// Wait passes a test's gate on (delivery.Gate).
func (m deliveryMetrics) Wait(point, agentID string) {
	if g, ok := m.next.(delivery.Gate); ok {
		g.Wait(point, agentID)
	}
}

// observer chains the metrics observer before o (a test's or the bench's).
func observer(o delivery.Observer) delivery.Observer { return DeliveryMetrics(nil, o) }

// The metrics observer passes on every optional hook the observer it chains may have.
var (
	_ delivery.DeliveryObserver = deliveryMetrics{}
	_ delivery.SlotObserver     = deliveryMetrics{}
	_ delivery.HelloObserver    = deliveryMetrics{}
	_ delivery.Gate             = deliveryMetrics{}
)
