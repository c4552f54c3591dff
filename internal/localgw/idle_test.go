package localgw_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/localgw"
)

const keepalive = `{"type":"keepalive"}`

// closedWith reads c until the gateway closes it and checks the close status and
// reason the client saw, and the $disconnect event's.
func closedWith(t *testing.T, c *websocket.Conn, rec *recorder, wantReason string) {
	t.Helper()
	ctx := ctxT(t)
	for {
		_, data, err := c.Read(ctx)
		if err == nil {
			t.Fatalf("unexpected frame %s before the close", data)
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusGoingAway || ce.Reason != wantReason {
			t.Fatalf("read ended with %v, want close 1001 %q", err, wantReason)
		}
		break
	}
	ev := rec.waitFor(t, localgw.RouteDisconnect, 1)[0]
	if ev.RequestContext.DisconnectStatusCode != 1001 || ev.RequestContext.DisconnectReason == nil || *ev.RequestContext.DisconnectReason != wantReason {
		t.Fatalf("$disconnect status %d reason %v, want 1001 %q", ev.RequestContext.DisconnectStatusCode, ev.RequestContext.DisconnectReason, wantReason)
	}
}

// sendFrames writes frame n times, one per tick, and reports the first write error.
// The ticker only paces the traffic; what the test waits for is the n-th write.
func sendFrames(ctx context.Context, c *websocket.Conn, frame string, n int, tick time.Duration) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	for i := 0; i < n; i++ {
		if err := c.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
			return fmt.Errorf("frame %d: %w", i, err)
		}
		<-t.C
	}
	return nil
}

// TestIdleConnectionIsClosed: a client that sends nothing is closed with 1001 "Going
// away" once IdleTimeout passed; $disconnect sees the same status. The gateway's pings
// are answered all along (the client reads): they are not activity.
func TestIdleConnectionIsClosed(t *testing.T) {
	rec := newRecorder()
	g := startGateway(t, localgw.Config{Routes: rec.routes(), IdleTimeout: 200 * time.Millisecond, PingInterval: 50 * time.Millisecond}, nil)
	c := dial(t, g, "a1", nil)
	closedWith(t, c, rec, "Going away")
}

// TestActiveConnectionIsNotIdleClosed sends frames — keepalives, or messages for
// $default — at a twentieth of IdleTimeout, three IdleTimeouts' worth: the socket stays
// open (every write succeeds, no $disconnect). Keepalives invoke nothing and get no
// reply. Once the client stops, it is closed for idleness.
func TestActiveConnectionIsNotIdleClosed(t *testing.T) {
	const idle, frames = 2 * time.Second, 60
	for _, tc := range []struct {
		name, frame string
		invokes     bool
	}{
		{"keepalive", keepalive, false},
		{"keepalive with other fields", `{"order":3,"type":"keepalive"}`, false},
		{"messages", `{"type":"subscribe","from_seq":0}`, true},
		{"type keepalive in another field", `{"type":"inject","text":"keepalive"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			g := startGateway(t, localgw.Config{Routes: rec.routes(), IdleTimeout: idle, MockRoutes: []string{"keepalive"}}, nil)
			c := dial(t, g, "a1", nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := sendFrames(ctx, c, tc.frame, frames, idle/20); err != nil {
				t.Fatalf("socket closed while the client was sending: %v", err)
			}
			if tc.invokes {
				rec.waitFor(t, localgw.RouteDefault, frames)
			}
			if n := len(rec.get(localgw.RouteDisconnect)); n != 0 {
				t.Fatal("closed while the client was sending")
			}
			if n := len(rec.get(localgw.RouteDefault)); !tc.invokes && n != 0 {
				t.Fatalf("keepalive invoked $default %d times", n)
			}
			closedWith(t, c, rec, "Going away")
		})
	}
}

// TestMaxConnectionDuration: a connection kept busy with keepalives is still closed
// with 1001 once MaxConnectionDuration passed.
func TestMaxConnectionDuration(t *testing.T) {
	rec := newRecorder()
	g := startGateway(t, localgw.Config{Routes: rec.routes(), MaxConnectionDuration: 300 * time.Millisecond, MockRoutes: []string{"keepalive"}}, nil)
	c := dial(t, g, "a1", nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	go func() { _ = sendFrames(ctx, c, keepalive, 1<<30, 20*time.Millisecond) }()
	closedWith(t, c, rec, "Going away")
}

// TestCloudFrontIdle: with CloudFrontIdleTimeout set the gateway also closes, as
// CloudFront does, a connection to which nothing was written for that long, however
// often the client sends; the gateway's pings do not count. A one-way keepalive (the
// route with no reply, as the template had it) keeps API Gateway's idle timeout away
// but not CloudFront's; the two-way keepalive's answer does. The windows are short, and
// each case ends on a condition: the close with CloudFront's reason, or a number of
// answered keepalives spanning several windows.
func TestCloudFrontIdle(t *testing.T) {
	const window = time.Second
	cfg := func(rec *recorder, replies map[string]string) localgw.Config {
		return localgw.Config{Routes: rec.routes(), CloudFrontIdleTimeout: window,
			MockRoutes: []string{"keepalive"}, MockReplies: replies}
	}
	t.Run("quiet connection", func(t *testing.T) {
		rec := newRecorder()
		quiet := cfg(rec, nil)
		quiet.PingInterval = window / 8 // answered all along (closedWith reads): not bytes from the origin
		c := dial(t, startGateway(t, quiet, nil), "a1", nil)
		closedWith(t, c, rec, localgw.CloudFrontIdleReason)
	})
	t.Run("one-way keepalives", func(t *testing.T) {
		rec := newRecorder()
		c := dial(t, startGateway(t, cfg(rec, nil), nil), "a1", nil)
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		go func() { _ = sendFrames(ctx, c, keepalive, 1<<30, window/10) }()
		closedWith(t, c, rec, localgw.CloudFrontIdleReason)
	})
	t.Run("two-way keepalives", func(t *testing.T) {
		rec := newRecorder()
		c := dial(t, startGateway(t, cfg(rec, map[string]string{"keepalive": keepalive}), nil), "a1", nil)
		ctx := ctxT(t)
		const rounds = 15 // a keepalive per fifth of the window: three windows
		start := time.Now()
		tick := time.NewTicker(window / 5)
		defer tick.Stop()
		for i := 0; i < rounds; i++ {
			<-tick.C
			if err := c.Write(ctx, websocket.MessageText, []byte(keepalive)); err != nil {
				t.Fatalf("keepalive %d: %v", i, err)
			}
			if got := readText(t, c); got != keepalive {
				t.Fatalf("keepalive %d answered %q, want %s", i, got, keepalive)
			}
		}
		if spent := time.Since(start); spent < 2*window {
			t.Fatalf("the keepalives spanned %v, less than two windows of %v: the case proves nothing", spent, window)
		}
		if n := len(rec.get(localgw.RouteDisconnect)); n != 0 {
			t.Fatal("closed while keepalives were answered")
		}
		if n := len(rec.get(localgw.RouteDefault)); n != 0 {
			t.Fatalf("keepalive invoked $default %d times", n)
		}
		closedWith(t, c, rec, localgw.CloudFrontIdleReason) // the client stops: closed
	})
	t.Run("off by default", func(t *testing.T) {
		// Without the setting only API Gateway's rule applies: a client sending
		// one-way keepalives stays open past several windows, then idles out with
		// API Gateway's reason.
		rec := newRecorder()
		g := startGateway(t, localgw.Config{Routes: rec.routes(), IdleTimeout: 3 * window, MockRoutes: []string{"keepalive"}}, nil)
		c := dial(t, g, "a1", nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sendFrames(ctx, c, keepalive, 20, window/5); err != nil {
			t.Fatalf("socket closed while the client was sending: %v", err)
		}
		if n := len(rec.get(localgw.RouteDisconnect)); n != 0 {
			t.Fatal("closed while the client was sending")
		}
		closedWith(t, c, rec, "Going away")
	})
}
