package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/client"
)

// batch is the message of the batching extension carrying seqs: envelopes joined by "\n".
func batch(seqs ...int64) string {
	parts := make([]string, len(seqs))
	for i, s := range seqs {
		parts[i] = envelope(s)
	}
	return strings.Join(parts, "\n")
}

// readSubscribe returns the client's next frame, which must be a subscribe.
func (p *peer) readSubscribe() string {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	_, b, err := p.ws.Read(ctx)
	if err != nil {
		p.t.Errorf("connection %d: no subscribe: %v", p.i, err)
	}
	return string(b)
}

// TestBatchReassembled: the client asks for batches and hands each event of a batch to
// OnEvent on its own, Raw being that event's envelope exactly. A batch whose events
// straddle a reconnect — the server re-sends from the durable cursor, overlapping what
// the caller has — yields each event once; so does an overlapping batch after a
// resubscribe that the cursor lags.
func TestBatchReassembled(t *testing.T) {
	t.Parallel()
	subs := make(chan string, 4)
	delivered := make(chan struct{}) // closed once the client's caller has seq 4
	srv := serveScripts(t,
		func(p *peer) {
			p.hello(6)
			subs <- p.readSubscribe()
			p.send(batch(0, 1, 2))
			p.send(batch(3, 4))
			p.await(delivered, "seq 4 delivered")
			p.ws.CloseNow() // a drop without a close frame, after 4
		},
		func(p *peer) {
			p.hello(8)
			subs <- p.readSubscribe() // from the cursor: 1 (laggingCursor) + 1
			// A server that resumed from an older durable cursor: 2..4 are delivered already.
			p.send(batch(2, 3, 4, 5))
			p.send(batch(6, 7, 8))
			p.waitClosed()
		},
	)
	r := newRecorder()
	r.hook = closeAt(4, delivered)
	o := r.options()
	o.Cursor = laggingCursor{}
	o.MinBackoff = 2 * time.Millisecond
	c := dial(t, srv.url("/agents/a1/ws"), "tok", o)
	if err := c.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	r.expectSeqs(t, 0, 8)
	r.quiet(t, 100*time.Millisecond)
	for i, ev := range r.checkExactlyOnce(t) {
		if string(ev.Raw) != envelope(int64(i)) {
			t.Errorf("event %d: Raw %s, want %s", i, ev.Raw, envelope(int64(i)))
		}
	}
	for i, want := range []string{`{"type":"subscribe","from_seq":0,"batch":true,"order":1}`, `{"type":"subscribe","from_seq":2,"batch":true,"order":1}`} {
		if got := <-subs; got != want {
			t.Errorf("subscribe %d: got %s, want %s", i, got, want)
		}
	}
}

// TestBatchWithProtocolFrameIsViolation: protocol frames are never batched; a message
// mixing one with events is a protocol violation and the client reconnects through it,
// still delivering every event once. NoBatch subscribes as a v1 client.
func TestBatchWithProtocolFrameIsViolation(t *testing.T) {
	t.Parallel()
	subs := make(chan string, 4)
	srv := serveScripts(t,
		func(p *peer) {
			p.hello(2)
			subs <- p.readSubscribe()
			p.send(batch(0) + "\n" + `{"type":"error","code":"not_running","message":"x"}`)
			p.waitClosed()
		},
		func(p *peer) {
			p.hello(2)
			subs <- p.readSubscribe()
			p.events(0, 1, 2)
			p.waitClosed()
		},
	)
	r := newRecorder()
	o := r.options()
	o.NoBatch = true
	o.MinBackoff = 2 * time.Millisecond
	c := dial(t, srv.url("/agents/a1/ws"), "tok", o)
	if err := c.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	r.expectSeqs(t, 0, 2)
	r.checkExactlyOnce(t)
	var cause error
	for _, st := range r.snapshotStatuses() {
		if st.State == client.StateReconnecting {
			cause = st.Err
			break
		}
	}
	if !errors.Is(cause, client.ErrProtocol) {
		t.Errorf("reconnect cause %v, want a protocol violation", cause)
	}
	for i, want := range []string{`{"type":"subscribe","from_seq":0,"order":1}`, `{"type":"subscribe","from_seq":1,"order":1}`} {
		if got := <-subs; got != want {
			t.Errorf("subscribe %d with NoBatch: got %s, want %s", i, got, want)
		}
	}
}
