package localgw_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/localgw"
)

// smallBuffer dials with a 4 KB receive buffer, so a client that does not read stalls
// the gateway's writes within a few megabytes (the sender's buffer).
func smallBuffer(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	return d.DialContext(ctx, network, addr)
}

// TestStalledReaderKeepsItsFrames: a client that stops reading is not dropped when a
// post outlasts WriteTimeout. Posts are answered (their frames wait in the outbox), a
// DeleteConnection closes the socket only after them, and the client, reading again,
// gets every frame in post order and then a normal close.
func TestStalledReaderKeepsItsFrames(t *testing.T) {
	rec := newRecorder()
	g := startGateway(t, localgw.Config{Routes: rec.routes(), WriteTimeout: 100 * time.Millisecond}, nil)
	c := dial(t, g, "a1", &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DialContext: smallBuffer}}})
	c.SetReadLimit(1 << 20)
	id := rec.waitFor(t, localgw.RouteConnect, 1)[0].RequestContext.ConnectionID
	client := managementClient(g)
	const frames = 64 // 8 MiB: more than the socket buffers hold
	pad := strings.Repeat("y", localgw.MaxPostBytes-16)
	slow := 0
	for i := range frames {
		start := time.Now()
		if _, err := client.PostToConnection(ctxT(t), &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(id), Data: []byte(fmt.Sprintf("%06d %s", i, pad))}); err != nil {
			t.Fatalf("post %d to a stalled reader: %v", i, err)
		}
		if time.Since(start) >= 100*time.Millisecond {
			slow++
		}
	}
	if slow == 0 {
		t.Fatal("no post waited for the stalled reader: the test did not stall it")
	}
	if _, err := client.DeleteConnection(ctxT(t), &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(id)}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	for i := range frames {
		_, b, err := c.Read(ctxT(t))
		if err != nil {
			t.Fatalf("read frame %d: %v", i, err)
		}
		if want := fmt.Sprintf("%06d ", i); !strings.HasPrefix(string(b), want) {
			t.Fatalf("frame %d starts %q, want %q", i, b[:7], want)
		}
	}
	if _, _, err := c.Read(ctxT(t)); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after the frames: %v, want a normal close", err)
	}
}
