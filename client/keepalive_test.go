package client_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/terret/terret-ws/client"
)

// next reads the client's next frame on the connection, as text.
func (p *peer) next() string {
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	_, b, err := p.ws.Read(ctx)
	if err != nil {
		p.t.Errorf("connection %d: no frame from the client: %v", p.i, err)
		return ""
	}
	return string(b)
}

// TestKeepaliveOnIdleSocket: a connection with nothing sent or received for the
// keepalive interval gets exactly {"type":"keepalive"} — unnumbered, so the server's
// order of the client's frames has no gap — and again after each further interval; a
// numbered frame sent afterwards still carries the next order number.
func TestKeepaliveOnIdleSocket(t *testing.T) {
	t.Parallel()
	got := make(chan []string, 1)
	srv := serveScripts(t, func(p *peer) {
		p.hello(0)
		p.expectSubscribe(0)
		frames := []string{p.next(), p.next(), p.next()}
		got <- frames
		p.waitClosed()
	})
	o := newRecorder().options()
	o.KeepaliveInterval = 20 * time.Millisecond
	c := dial(t, srv.url("/agents/a1/ws"), "tok", o)
	if err := c.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	var frames []string
	select {
	case frames = <-got:
	case <-time.After(wait()):
		t.Fatal("the server got no three frames")
	}
	for i, f := range frames[:2] {
		if f != `{"type":"keepalive"}` {
			t.Errorf("idle frame %d = %s, want exactly {\"type\":\"keepalive\"}", i, f)
		}
	}
	// The third: a keepalive again, or nothing but keepalives: the subscribe was order 1.
	if frames[2] != `{"type":"keepalive"}` {
		t.Errorf("third idle frame = %s", frames[2])
	}
}

// TestNoKeepaliveWhileTrafficFlows: the keepalive timer firing on a connection on which
// the client sent a frame within the interval sends nothing; it looks again when the
// interval since that frame is up. The timer is the test's, so the order is the test's:
// the frame the server reads after the timer fired is the client's next real frame,
// numbered 2.
func TestNoKeepaliveWhileTrafficFlows(t *testing.T) {
	t.Parallel()
	const interval = time.Hour // longer than the test: the subscribe is always recent
	waits := make(chan time.Duration)
	fire := make(chan time.Time)
	after := func(d time.Duration) <-chan time.Time {
		waits <- d
		return fire
	}
	got := make(chan string, 1)
	srv := serveScripts(t, func(p *peer) {
		p.hello(0)
		p.expectSubscribe(0)
		p.events(0)
		got <- p.next()
		p.waitClosed()
	})
	r := newRecorder()
	o := client.WithKeepaliveTimer(r.options(), after)
	o.KeepaliveInterval = interval
	c := dial(t, srv.url("/agents/a1/ws"), "tok", o)
	if d := <-waits; d != interval {
		t.Fatalf("first keepalive wait %s, want the interval %s", d, interval)
	}
	if err := c.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	r.expectSeqs(t, 0, 0)
	for round := range 3 {
		fire <- time.Now()
		// The loop decided and waits again: for what is left of the interval since the
		// subscribe, less than the whole.
		if d := <-waits; d <= 0 || d >= interval {
			t.Fatalf("round %d: wait %s after the subscribe, want within (0, %s)", round, d, interval)
		}
	}
	if err := c.Inject(ctxT(t), "hi", false); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-got:
		if withoutClientID(f) != `{"type":"inject","text":"hi","wake":false,"order":2}` {
			t.Errorf("the server's next frame = %s, want the inject (order 2) and no keepalive before it", f)
		}
	case <-time.After(wait()):
		t.Fatal("the server got nothing")
	}
}

// TestKeepaliveWhileOnlyReceiving: frames received do not restart the keepalive clock.
// The server streams events for a whole interval after the client's subscribe, one
// at a time, each delivered before the next; the last lands just before the timer
// fires, yet the client's next frame is exactly the keepalive, and the loop then waits
// a whole interval again. (A client that counted received frames would find its socket
// busy, send nothing, and be closed by a gateway whose idle timer only the client's
// frames restart: `terret tail` on a busy agent.)
func TestKeepaliveWhileOnlyReceiving(t *testing.T) {
	t.Parallel()
	const interval = 300 * time.Millisecond
	waits := make(chan time.Duration)
	fire := make(chan time.Time)
	after := func(d time.Duration) <-chan time.Time {
		waits <- d
		return fire
	}
	push := make(chan int64)
	got := make(chan string, 1)
	srv := serveScripts(t, func(p *peer) {
		p.hello(0)
		p.expectSubscribe(0)
		for seq := range push {
			p.events(seq)
		}
		got <- p.next()
		p.waitClosed()
	})
	r := newRecorder()
	o := client.WithKeepaliveTimer(r.options(), after)
	o.KeepaliveInterval = interval
	c := dial(t, srv.url("/agents/a1/ws"), "tok", o)
	<-waits
	if err := c.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	subscribed := time.Now() // after the client stamped its last send
	var seq int64
	for ; seq == 0 || time.Since(subscribed) < interval; seq++ {
		push <- seq
		if ev := r.next(t, wait()); ev.Seq != seq {
			t.Fatalf("event seq %d delivered, want %d", ev.Seq, seq)
		}
	}
	fire <- time.Now() // an event arrived a moment ago; nothing was sent for an interval
	if d := <-waits; d != interval {
		t.Errorf("after the keepalive the loop waits %s, want the whole interval %s", d, interval)
	}
	close(push)
	select {
	case f := <-got:
		if f != `{"type":"keepalive"}` {
			t.Errorf("the client's frame after %d events received = %s, want exactly {\"type\":\"keepalive\"}", seq, f)
		}
	case <-time.After(wait()):
		t.Fatal("the server got nothing")
	}
	if n := r.count(client.StateReconnecting); n != 0 {
		t.Errorf("%d reconnects; trail %v", n, r.snapshotTrail())
	}
}

// TestKeepaliveNow: Keepalive writes exactly {"type":"keepalive"} at once, unnumbered,
// between numbered frames whose order runs on without a gap; the automatic loop is off
// here, so the frame is the call's.
func TestKeepaliveNow(t *testing.T) {
	t.Parallel()
	got := make(chan []string, 1)
	srv := serveScripts(t, func(p *peer) {
		p.hello(0)
		p.expectSubscribe(0)
		got <- []string{p.next(), p.next()}
		p.waitClosed()
	})
	o := newRecorder().options()
	o.KeepaliveInterval = -1
	c := dial(t, srv.url("/agents/a1/ws"), "tok", o)
	if err := c.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Keepalive(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctxT(t), ""); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-got:
		if f[0] != `{"type":"keepalive"}` || withoutClientID(f[1]) != `{"type":"cancel","order":2}` {
			t.Errorf("frames after the subscribe = %q, want the keepalive then the cancel numbered 2", f)
		}
	case <-time.After(wait()):
		t.Fatal("the server got nothing")
	}
}

// clientIDField is the client_id the client puts on every control frame.
var clientIDField = regexp.MustCompile(`"client_id":"c-[0-9a-f]{32}",`)

// withoutClientID is frame f with its one client_id taken out ("" if it has none).
func withoutClientID(f string) string {
	if len(clientIDField.FindAllString(f, -1)) != 1 {
		return ""
	}
	return clientIDField.ReplaceAllString(f, "")
}
