package localgw

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
)

// tracker counts in-flight work (open sockets, invocations) so Shutdown can wait for
// it. Unlike sync.WaitGroup it tolerates add while a wait is in progress: a handler
// finishing during shutdown may still start an asynchronous invocation, which is then
// waited for too. Once closed and drained to zero, add refuses.
type tracker struct {
	mu      sync.Mutex
	n       int
	closing bool
	drained bool
	idle    chan struct{}
}

func newTracker() tracker { return tracker{idle: make(chan struct{})} }

// add registers one unit of work; false means the gateway has fully shut down.
func (t *tracker) add() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.drained {
		return false
	}
	t.n++
	return true
}

func (t *tracker) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 && t.closing && !t.drained {
		t.drained = true
		close(t.idle)
	}
}

func (t *tracker) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closing = true
	if t.n == 0 && !t.drained {
		t.drained = true
		close(t.idle)
	}
}

func (t *tracker) wait(ctx context.Context) error {
	select {
	case <-t.idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newShortID returns an id shaped like API Gateway's connection, request and message
// ids: 11 random bytes in standard base64, 16 characters ending in '=' (for example
// "L0SM9cOFvHcCIhw="). Standard base64 may contain '+' and '/', as the real ids can,
// so consumers that put ids in URLs are exercised honestly.
func newShortID() string {
	var b [11]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// newUUID returns a random (version 4) UUID, the shape of Lambda request ids.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// newTraceID returns an X-Amzn-Trace-Id root like the ones API Gateway adds.
func newTraceID(epochSeconds int64) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("Root=1-%08x-%s", epochSeconds, hex.EncodeToString(b[:]))
}

// writeJSONError answers an AWS-style error: the X-Amzn-ErrorType header is what the
// SDKs' REST-JSON deserializers map to a typed error (GoneException, …).
func writeJSONError(w http.ResponseWriter, status int, errorType, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", errorType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": message})
}

// sendBufferListener sets the kernel send buffer of every TCP connection it accepts
// (Config.SendBuffer). A connection whose buffer cannot be set keeps the kernel's.
type sendBufferListener struct {
	net.Listener
	size int
}

func (l sendBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(l.size)
	}
	return c, err
}
