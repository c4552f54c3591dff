package devstack_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
)

func TestUnauthorized(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	other := e.token(t, "other")
	e.token(t, "a1")
	tests := []struct{ name, token string }{
		{"no token", ""},
		{"another agent's token", other},
		{"garbage", "tt_garbage"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := e.dial(t, "a1", tc.token)
			f := c.must(hang())
			if f.Type != "error" || f.Code != "unauthorized" {
				t.Fatalf("first frame %s, want error unauthorized", f)
			}
			c.expectClosed()
		})
	}
	// Nothing about the agent was resolved: no session was created by the refused connects.
	if _, err := e.log.Tip(context.Background(), "a1"); err == nil {
		t.Fatal("an unauthorized connect created the session")
	}
}

func TestHelloFirstThenReplayAndTail(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	c := e.dial(t, "a1", tok)
	c.send(`{"type":"subscribe","from_seq":0}`) // at once: hello must still come first
	h := c.hello("a1")
	if h.Last != 0 {
		t.Fatalf("hello last_seq %d on a new session, want 0", h.Last)
	}
	evs := c.events(0, 0)
	if !strings.Contains(evs[0].String(), `"type":"session/created"`) {
		t.Fatalf("seq 0 is %s, want session/created", evs[0])
	}
	appendN(t, e.log, "a1", 30) // live tail
	c.events(1, 30)
	// Each once: the next frame after 30 is the next event appended.
	appendN(t, e.log, "a1", 1)
	c.events(31, 31)

	// A second connection replays then tails with no seam.
	c2 := e.dial(t, "a1", tok)
	c.expectError("superseded")
	c.expectClosed()
	h2 := c2.hello("a1")
	if h2.Last != 31 {
		t.Fatalf("hello last_seq %d, want 31", h2.Last)
	}
	c2.send(map[string]any{"type": "subscribe", "from_seq": 25})
	done := make(chan error, 1)
	go func() {
		for i := range 10 {
			if _, err := e.log.Append(context.Background(), "a1", "test/event", map[string]int{"i": i}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	c2.events(25, 41)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	appendN(t, e.log, "a1", 1)
	c2.events(42, 42)
}

func TestResubscribeMidStream(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	c := e.dial(t, "a1", tok)
	c.hello("a1")
	e.seed(t, "a1", 200) // the session exists already: seed skips its creation
	c.send(`{"type":"subscribe","from_seq":0}`)
	c.events(0, 20)
	c.send(`{"type":"subscribe","from_seq":5}`)
	// Discard until the new replay's first event, as the spec tells clients to.
	for {
		f := c.must(hang())
		if f.Seq == nil {
			t.Fatalf("protocol frame %s during resubscribe", f)
		}
		if *f.Seq == 5 {
			break
		}
	}
	c.events(6, 200)
	// Nothing of the first replay follows the second: the next frame is the next event.
	appendN(t, e.log, "a1", 1)
	c.events(201, 201)
}

func TestReplayTruncated(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{ReplayLimit: 5})
	tok := e.token(t, "a1")
	c := e.dial(t, "a1", tok)
	c.hello("a1")
	appendN(t, e.log, "a1", 20) // tip 20
	c.send(`{"type":"subscribe","from_seq":3}`)
	f := c.must(hang())
	if f.Type != "replay_truncated" || f.Req != 3 || f.From != 16 || f.Seq != nil {
		t.Fatalf("first frame %s, want replay_truncated{requested_from_seq 3, from_seq 16}", f)
	}
	c.events(16, 20)
	appendN(t, e.log, "a1", 3)
	c.events(21, 23)
	// Within the limit: no replay_truncated.
	c.send(`{"type":"subscribe","from_seq":19}`)
	for {
		f := c.must(hang())
		if f.Type == "replay_truncated" {
			t.Fatalf("replay_truncated for a subscribe within the limit: %s", f)
		}
		if f.Seq != nil && *f.Seq == 19 {
			break
		}
	}
	c.events(20, 23)
}

func TestBadFrameKeepsSocketOpen(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	c := e.dial(t, "a1", tok)
	c.send(`not json`) // before hello: the error still comes after hello
	c.hello("a1")
	if f := c.expectError("bad_frame"); !strings.Contains(f.Msg, "not valid JSON") {
		t.Fatalf("bad_frame message %q does not say what is wrong", f.Msg)
	}
	for _, bad := range []string{
		`{"type":"nope"}`,
		`{"type":"subscribe"}`,
		`{"type":"subscribe","from_seq":"1"}`,
		`[1]`,
		`{"type":"set_policy","patterns":[1]}`,
		// Near the gateway's 128 KiB message limit, still read and answered.
		`{"type":"inject","text":"` + strings.Repeat("x", 120<<10) + `","wake":"yes"}`,
	} {
		c.send(bad)
		c.expectError("bad_frame")
	}
	c.send(`{"type":"subscribe","from_seq":0}`)
	c.events(0, 0)
	// Over 128 KiB the gateway closes the socket with 1009 before any handler runs, as
	// API Gateway does: the protocol's 1 MiB bad_frame is never reached.
	c.send(`{"type":"inject","text":"` + strings.Repeat("x", 1<<20) + `","wake":true}`)
	if _, err := c.ws.Next(hang()); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("after a 1 MiB frame: %v, want close 1009", err)
	}
}

func TestSupersededConnectionIsRefused(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	c1 := e.dial(t, "a1", tok)
	c1.hello("a1")
	c2 := e.dial(t, "a1", tok)
	c2.hello("a1")
	c1.expectError("superseded")
	c1.expectClosed()
	c2.send(`{"type":"subscribe","from_seq":0}`)
	c2.events(0, 0)
	appendN(t, e.log, "a1", 3)
	c2.events(1, 3)
}

func TestRotationAndRevocation(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	ctx := context.Background()
	tok := e.token(t, "a1")
	c := e.dial(t, "a1", tok)
	c.hello("a1")
	c.send(`{"type":"subscribe","from_seq":0}`)
	c.events(0, 0)
	fresh, err := e.tokens.Rotate(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	c.expectError("unauthorized")
	c.expectClosed()
	old := e.dial(t, "a1", tok)
	old.expectError("unauthorized")
	old.expectClosed()

	c2 := e.dial(t, "a1", fresh)
	c2.hello("a1")
	c2.send(`{"type":"subscribe","from_seq":0}`)
	c2.events(0, 0)
	if err := e.tokens.Revoke(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	c2.expectError("unauthorized")
	c2.expectClosed()
	c3 := e.dial(t, "a1", fresh)
	c3.expectError("unauthorized")
	c3.expectClosed()
}

// TestBrowserSubprotocolToken: a browser offers the token as a subprotocol; the server
// answers with the fixed protocol name and never echoes the token.
func TestBrowserSubprotocolToken(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	for _, tc := range []struct {
		name, token string
		ok          bool
	}{{"valid", tok, true}, {"garbage", "tt_nope", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), hang())
			defer cancel()
			ws, resp, err := websocket.Dial(ctx, e.stack.WebSocketURL()+"/agents/a1/ws", &websocket.DialOptions{
				Subprotocols: []string{"terret.v1", "terret.bearer." + tc.token},
			})
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			defer ws.CloseNow()
			if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != "terret.v1" {
				t.Fatalf("answered subprotocol %q, want terret.v1", got)
			}
			_, b, err := ws.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := `"type":"hello"`
			if !tc.ok {
				want = `"code":"unauthorized"`
			}
			if !strings.Contains(string(b), want) {
				t.Fatalf("first frame %s, want %s", b, want)
			}
		})
	}
}

// TestPingFrames: the local gateway pings every --ping-interval. The interval is long
// enough for a loaded machine to answer each ping in time (the gateway closes a
// socket whose pong takes longer than an interval).
func TestPingFrames(t *testing.T) {
	t.Parallel()
	const interval, want = 200 * time.Millisecond, 4
	e := startStack(t, devstack.Options{PingInterval: interval})
	tok := e.token(t, "a1")
	var pings atomic.Int64
	last := make(chan time.Time, 1)
	ctx, cancel := context.WithTimeout(context.Background(), hang())
	defer cancel()
	dialed := time.Now() // before the gateway's ping ticker starts
	ws, _, err := websocket.Dial(ctx, e.stack.WebSocketURL()+"/agents/a1/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}},
		OnPingReceived: func(context.Context, []byte) bool {
			if pings.Add(1) == want {
				last <- time.Now()
			}
			return true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	go func() {
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				return
			}
		}
	}()
	select {
	case at := <-last:
		// The gateway pings on its ticker only: ping n comes no sooner than n
		// intervals after the socket opened.
		if got, min := at.Sub(dialed), want*interval; got < min {
			t.Fatalf("%d pings %v after dialing, want no sooner than %v (interval %v)", want, got, min, interval)
		}
	case <-ctx.Done():
		t.Fatalf("%d pings in 30s at a %v interval, want %d", pings.Load(), interval, want)
	}
}

// TestInternalErrorClosesWithoutDetails: an unexpected store failure while serving a
// frame answers internal and closes the socket; the client never sees the cause.
func TestInternalErrorClosesWithoutDetails(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	c := e.dial(t, "a1", tok)
	c.hello("a1")
	db := dynamolocal.Client(e.stack.DynamoDBEndpoint)
	table := e.stack.Tables["LogTable"]
	if _, err := db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &table}); err != nil {
		t.Fatal(err)
	}
	c.send(`{"type":"subscribe","from_seq":0}`)
	f := c.expectError("internal")
	for _, leak := range []string{"ResourceNotFound", "dynamodb", "sessionlog", table} {
		if strings.Contains(f.String(), leak) {
			t.Fatalf("internal error frame %s leaks %q", f, leak)
		}
	}
	c.expectClosed()
}

// TestInjectTextBound: text longer than one event can carry is refused whole with
// bad_frame; nothing is logged and nothing is cut.
func TestInjectTextBound(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	c := e.dial(t, "a1", e.token(t, "a1"))
	c.hello("a1")
	c.send(map[string]any{"type": "inject", "text": strings.Repeat("x", 70000), "wake": true})
	if f := c.expectError("bad_frame"); !strings.Contains(f.Msg, "at most 65536") {
		t.Fatalf("bad_frame message %q does not state the bound", f.Msg)
	}
	// The refusal is the handler's whole answer: it has checked the frame before any
	// write, and writes nothing after refusing it.
	if tip, err := e.log.Tip(context.Background(), "a1"); err != nil || tip != 0 {
		t.Fatalf("tip = %d, %v after a refused inject; want 0", tip, err)
	}
}

// TestStartFailsCleanly: a stack that cannot reach its DynamoDB endpoint returns the
// error and closes what it had started, rather than panicking.
func TestStartFailsCleanly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{DynamoDBEndpoint: "http://127.0.0.1:1", Addr: "127.0.0.1:0"})
	if err == nil {
		st.Close()
		t.Fatal("Start with an unreachable DynamoDB endpoint succeeded")
	}
	if st != nil {
		t.Fatalf("Start returned a stack with its error %v", err)
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("error %q does not name the endpoint", err)
	}
}
