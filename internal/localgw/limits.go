package localgw

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
)

// API Gateway's size limits on what a client sends: a WebSocket frame of at most
// 32 KB, a message of at most 128 KB; anything larger closes the connection with
// status 1009 (https://docs.aws.amazon.com/apigateway/latest/developerguide/apigateway-execution-service-websocket-limits-table.html).
// The gateway enforces them when Config.Limits is set.
const (
	MaxFrameBytes   = 32 << 10
	MaxMessageBytes = 128 << 10
)

// errFrameTooBig ends a read that met a frame over MaxFrameBytes.
var errFrameTooBig = errors.New("localgw: frame over 32 KB")

// limitWriter hijacks like the http.ResponseWriter it wraps, but the connection it
// hands to the WebSocket library checks the header of every client frame: one whose
// payload is over MaxFrameBytes is answered with a close frame, status 1009, and the
// read fails with errFrameTooBig. The library itself bounds messages (SetReadLimit).
type limitWriter struct {
	http.ResponseWriter
	mu *sync.Mutex // serializes the close frame with the gateway's own writes
}

func (w limitWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// The library reads what brw already buffered (the client sends nothing before
	// the 101), then the connection itself: wrap the connection.
	lc := limitConn{Conn: nc, fr: &frameReader{src: nc, nc: nc, mu: w.mu}}
	return lc, brw, nil
}

// limitConn is a connection whose reads go through a frameReader.
type limitConn struct {
	net.Conn
	fr *frameReader
}

func (c limitConn) Read(p []byte) (int, error) { return c.fr.Read(p) }

// frameReader passes client bytes through, following the frame headers in them.
type frameReader struct {
	src  io.Reader
	nc   net.Conn
	mu   *sync.Mutex
	hdr  []byte // the header being read
	left uint64 // payload bytes of the current frame still to pass
	err  error
}

func (r *frameReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.left > 0 {
		n, err := r.src.Read(p[:min(uint64(len(p)), r.left)])
		r.left -= uint64(n)
		return n, err
	}
	// Read the next header one byte at a time (a few bytes per frame).
	n, err := r.src.Read(p[:1])
	if n == 0 {
		return 0, err
	}
	r.hdr = append(r.hdr, p[0])
	if need := headerLen(r.hdr); need > 0 && len(r.hdr) == need {
		size := payloadLen(r.hdr)
		r.hdr = r.hdr[:0]
		if size > MaxFrameBytes {
			r.refuse()
			return 0, r.err
		}
		r.left = size
	}
	return 1, err
}

// refuse closes the connection as API Gateway does: close frame 1009, then the end.
func (r *frameReader) refuse() {
	r.err = errFrameTooBig
	reason := "frame too big"
	frame := append([]byte{0x88, byte(2 + len(reason)), 0x03, 0xf1}, reason...) // 0x03f1 = 1009
	r.mu.Lock()
	_, _ = r.nc.Write(frame)
	r.mu.Unlock()
}

// headerLen is the length of a client frame header that starts with hdr, or 0 while
// the first two bytes are not known yet.
func headerLen(hdr []byte) int {
	if len(hdr) < 2 {
		return 0
	}
	n := 2 + 4 // client frames are masked
	switch hdr[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	return n
}

func payloadLen(hdr []byte) uint64 {
	switch hdr[1] & 0x7f {
	case 126:
		return uint64(binary.BigEndian.Uint16(hdr[2:4]))
	case 127:
		return binary.BigEndian.Uint64(hdr[2:10])
	}
	return uint64(hdr[1] & 0x7f)
}
