package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/localgw"
)

// liveClient is a socket in the live tail of its agent (hello, subscribe from seq 1, a
// set_policy whose event, seq 1, shows the subscription in force), dialed with the
// operating system's default buffers, whose TCP connection is kept to read its
// receive buffer.
type liveClient struct {
	ws   *websocket.Conn
	conn *net.TCPConn
}

func dialLive(ctx context.Context, t *testing.T, e env, agent string) *liveClient {
	t.Helper()
	lc := &liveClient{}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			lc.conn = tc
		}
		return c, err
	}
	ws, _, err := websocket.Dial(ctx, e.stack.WebSocketURL()+"/agents/"+agent+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + e.token(t, agent)}},
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: dial}},
	})
	if err != nil {
		t.Fatalf("dial %s: %v", agent, err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	ws.SetReadLimit(1 << 20)
	lc.ws = ws
	if f, err := lc.read(ctx); err != nil || f.Type != "hello" {
		t.Fatalf("%s: first frame %+v (%v), want hello", agent, f, err)
	}
	for i, m := range []string{`{"type":"subscribe","from_seq":1,"order":1}`, `{"type":"set_policy","patterns":["p"],"order":2}`} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatalf("%s: frame %d: %v", agent, i, err)
		}
	}
	if f, err := lc.read(ctx); err != nil || f.Type != "policy/updated" || f.Seq == nil || *f.Seq != 1 {
		t.Fatalf("%s: after subscribe %+v (%v), want policy/updated at seq 1", agent, f, err)
	}
	return lc
}

func (lc *liveClient) read(ctx context.Context) (frame, error) {
	_, b, err := lc.ws.Read(ctx)
	if err != nil {
		return frame{}, err
	}
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		return frame{}, fmt.Errorf("frame %.100q is not JSON: %w", b, err)
	}
	return f, nil
}

// receiveBuffer is the client's kernel receive buffer now (SO_RCVBUF: what Linux
// reports, its bookkeeping included, so more than the bytes it holds).
func (lc *liveClient) receiveBuffer(t *testing.T) int {
	t.Helper()
	raw, err := lc.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var serr error
	if err := raw.Control(func(fd uintptr) { n, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return n
}

// TestPausedReaderGetsLagged (protocol: a client more than outbound_queue events
// behind is dropped with lagged): a client with the operating system's default
// buffers stops reading in the live tail. Events keep coming, paced by the gateway's
// answers, until one post waits for the client; then outbound_queue+2 more. The client
// is dropped with lagged, and, reading again, gets an exact prefix of the log, lagged
// and a normal close.
//
// "Behind" is the events between the log's tip and the last event the client
// received. It passes outbound_queue before the drop (the drop is due), and it never
// exceeded the bound by more than the frames the two kernel buffers between the
// gateway and the client hold: the client's receive buffer, counted as received, and
// the gateway's send buffer (localgw.Config.SendBuffer, doubled by Linux). Left to
// the kernel, the gateway's send buffer grows to 4 MiB and hides some 250 such events
// from the bound: the post that waits comes only after more than 200 appends.
func TestPausedReaderGetsLagged(t *testing.T) {
	t.Parallel()
	const queue = 16
	watch := newLogWatch()
	// Pings every 10 minutes: a browser answers them whatever its page reads, this
	// client only while it reads.
	e := startStack(t, devstack.Options{OutboundQueue: queue, Logger: slog.New(watch.Handler()), PingInterval: 10 * time.Minute})
	ctx, cancel := hangContext(t)
	defer cancel()
	const agent = "paused"
	c := dialLive(ctx, t, e, agent)
	conn := watch.conn(ctx, t, agent)

	answered := func() int {
		return watch.count(conn, "posted", "post queued: the client is not reading", "post failed")
	}
	waited := func() bool {
		return watch.count(conn, "post queued: the client is not reading", "post failed", "delete connection", "disconnected") > 0
	}
	base := answered()
	pad := strings.Repeat("x", 16<<10)
	appended := 0
	for {
		watch.wait(ctx, t, fmt.Sprintf("the posts of the first %d events", appended-queue/2), func() bool {
			return appended-(answered()-base) < queue/2 || waited()
		})
		if waited() {
			break
		}
		if appended == 200 {
			t.Fatalf("200 events of 16 KiB posted to a client that reads nothing and no post waited for it: "+
				"the kernel buffers hide them from the outbound-queue bound (client receive buffer %d bytes)", c.receiveBuffer(t))
		}
		if _, err := e.log.Append(ctx, agent, "test/event", map[string]string{"pad": pad}); err != nil {
			t.Fatal(err)
		}
		appended++
	}
	beforeWait := appended
	for range queue + 2 {
		if _, err := e.log.Append(ctx, agent, "test/event", map[string]string{"pad": pad}); err != nil {
			t.Fatal(err)
		}
		appended++
	}
	watch.wait(ctx, t, "the connection dropped", func() bool {
		return watch.count(conn, "delete connection", "disconnected") > 0
	})
	rcvbuf := c.receiveBuffer(t)
	t.Logf("%d events appended, %d before a post waited; client receive buffer %d bytes", appended, beforeWait, rcvbuf)

	tip := int64(1 + appended) // seq 1 is policy/updated; the events are seqs 2…
	last := int64(1)
	for {
		f, err := c.read(ctx)
		if err != nil {
			t.Fatalf("after seq %d: read ended with %v (close status %d), want a lagged error frame first", last, err, websocket.CloseStatus(err))
		}
		if f.Type == "error" {
			t.Logf("lagged after seq %d", last)
			if f.Code != "lagged" {
				t.Fatalf("error frame %+v after seq %d, want lagged", f, last)
			}
			break
		}
		if f.Seq == nil || *f.Seq != last+1 {
			t.Fatalf("frame %+v after seq %d, want the next event in order", f, last)
		}
		last = *f.Seq
	}
	if _, err := c.read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after lagged: %v (close status %d), want a normal close", err, websocket.CloseStatus(err))
	}
	behind := tip - last
	frameBytes := len(pad) + 100
	hidden := (rcvbuf + 2*localgw.DefaultSendBuffer) / frameBytes
	t.Logf("%d events of 16 KiB appended (%d before a post waited); %d received; %d behind when dropped; kernel buffers hold %d such frames (client receive buffer %d bytes)",
		appended, beforeWait, last-1, behind, hidden, rcvbuf)
	if behind <= queue {
		t.Fatalf("dropped %d events behind, within outbound_queue %d", behind, queue)
	}
	// The drop's own bound: outbound_queue+2 appended after the wait, at most queue/2
	// unanswered before it, one frame left in the outbox by the post that waited, and
	// what the buffers hold.
	if limit := int64(queue + 2 + queue/2 + 1 + hidden + 1); behind > limit {
		t.Fatalf("dropped %d events behind; the bound allows %d (outbound_queue %d, %d frames in the kernel buffers)", behind, limit, queue, hidden)
	}
}

// TestKeepingUpReaderNeverLagged: a client that reads all the time, with events
// appended in bursts of outbound_queue, each burst once the client has received the
// previous one, is never more than outbound_queue events behind: it gets every event
// in order and no lagged.
func TestKeepingUpReaderNeverLagged(t *testing.T) {
	t.Parallel()
	const queue, bursts = 16, 8
	e := startStack(t, devstack.Options{OutboundQueue: queue})
	ctx, cancel := hangContext(t)
	defer cancel()
	const agent = "keeping-up"
	c := dialLive(ctx, t, e, agent)
	got := make(chan frame, queue)
	readErr := make(chan error, 1)
	go func() {
		for {
			f, err := c.read(ctx)
			if err != nil {
				readErr <- err
				return
			}
			select {
			case got <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	pad := strings.Repeat("x", 16<<10)
	last := int64(1)
	for b := range bursts {
		for range queue {
			if _, err := e.log.Append(ctx, agent, "test/event", map[string]string{"pad": pad}); err != nil {
				t.Fatal(err)
			}
		}
		for range queue {
			var f frame
			select {
			case f = <-got:
			case err := <-readErr:
				t.Fatalf("burst %d, after seq %d: %v", b, last, err)
			}
			if f.Type == "error" {
				t.Fatalf("burst %d, after seq %d: error frame %+v, want none", b, last, f)
			}
			if f.Seq == nil || *f.Seq != last+1 {
				t.Fatalf("burst %d: frame %+v after seq %d, want the next event", b, f, last)
			}
			last = *f.Seq
		}
	}
	if want := int64(1 + queue*bursts); last != want {
		t.Fatalf("last seq %d, want %d", last, want)
	}
}
