package localgw_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/terret/terret-ws/internal/localgw"
	"github.com/terret/terret-ws/internal/protocol"
)

// rawSocket opens a WebSocket to g by hand, so that the test can send a frame header
// claiming any length and stream its payload from one small buffer: the client side
// allocates nothing per byte, and what the process allocates is the gateway's.
func rawSocket(t *testing.T, g *localgw.Gateway) net.Conn {
	t.Helper()
	hostPort := strings.TrimPrefix(g.WebSocketURL(), "ws://")
	nc, err := net.Dial("tcp", hostPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	fmt.Fprintf(nc, "GET /agents/a1/ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", hostPort)
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", err, resp)
	}
	return nc
}

// frameHeader is a masked text frame header of n payload bytes with a zero mask key
// (masking is then the identity).
func frameHeader(n uint64) []byte {
	h := []byte{0x81, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint64(h[2:], n)
	return append(h, 0, 0, 0, 0)
}

// totalAlloc is the bytes allocated so far by the whole process.
func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// TestOversizedFrameCostsAtMostTheReadLimit sends frames claiming 8 MiB of control
// characters, eight sockets at once: each is closed with 1009 after ReadLimit bytes,
// $default never runs, and the process allocates a small multiple of ReadLimit per
// socket, not of the 8 MiB claimed.
func TestOversizedFrameCostsAtMostTheReadLimit(t *testing.T) {
	rec := newRecorder()
	g := startGateway(t, localgw.Config{Routes: rec.routes(), Logger: nil}, nil)
	const sockets, claimed = 8, 8 << 20
	conns := make([]net.Conn, sockets)
	for i := range conns {
		conns[i] = rawSocket(t, g)
	}
	rec.waitFor(t, localgw.RouteConnect, sockets)
	chunk := bytes.Repeat([]byte{0x01}, 32<<10)
	before := totalAlloc()
	done := make(chan struct{}, sockets)
	for _, nc := range conns {
		go func() {
			defer func() { done <- struct{}{} }()
			if _, err := nc.Write(frameHeader(claimed)); err != nil {
				return
			}
			for sent := 0; sent < claimed; sent += len(chunk) {
				if _, err := nc.Write(chunk); err != nil {
					return // the gateway closed the socket
				}
			}
		}()
	}
	for _, ev := range rec.waitFor(t, localgw.RouteDisconnect, sockets) {
		if ev.RequestContext.DisconnectStatusCode != 1009 {
			t.Fatalf("disconnect status %d, want 1009", ev.RequestContext.DisconnectStatusCode)
		}
	}
	grown := totalAlloc() - before
	for _, nc := range conns {
		nc.Close() // unblocks a writer stuck on a full socket buffer
	}
	for range conns {
		<-done
	}
	if n := len(rec.get(localgw.RouteDefault)); n != 0 {
		t.Fatalf("$default ran %d times for frames over the limit", n)
	}
	// Per socket: the buffered message (grown by doubling, ~2.5× ReadLimit measured)
	// and the gateway's bookkeeping, with room for the race detector's own; reading the
	// claimed 8 MiB each would be 64 MiB at least.
	if limit := uint64(sockets * 16 * localgw.ReadLimit); grown > limit {
		t.Fatalf("allocated %d bytes for %d sockets, want at most %d (16× ReadLimit each)", grown, sockets, limit)
	}
	t.Logf("allocated %d bytes for %d oversized frames (%.1f× ReadLimit each)", grown, sockets, float64(grown)/float64(sockets*localgw.ReadLimit))
}

// TestLargestFrameCostsASmallMultiple sends the largest frame the gateway takes,
// ReadLimit bytes of control characters (each escaped to six bytes in the JSON event,
// as API Gateway's own event escapes them), to a $default handler that parses it as
// the socket handler does. What the process allocates for it is bounded by a small
// multiple of the frame's size.
func TestLargestFrameCostsASmallMultiple(t *testing.T) {
	parsed := make(chan error, 1)
	routes := map[string]lambda.Handler{localgw.RouteDefault: lambda.NewHandler(func(ctx context.Context, ev events.APIGatewayWebsocketProxyRequest) error {
		_, err := protocol.Parse([]byte(ev.Body))
		parsed <- err
		return nil
	})}
	g := startGateway(t, localgw.Config{Routes: routes}, nil)
	nc := rawSocket(t, g)
	frame := append(frameHeader(localgw.ReadLimit), bytes.Repeat([]byte{0x01}, localgw.ReadLimit)...)
	before := totalAlloc()
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	if err := <-parsed; err == nil {
		t.Fatal("Parse accepted control characters")
	}
	grown := totalAlloc() - before
	// The event's Body is 6× the frame, and it is built once and decoded once.
	if limit := uint64(40 * localgw.ReadLimit); grown > limit {
		t.Fatalf("allocated %d bytes for one %d-byte frame (%.1f×), want at most 40×", grown, localgw.ReadLimit, float64(grown)/localgw.ReadLimit)
	}
	t.Logf("allocated %d bytes for one %d-byte frame (%.1f×)", grown, localgw.ReadLimit, float64(grown)/localgw.ReadLimit)
}
