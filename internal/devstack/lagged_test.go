package devstack_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/devstack"
)

// slowDial opens sockets with a tiny receive buffer, so a client that reads slowly
// pushes back on the gateway's writes as a slow network would.
func slowDial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	return d.DialContext(ctx, network, addr)
}

// TestLaggedLiveTail: a live connection that falls more than --outbound-queue events
// behind is sent lagged and closed, after an exact prefix of the log; a connection of
// another agent is unaffected.
func TestLaggedLiveTail(t *testing.T) {
	t.Parallel()
	// Pings every 5 minutes: the slow client reads nothing for a while (below), and a
	// ping it does not answer would close its socket first.
	e := startStack(t, devstack.Options{OutboundQueue: 40, PingInterval: 5 * time.Minute})
	slowTok, fastTok := e.token(t, "slow"), e.token(t, "fast")
	ctx, cancel := hangContext(t)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, e.stack.WebSocketURL()+"/agents/slow/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + slowTok}},
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: slowDial}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	fast := e.dial(t, "fast", fastTok)
	fast.hello("fast")
	fast.send(`{"type":"subscribe","from_seq":0}`)
	fast.events(0, 0)

	read := func() (string, error) {
		_, b, err := ws.Read(ctx)
		return string(b), err
	}
	if f, err := read(); err != nil || !strings.Contains(f, `"type":"hello"`) {
		t.Fatalf("first frame %q, %v", f, err)
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"subscribe","from_seq":0}`)); err != nil {
		t.Fatal(err)
	}
	if f, _ := read(); !strings.Contains(f, `"seq":0`) {
		t.Fatalf("replay frame %q", f)
	}
	// Large events pile up while the slow client reads nothing: it starts reading once
	// 60 are appended — the bound (40) and more than the socket's buffers hold — so it
	// falls behind however fast this machine appends (a reader pacing itself fell
	// behind only while appends outran it, which a loaded machine's DynamoDB Local did
	// not).
	big := strings.Repeat("x", 60*1024)
	appended := make(chan error, 1)
	behind := make(chan struct{})
	go func() {
		defer func() {
			select {
			case <-behind:
			default:
				close(behind)
			}
		}()
		for i := range 150 {
			if i == 60 {
				close(behind)
			}
			if _, err := e.log.Append(context.Background(), "slow", "test/big", map[string]any{"i": i, "pad": big}); err != nil {
				appended <- err
				return
			}
			if i%10 == 0 {
				if _, err := e.log.Append(context.Background(), "fast", "test/event", map[string]int{"i": i}); err != nil {
					appended <- err
					return
				}
			}
		}
		appended <- nil
	}()
	slowDone := make(chan int64, 1)
	go func() {
		// An exact prefix of the log, then lagged, then the close.
		want := int64(1)
		defer func() { slowDone <- want }()
		select {
		case <-behind:
		case <-ctx.Done():
		}
		for {
			f, err := read()
			if err != nil {
				t.Errorf("socket ended without lagged after seq %d: %v", want-1, err)
				return
			}
			if strings.Contains(f, `"type":"error"`) {
				if !strings.Contains(f, `"code":"lagged"`) {
					t.Errorf("error frame %s, want lagged", f)
				}
				if _, err := read(); err == nil {
					t.Error("socket still open after lagged")
				}
				return
			}
			if !strings.Contains(f, `"seq":`+itoa(want)+`,`) {
				t.Errorf("frame %.80s…, want seq %d", f, want)
				return
			}
			want++
		}
	}()
	fast.events(1, 15) // the other agent streams on, unaffected
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	want := <-slowDone
	if t.Failed() {
		return
	}
	if want > 150 {
		t.Fatalf("all %d events arrived before lagged: the client never lagged", want-1)
	}
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
