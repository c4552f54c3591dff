package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/client"
)

// These tests run the client against a scripted WebSocket server, for what the real
// stack does not do on demand: lagged and internal drops, a gap in seq, the raw API
// Gateway URL, and first frames other than hello.

// scripted serves connection i with scripts[i] (the last script serves any later ones)
// and records each handshake request.
type scripted struct {
	t        *testing.T
	srv      *httptest.Server
	n        atomic.Int64
	scripts  []func(*peer)
	mu       sync.Mutex
	requests []*http.Request
}

func serveScripts(t *testing.T, scripts ...func(*peer)) *scripted {
	t.Helper()
	s := &scripted{t: t, scripts: scripts}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Clone(context.Background()))
		s.mu.Unlock()
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{client.Subprotocol}})
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		defer ws.CloseNow()
		i := int(s.n.Add(1) - 1)
		script := s.scripts[min(i, len(s.scripts)-1)]
		script(&peer{t: t, ws: ws, ctx: r.Context(), i: i})
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *scripted) url(pathAndQuery string) string {
	return "ws://" + strings.TrimPrefix(s.srv.URL, "http://") + pathAndQuery
}

func (s *scripted) request(i int) *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[i]
}

// peer is the server side of one connection.
type peer struct {
	t   *testing.T
	ws  *websocket.Conn
	ctx context.Context
	i   int
}

func (p *peer) send(frame string) {
	if err := p.ws.Write(p.ctx, websocket.MessageText, []byte(frame)); err != nil {
		p.t.Errorf("connection %d: write %s: %v", p.i, frame, err)
	}
}

func (p *peer) hello(last int64) {
	p.send(fmt.Sprintf(`{"type":"hello","proto":1,"session_id":"a1","last_seq":%d}`, last))
}

func (p *peer) events(seqs ...int64) {
	for _, s := range seqs {
		p.send(envelope(s))
	}
}

func envelope(seq int64) string {
	return fmt.Sprintf(`{"id":"e%d","session_id":"a1","seq":%d,"at":"2026-08-18T04:10:11.123456Z","type":"test/event","payload":{"n":%d}}`, seq, seq, seq)
}

// expectSubscribe reads the client's next frame and checks it subscribes from from, as
// the connection's first frame (order 1).
func (p *peer) expectSubscribe(from int64) {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	_, b, err := p.ws.Read(ctx)
	if err != nil {
		p.t.Errorf("connection %d: no subscribe: %v", p.i, err)
		return
	}
	var f struct {
		Type    string `json:"type"`
		FromSeq *int64 `json:"from_seq"`
	}
	if json.Unmarshal(b, &f) != nil || f.Type != "subscribe" || f.FromSeq == nil || *f.FromSeq != from {
		p.t.Errorf("connection %d: got %s, want a subscribe from_seq %d", p.i, b, from)
	}
}

// waitClosed holds the connection until the client closes it.
// await waits until ch is closed (what names it), failing the test after 30 s.
func (p *peer) await(ch <-chan struct{}, what string) {
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		p.t.Errorf("connection %d: %s never came", p.i, what)
	}
}

// closeAt is a recorder hook closing ch once the event at seq has been delivered.
func closeAt(seq int64, ch chan struct{}) func(client.Event) {
	return func(ev client.Event) {
		if ev.Seq == seq {
			close(ch)
		}
	}
}

func (p *peer) waitClosed() {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	for {
		if _, _, err := p.ws.Read(ctx); err != nil {
			return
		}
	}
}

// TestReconnectThroughClosingErrors: lagged, internal and a gap in seq each drop the
// connection; the client reconnects, resubscribes from its cursor + 1 and delivers
// every event once.
func TestReconnectThroughClosingErrors(t *testing.T) {
	t.Parallel()
	srv := serveScripts(t,
		func(p *peer) {
			p.hello(2)
			p.expectSubscribe(0)
			p.events(0, 1, 2)
			p.send(`{"type":"error","code":"lagged","message":"too slow"}`)
		},
		func(p *peer) {
			p.hello(4)
			p.expectSubscribe(3)
			p.events(3, 4)
			p.send(`{"type":"error","code":"internal","message":"internal"}`)
			p.waitClosed()
		},
		func(p *peer) {
			p.hello(7)
			p.expectSubscribe(5)
			p.events(5, 7) // 6 is missing
			p.waitClosed()
		},
		func(p *peer) {
			p.hello(7)
			p.expectSubscribe(6)
			p.events(6, 7)
			p.waitClosed()
		},
	)
	r := newRecorder()
	o := r.options()
	o.MinBackoff, o.MaxBackoff = 2*time.Millisecond, 10*time.Millisecond
	c := dial(t, srv.url("/agents/a1/ws"), "tok", o)
	if err := c.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	r.expectSeqs(t, 0, 7)
	r.quiet(t, 100*time.Millisecond)
	r.checkExactlyOnce(t)
	var causes []error
	for _, st := range r.snapshotStatuses() {
		if st.State == client.StateReconnecting {
			causes = append(causes, st.Err)
		}
	}
	if len(causes) != 3 || !errors.Is(causes[0], client.ErrLagged) || !errors.Is(causes[1], client.ErrInternal) || !errors.Is(causes[2], client.ErrProtocol) {
		t.Fatalf("reconnect causes %v, want lagged, internal, protocol violation", causes)
	}
	if len(r.snapshotNotices()) != 0 || c.Err() != nil {
		t.Fatalf("closing errors leaked to the caller: %v %v", r.snapshotNotices(), c.Err())
	}
}

// laggingCursor has durably recorded only seq 1, whatever the client stores.
type laggingCursor struct{}

func (laggingCursor) Load() (int64, bool, error) { return 1, true, nil }
func (laggingCursor) Store(int64) error          { return nil }

// TestCursorBehindDelivered: when the cursor lags behind what was delivered, the
// client resubscribes from the cursor and discards what it already delivered.
func TestCursorBehindDelivered(t *testing.T) {
	t.Parallel()
	delivered := make(chan struct{}) // closed once the client's caller has seq 3
	srv := serveScripts(t,
		func(p *peer) {
			p.hello(3)
			p.expectSubscribe(0)
			p.events(0, 1, 2, 3)
			p.await(delivered, "seq 3 delivered")
			p.ws.CloseNow() // a drop without a close frame
		},
		func(p *peer) {
			p.hello(5)
			p.expectSubscribe(2)
			p.events(2, 3, 4, 5)
			p.waitClosed()
		},
	)
	r := newRecorder()
	r.hook = closeAt(3, delivered)
	o := r.options()
	o.Cursor = laggingCursor{}
	o.MinBackoff = 2 * time.Millisecond
	c := dial(t, srv.url("/agents/a1/ws"), "tok", o)
	if err := c.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	r.expectSeqs(t, 0, 5)
	r.quiet(t, 100*time.Millisecond)
}

// TestDialForms: the raw API Gateway URL and the subprotocol token reach the server as
// they should; first frames other than hello fail Dial with typed errors.
func TestDialForms(t *testing.T) {
	t.Parallel()
	holdOpen := func(p *peer) { p.hello(0); p.waitClosed() }
	srv := serveScripts(t, holdOpen, holdOpen,
		func(p *peer) {
			p.send(`{"type":"error","code":"unauthorized","message":"missing, invalid or revoked token"}`)
		},
		func(p *peer) { p.send(`{"type":"hello","proto":2,"session_id":"a1","last_seq":0}`) },
		func(p *peer) { p.events(0) },
	)
	ctx := ctxT(t)

	c, err := client.Dial(ctx, srv.url("/prod?agent_id=a1"), "tok-1", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	req := srv.request(0)
	if req.URL.Path != "/prod" || req.URL.Query().Get("agent_id") != "a1" || req.Header.Get("Authorization") != "Bearer tok-1" || req.Header.Get("Sec-WebSocket-Protocol") != "" {
		t.Fatalf("header form request: %s %v", req.URL, req.Header)
	}

	c, err = client.Dial(ctx, strings.Replace(srv.url("/agents/a1/ws"), "ws://", "http://", 1), "tok-2", client.Options{SubprotocolAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	req = srv.request(1)
	if req.URL.Path != "/agents/a1/ws" || req.Header.Get("Authorization") != "" || strings.ReplaceAll(req.Header.Get("Sec-WebSocket-Protocol"), " ", "") != "terret.v1,terret.bearer.tok-2" {
		t.Fatalf("subprotocol form request: %s %v", req.URL, req.Header)
	}

	for _, tc := range []struct {
		name string
		want error
	}{
		{"unauthorized instead of hello", client.ErrUnauthorized},
		{"another protocol version", client.ErrProtocol},
		{"an event before hello", client.ErrProtocol},
	} {
		var statuses []client.Status
		_, err := client.Dial(ctx, srv.url("/agents/a1/ws"), "tok", client.Options{OnStatus: func(s client.Status) { statuses = append(statuses, s) }})
		if !errors.Is(err, tc.want) {
			t.Fatalf("%s: Dial = %v, want %v", tc.name, err, tc.want)
		}
		if len(statuses) != 2 || statuses[1].State != client.StateClosed || statuses[1].Err != err {
			t.Fatalf("%s: statuses %+v", tc.name, statuses)
		}
	}

	before := srv.n.Load()
	if _, err := client.Dial(ctx, srv.url("/prod"), "tok", client.Options{}); !errors.Is(err, client.ErrBadURL) {
		t.Fatalf("URL naming no agent: %v", err)
	}
	if srv.n.Load() != before {
		t.Fatal("dialed a URL that names no agent")
	}
}

// TestOnEventErrorStops: the caller stops the client by failing OnEvent; the event is
// not recorded.
func TestOnEventErrorStops(t *testing.T) {
	t.Parallel()
	srv := serveScripts(t, func(p *peer) {
		p.hello(2)
		p.expectSubscribe(0)
		p.events(0, 1, 2)
		p.waitClosed()
	})
	stop := errors.New("enough")
	cur := &client.MemoryCursor{}
	c := dial(t, srv.url("/agents/a1/ws"), "tok", client.Options{
		Cursor: cur,
		OnEvent: func(ev client.Event) error {
			if ev.Seq == 1 {
				return stop
			}
			return nil
		},
	})
	if err := c.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); !errors.Is(err, stop) {
		t.Fatalf("Wait = %v", err)
	}
	if seq, ok, _ := cur.Load(); !ok || seq != 0 {
		t.Fatalf("cursor %d %v, want 0", seq, ok)
	}
	var ev client.Event
	if err := json.Unmarshal([]byte(envelope(3)), &ev); err != nil || ev.At.Nanosecond() != 123456000 {
		t.Fatalf("envelope decoding: %v %v", err, ev.At)
	}
}

// TestPingDetectsDeadPeer: with PingInterval, a server that stops answering is treated
// as a drop even though no byte says so.
func TestPingDetectsDeadPeer(t *testing.T) {
	t.Parallel()
	reconnected := make(chan struct{})
	srv := serveScripts(t,
		func(p *peer) {
			p.hello(0)
			p.expectSubscribe(0)
			p.events(0)
			// Reads nothing, so answers no ping, until the client has given up on it.
			p.await(reconnected, "the client's reconnect")
		},
		func(p *peer) {
			close(reconnected)
			p.hello(1)
			p.expectSubscribe(1)
			p.events(1)
			p.waitClosed()
		},
	)
	r := newRecorder()
	o := r.options()
	o.PingInterval = 100 * time.Millisecond
	c := dial(t, srv.url("/agents/a1/ws"), "tok", o)
	if err := c.Subscribe(ctxT(t), 0); err != nil {
		t.Fatal(err)
	}
	r.expectSeqs(t, 0, 1)
	var cause error
	for _, st := range r.snapshotStatuses() {
		if st.State == client.StateReconnecting {
			cause = st.Err
		}
	}
	if cause == nil || !strings.Contains(cause.Error(), "no pong") {
		t.Fatalf("reconnect cause %v, want a missing pong", cause)
	}
}
