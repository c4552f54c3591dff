package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/hang"
)

// TestReconnectAcrossDropExactlyOnce: the connection dies mid-turn; while it is down the
// turn goes on and other events are appended; the client reconnects on its own and
// its caller sees every event of the log exactly once, in order, across the drop.
func TestReconnectAcrossDropExactlyOnce(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	agent := agentID()
	p := startProxy(t, s)
	r := newRecorder()
	o := r.options()
	o.MinBackoff, o.MaxBackoff = 50*time.Millisecond, 200*time.Millisecond
	c := dial(t, p.url(agent), s.token(t, agent), o)
	ctx := ctxT(t)
	if err := c.Subscribe(ctx, 0); err != nil {
		t.Fatal(err)
	}
	r.until(t, "session/created")

	// The reply streams in 4 chunks 150 ms apart after a 300 ms tool call: the turn's
	// events are appended before, during and after the outage.
	script := `{"script":[{"call":[{"tool":"sleep","args":{"ms":300}}]},{"say":"spans the drop","chunks":4,"delay_ms":150}]}`
	if err := c.Inject(ctx, script, true); err != nil {
		t.Fatal(err)
	}
	r.until(t, "tool/call")
	p.cut()
	s.appendN(t, agent, "test/outage", 3)
	// Reconnect attempts fail meanwhile: at least one reached the proxy and was
	// refused, and the client reported reconnecting again after it.
	hang.Until(t, "a failed reconnect attempt", func() bool {
		return p.accepted.Load() >= 2 && r.count(client.StateReconnecting) >= 2
	})
	p.restore()

	end := r.until(t, "turn/end")
	if !strings.Contains(string(end.Payload), `"status":"completed"`) {
		t.Fatalf("turn ended %s", end.Raw)
	}
	// The titler names the session after its first turn, in the same runner
	// invocation: session/titled is the log's last event.
	r.until(t, "session/titled")
	got := r.checkExactlyOnce(t)
	want, err := s.log.Read(ctxT(t), agent, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("delivered %d events, log holds %d", len(got), len(want))
	}
	var text strings.Builder
	outage := 0
	for i, ev := range got {
		if ev.ID != want[i].ID || ev.Type != want[i].Type || ev.SessionID != agent {
			t.Fatalf("delivery %d is %s, log has %s %s", i, ev.Raw, want[i].ID, want[i].Type)
		}
		var envelope map[string]json.RawMessage
		if err := json.Unmarshal(ev.Raw, &envelope); err != nil || len(envelope) != 6 {
			t.Fatalf("Raw %s is not the envelope", ev.Raw)
		}
		switch ev.Type {
		case "assistant/chunk":
			text.WriteString(payloadText(t, ev))
		case "test/outage":
			outage++
		}
	}
	if text.String() != "spans the drop" || outage != 3 {
		t.Fatalf("reply %q and %d outage events, want %q and 3", text.String(), outage, "spans the drop")
	}
	// The drop was seen only as statuses: a reconnect that succeeded after failed tries.
	reconnected := false
	for _, st := range r.snapshotStatuses() {
		if st.State == client.StateConnected && st.Attempt >= 1 {
			reconnected = true
		}
		if st.State == client.StateReconnecting && (st.Err == nil || st.Delay <= 0 || st.Delay > o.MaxBackoff) {
			t.Fatalf("reconnecting status %+v", st)
		}
	}
	if !reconnected || r.count(client.StateReconnecting) < 2 || p.accepted.Load() < 3 {
		t.Fatalf("want a reconnect after failed attempts: %d reconnecting statuses, %d connections; trail %v",
			r.count(client.StateReconnecting), p.accepted.Load(), r.snapshotTrail())
	}
	if c.SessionID() != agent {
		t.Fatalf("session id %q", c.SessionID())
	}
}

// TestResubscribeDiscardsStale: subscribing again mid-stream discards the frames the
// replaced subscription still had in flight; the caller's next event is the new from.
func TestResubscribeDiscardsStale(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	agent := agentID()
	p := startProxy(t, s)
	r := newRecorder()
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.hook = func(ev client.Event) {
		if ev.Seq == 20 {
			once.Do(func() {
				close(reached)
				<-release
			})
		}
	}
	c := dial(t, p.url(agent), s.token(t, agent), r.options())
	s.seed(t, agent, 1, 45)
	replayed := p.sent(`"seq":45`)
	ctx := ctxT(t)
	if err := c.Subscribe(ctx, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached:
	case <-time.After(wait()):
		t.Fatal("seq 20 never delivered")
	}
	// The rest of the first replay reaches the client meanwhile.
	select {
	case <-replayed:
	case <-time.After(wait()):
		t.Fatal("seq 45 of the first replay never sent")
	}
	if err := c.Subscribe(ctx, 5); err != nil {
		t.Fatal(err)
	}
	close(release)
	r.expectSeqs(t, 0, 20)
	r.expectSeqs(t, 5, 45)
	r.quiet(t, 300*time.Millisecond)
	if r.count(client.StateReconnecting) != 0 {
		t.Fatalf("reconnected: %v", r.snapshotTrail())
	}
}

// TestUnauthorizedStops: a refused token is a typed error and the client never retries.
func TestUnauthorizedStops(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	agent := agentID()
	tok := s.token(t, agent)
	p := startProxy(t, s)

	_, err := client.Dial(ctxT(t), p.url(agent), "tt_garbage", client.Options{})
	var pe *client.ProtocolError
	if !errors.Is(err, client.ErrUnauthorized) || !errors.As(err, &pe) || pe.Code != client.CodeUnauthorized || pe.Message == "" {
		t.Fatalf("dial with a bad token: %v", err)
	}

	// Revocation of a live connection's token: unauthorized ends the client.
	r := newRecorder()
	c := dial(t, p.url(agent), tok, r.options())
	if err := c.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	r.expectSeqs(t, 0, 0)
	before := p.accepted.Load()
	if _, err := s.tokens.Rotate(ctxT(t), agent); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(wait()):
		t.Fatal("client still running after its token was revoked")
	}
	if err := c.Wait(); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("Wait = %v, want unauthorized", err)
	}
	// Done: the client's connection loop has returned, so it can no longer reconnect.
	if n := r.count(client.StateReconnecting); n != 0 || p.accepted.Load() != before {
		t.Fatalf("reconnected after unauthorized: %d statuses, %d connections; trail %v", n, p.accepted.Load()-before, r.snapshotTrail())
	}
	sts := r.snapshotStatuses()
	if last := sts[len(sts)-1]; last.State != client.StateClosed || !errors.Is(last.Err, client.ErrUnauthorized) {
		t.Fatalf("last status %+v", last)
	}
	if err := c.Inject(ctxT(t), "hi", true); !errors.Is(err, client.ErrClosed) || !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("Inject after unauthorized = %v", err)
	}
}

// TestSupersededStops: a newer connection for the agent ends the older client, which
// does not fight back by reconnecting.
func TestSupersededStops(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	agent := agentID()
	tok := s.token(t, agent)
	p := startProxy(t, s)
	r := newRecorder()
	old := dial(t, p.url(agent), tok, r.options())
	if err := old.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	r.expectSeqs(t, 0, 0)

	r2 := newRecorder()
	newer := dial(t, s.url(agent), tok, r2.options())
	if err := old.Wait(); !errors.Is(err, client.ErrSuperseded) {
		t.Fatalf("older client ended with %v, want superseded", err)
	}
	if err := newer.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	s.appendN(t, agent, "test/event", 2)
	r2.expectSeqs(t, 0, 2)
	// old.Wait returned: its connection loop is over and cannot reconnect.
	if r.count(client.StateReconnecting) != 0 || p.accepted.Load() != 1 || newer.Err() != nil {
		t.Fatalf("superseded client reconnected: trail %v, newer %v", r.snapshotTrail(), newer.Err())
	}
}

// TestReplayTruncatedNotice: a capped replay is announced before the window's first
// event, which the caller gets next.
func TestReplayTruncatedNotice(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	agent := agentID()
	r := newRecorder()
	c := dial(t, s.url(agent), s.token(t, agent), r.options())
	const tip = sharedReplayLimit + 10
	s.seed(t, agent, 1, tip)
	if err := c.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	r.expectSeqs(t, 11, tip) // the newest replay_limit events
	s.appendN(t, agent, "test/event", 1)
	r.expectSeqs(t, tip+1, tip+1)
	ns := r.snapshotNotices()
	var rt *client.ReplayTruncated
	if len(ns) != 1 || !errors.As(ns[0], &rt) || *rt != (client.ReplayTruncated{Requested: 0, From: 11}) {
		t.Fatalf("notices %v, want one replay truncated 0 → 11", ns)
	}
	trail := r.snapshotTrail()
	for i, line := range trail {
		if strings.HasPrefix(line, "event") {
			if i == 0 || !strings.HasPrefix(trail[i-1], "notice") {
				t.Fatalf("the notice did not come right before the first event: %v", trail)
			}
			break
		}
	}
}

// TestFileCursorAcrossClients: a second process picks up where the first one stopped.
func TestFileCursorAcrossClients(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	agent := agentID()
	tok := s.token(t, agent)
	path := t.TempDir() + "/cursor"

	r1 := newRecorder()
	o1 := r1.options()
	o1.Cursor = client.NewFileCursor(path)
	c1 := dial(t, s.url(agent), tok, o1)
	if from, err := c1.Resume(ctxT(t)); err != nil || from != 0 {
		t.Fatalf("first Resume = %d, %v", from, err)
	}
	s.seed(t, agent, 1, 4)
	r1.expectSeqs(t, 0, 4)
	c1.Close()
	if err := c1.Wait(); err != nil {
		t.Fatalf("Wait after Close = %v", err)
	}
	s.seed(t, agent, 5, 7) // while nobody listens

	r2 := newRecorder()
	o2 := r2.options()
	o2.Cursor = client.NewFileCursor(path)
	c2 := dial(t, s.url(agent), tok, o2)
	if from, err := c2.Resume(ctxT(t)); err != nil || from != 5 {
		t.Fatalf("second Resume = %d, %v; want 5", from, err)
	}
	r2.expectSeqs(t, 5, 7)
	r2.quiet(t, 200*time.Millisecond)
	if seq, ok, err := o2.Cursor.Load(); seq != 7 || !ok || err != nil {
		t.Fatalf("cursor holds %d %v %v, want 7", seq, ok, err)
	}
}

// TestCommandsAndNotices: the typed senders reach the server; refusals come back as
// typed notices and leave the connection open.
func TestCommandsAndNotices(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	agent := agentID()
	r := newRecorder()
	c := dial(t, s.url(agent), s.token(t, agent), r.options())
	ctx := ctxT(t)
	if err := c.Subscribe(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Inject(ctx, "hello, client", true); err != nil {
		t.Fatal(err)
	}
	if got := payloadText(t, r.until(t, "user/message")); got != "hello, client" {
		t.Fatalf("user/message %q", got)
	}
	var reply strings.Builder
	for {
		ev := r.next(t, wait())
		if ev.Type == "assistant/chunk" {
			reply.WriteString(payloadText(t, ev))
		}
		if ev.Type == "turn/end" {
			break
		}
	}
	if reply.String() != "hello, client" {
		t.Fatalf("reply %q", reply.String())
	}

	if err := c.SetPolicy(ctx, []string{"echo", "s*"}); err != nil {
		t.Fatal(err)
	}
	if ev := r.until(t, "policy/updated"); !strings.Contains(string(ev.Payload), `"patterns":["echo","s*"]`) {
		t.Fatalf("policy/updated %s", ev.Payload)
	}
	if err := c.SetModel(ctx, "main", "scripted"); err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		send func() error
		want error
	}{
		{func() error { return c.Cancel(ctx, "nothing to stop") }, client.ErrNotRunning},
		{func() error { return c.Approve(ctx, "call_1") }, client.ErrUnsupported},
		{func() error { return c.Deny(ctx, "call_1", "no") }, client.ErrUnsupported},
		{func() error { return c.SetModel(ctx, "main", "not a spec") }, client.ErrBadFrame},
	}
	for i, st := range steps {
		if err := st.send(); err != nil {
			t.Fatal(err)
		}
		n := r.waitNotice(t, i)
		var pe *client.ProtocolError
		if !errors.Is(n, st.want) || !errors.As(n, &pe) || pe.Code.Closes() {
			t.Fatalf("notice %d = %v, want %v", i, n, st.want)
		}
	}
	if r.count(client.StateReconnecting) != 0 || c.Err() != nil {
		t.Fatalf("refusals dropped the connection: %v", r.snapshotTrail())
	}
}

// TestSubprotocolAuth: the browser form of the token works as well as the header.
func TestSubprotocolAuth(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	agent := agentID()
	r := newRecorder()
	o := r.options()
	o.SubprotocolAuth = true
	c := dial(t, s.url(agent), s.token(t, agent), o)
	if h := c.Hello(); h.SessionID != agent || h.Proto != 1 || h.LastSeq != 0 {
		t.Fatalf("hello %+v", h)
	}
	if err := c.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	if ev := r.next(t, wait()); ev.Seq != 0 || ev.Type != "session/created" {
		t.Fatalf("first event %s", ev.Raw)
	}
	_, err := client.Dial(ctxT(t), s.url(agent), "tt_nope", client.Options{SubprotocolAuth: true})
	if !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("bad subprotocol token: %v", err)
	}
	c.Close()
	if err := c.Inject(context.Background(), "late", true); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Inject after Close = %v", err)
	}
}
