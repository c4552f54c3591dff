package delivery

import (
	"time"

	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// Path is the way a posted event reached its client.
type Path string

// Paths.
const (
	// PathFast: a live event posted by a sender the appender woke (Notifier).
	PathFast Path = "fast"
	// PathStream: a live event posted by any other sender — the stream consumer, a
	// subscribe, a hand-over, a watcher.
	PathStream Path = "stream"
	// PathReplay: an event below its subscription's replay end (the log's tip when the
	// client subscribed), whichever sender posted it.
	PathReplay Path = "replay"
)

// Delivered is what a sender reports to a DeliveryObserver: its posts since its last
// report. A sender reports when it ends, and on the way every maxLags live events or
// every reportEvery, whichever comes first.
type Delivered struct {
	Fast, Stream, Replay int // events posted by path (a batched frame counts each event)
	// Lags are the append→post lags of the live events posted: the post's end less the
	// event's `at`, never negative (the appender's and the sender's clocks may differ a
	// little). Replayed events have none: their age is the client's choice of from_seq,
	// not a delay of delivery.
	Lags []time.Duration
	// ReplayLengths has one entry per replay whose first event was posted: how many
	// events it replays. A replay a dead sender's successor starts again is counted again.
	ReplayLengths []int64
	Truncated     int // replay_truncated frames posted
}

// DeliveryObserver is an Observer that also hears what senders posted and which
// connections were dropped (metrics). Its methods must not block; a Delivered's slices
// are valid only during the call.
type DeliveryObserver interface {
	Observer
	Delivered(Delivered)
	// Dropped: a connection is being dropped with code — lagged, superseded (once per
	// connection a connect replaced), unauthorized (refused at connect, or its token
	// revoked or expired).
	Dropped(code protocol.Code)
}

// A sender's report bounds: at most maxLags lags (the most one EMF line carries) and
// reportEvery old.
const (
	maxLags     = 100
	reportEvery = 10 * time.Second
)

// tally is a sender's posts not yet reported.
type tally struct {
	Delivered
	since time.Time // when the first post not yet reported was counted
}

func (d *Deliverer) deliveryObserver() DeliveryObserver {
	o, _ := d.cfg.Observer.(DeliveryObserver)
	return o
}

// dropped tells the DeliveryObserver, if any, that a connection is dropped with code.
func (d *Deliverer) dropped(code protocol.Code) {
	if o := d.deliveryObserver(); o != nil {
		o.Dropped(code)
	}
}

// counted notes evs, one frame, as posted just now. Cost per event: a comparison and,
// for a live one, parsing its `at`; no allocation but the lag buffer's growth to
// maxLags, once per sender.
func (s *sender) counted(evs []sessionlog.Event) {
	if s.d.deliveryObserver() == nil {
		return
	}
	t, now := &s.tally, time.Now()
	for _, ev := range evs {
		if ev.Seq < s.o.ReplayEnd {
			t.Replay++
			if ev.Seq == s.o.From {
				t.ReplayLengths = append(t.ReplayLengths, s.o.ReplayEnd-s.o.From)
			}
			continue
		}
		if s.w.more != nil {
			t.Fast++
		} else {
			t.Stream++
		}
		if at, err := time.Parse(sessionlog.TimeFormat, ev.At); err == nil {
			t.Lags = append(t.Lags, max(now.Sub(at), 0))
		}
	}
	if t.since.IsZero() {
		t.since = now
	}
	if len(t.Lags) >= maxLags || now.Sub(t.since) >= reportEvery {
		s.report()
	}
}

// report hands the tally to the DeliveryObserver, if there is anything in it, and
// starts a new one over the same buffers.
func (s *sender) report() {
	t := &s.tally
	if o := s.d.deliveryObserver(); o != nil && (t.Fast+t.Stream+t.Replay+t.Truncated > 0) {
		o.Delivered(t.Delivered)
	}
	*t = tally{Delivered: Delivered{Lags: t.Lags[:0], ReplayLengths: t.ReplayLengths[:0]}}
}

// HelloEnd is how the first-frame loop of a connection (hello, or a refused one's
// error frame) ended.
type HelloEnd string

// Ends of the first-frame loop.
const (
	HelloPosted    HelloEnd = "posted"     // the frame was taken
	HelloLeft      HelloEnd = "left"       // $disconnect recorded that the client left
	HelloGraceOver HelloEnd = "grace_over" // Gone until the hello grace ran out
	HelloFailed    HelloEnd = "failed"     // another post error, or the invocation's end
)

// HelloObserver is an Observer that also hears how each first-frame loop ended, and
// after how many posts. Its method must not block.
type HelloObserver interface {
	Observer
	HelloEnded(connID string, end HelloEnd, posts int)
}

// helloEnded tells the HelloObserver, if any, how connID's first-frame loop ended.
func (d *Deliverer) helloEnded(connID string, end HelloEnd, posts int) {
	if o, ok := d.cfg.Observer.(HelloObserver); ok {
		o.HelloEnded(connID, end, posts)
	}
}
