package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/protocol"
)

// conn is one WebSocket connection and the goroutine reading it ahead of the
// callbacks, so that pings are answered while a callback runs.
type conn struct {
	ws     *websocket.Conn
	hello  Hello
	frames chan read // in arrival order; the last one carries the error that ended it
	quit   chan struct{}
	once   sync.Once

	writeMu sync.Mutex // numbers and writes one frame at a time
	order   int64      // order field of the last frame written on this connection
	// sent is when the client last wrote a frame (UnixNano), or connected: the keepalive
	// loop's idle clock. Frames received do not move it: AWS's quota page does not say
	// that the server's frames keep a connection open, so a client that only receives
	// (tail on a busy agent) must still send (docs/protocol.md, "Extension: keepalive").
	sent atomic.Int64
}

// MaxFrameBytes is the largest WebSocket frame the client writes: API Gateway closes a
// connection that sends a frame over 32 KB (status 1009), so a longer message goes out
// as continuation frames of at most this size. (A message is still bounded at 128 KB.)
const MaxFrameBytes = 32_000

type read struct {
	data []byte
	err  error
}

// connect opens one connection and reads its hello, within ctx and DialTimeout.
func (c *Client) connect(ctx context.Context) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	h := c.opts.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	o := &websocket.DialOptions{HTTPClient: c.opts.HTTPClient, HTTPHeader: h}
	if c.opts.SubprotocolAuth {
		o.Subprotocols = []string{Subprotocol, SubprotocolBearer + c.token}
	} else if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	ws, resp, err := websocket.Dial(ctx, c.url, o)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return nil, &ProtocolError{Code: CodeUnauthorized, Message: "refused at the handshake (HTTP 401)"}
		}
		return nil, fmt.Errorf("client: dial %s: %w", c.url, err)
	}
	ws.SetReadLimit(readLimit)
	typ, data, err := ws.Read(ctx)
	if err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("client: read hello from %s: %w", c.url, err)
	}
	hello, err := firstFrame(typ, data)
	if err != nil {
		ws.CloseNow()
		return nil, err
	}
	cn := &conn{ws: ws, hello: hello, frames: make(chan read, c.opts.ReadAhead), quit: make(chan struct{})}
	cn.touch()
	go cn.readLoop()
	if c.opts.KeepaliveInterval > 0 {
		go cn.keepaliveLoop(c.opts.KeepaliveInterval, c.opts.keepaliveAfter)
	}
	if c.opts.PingInterval > 0 {
		go cn.pingLoop(c.opts.PingInterval)
	}
	return cn, nil
}

// firstFrame checks the protocol's promise that hello comes first. The server may
// instead refuse the connection with an error frame (unauthorized, on API Gateway).
func firstFrame(typ websocket.MessageType, data []byte) (Hello, error) {
	var f wireFrame
	if typ != websocket.MessageText || json.Unmarshal(data, &f) != nil || f.Seq != nil {
		return Hello{}, fmt.Errorf("%w: first frame is not hello: %.200s", ErrProtocol, data)
	}
	switch f.Type {
	case protocol.TypeHello:
		if f.Proto != protocol.ProtoVersion {
			return Hello{}, &fatal{fmt.Errorf("%w: server speaks protocol %d, this client %d", ErrProtocol, f.Proto, protocol.ProtoVersion)}
		}
		return Hello{Proto: f.Proto, SessionID: f.SessionID, LastSeq: f.LastSeq, Epoch: f.Epoch, Role: f.Role}, nil
	case protocol.TypeError:
		return Hello{}, &ProtocolError{Code: f.Code, Message: f.Message}
	}
	return Hello{}, fmt.Errorf("%w: first frame is %q, not hello", ErrProtocol, f.Type)
}

func (cn *conn) readLoop() {
	for {
		typ, data, err := cn.ws.Read(context.Background())
		if err == nil && typ != websocket.MessageText {
			err = fmt.Errorf("%w: binary frame", ErrProtocol)
		}
		if err != nil {
			err = dropped(err)
		}
		select {
		case cn.frames <- read{data, err}:
		case <-cn.quit:
			return
		}
		if err != nil {
			return
		}
	}
}

// keepaliveFrame is the keepalive extension's frame, exactly (docs/protocol.md,
// "Extension: keepalive").
var keepaliveFrame = []byte(`{"type":"keepalive"}`)

func (cn *conn) touch() { cn.sent.Store(time.Now().UnixNano()) }

// keepaliveLoop sends keepaliveFrame whenever interval has passed with nothing sent,
// however much was received, so that API Gateway's idle timeout never closes the
// connection: at most one keepalive per interval. It wakes at most once per interval;
// a frame sent meanwhile only moves its next look later.
func (cn *conn) keepaliveLoop(interval time.Duration, after func(time.Duration) <-chan time.Time) {
	wait := interval
	for {
		select {
		case <-cn.quit:
			return
		case <-after(wait):
		}
		idle := time.Since(time.Unix(0, cn.sent.Load()))
		if idle < interval {
			wait = interval - idle
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := cn.writeRaw(ctx, keepaliveFrame)
		cancel()
		if err != nil {
			return // the reader sees the closed socket and the client reconnects
		}
		wait = interval
	}
}

// writeRaw writes data as it is, unnumbered: a frame the server's handlers never see.
func (cn *conn) writeRaw(ctx context.Context, data []byte) error {
	cn.writeMu.Lock()
	defer cn.writeMu.Unlock()
	if err := writeMessage(ctx, cn.ws, data); err != nil {
		cn.ws.CloseNow()
		return err
	}
	cn.touch()
	return nil
}

// pingLoop pings every interval; a ping unanswered for an interval ends the connection.
func (cn *conn) pingLoop(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-cn.quit:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		err := cn.ws.Ping(ctx)
		cancel()
		if err != nil {
			select {
			case cn.frames <- read{err: fmt.Errorf("client: connection lost: no pong within %s", interval)}:
			case <-cn.quit:
			}
			cn.ws.CloseNow()
			return
		}
	}
}

// dropped describes a connection that ended without an error frame.
func dropped(err error) error {
	if errors.Is(err, ErrProtocol) {
		return err
	}
	if code := websocket.CloseStatus(err); code != -1 {
		return fmt.Errorf("client: connection closed by the server (%d)", code)
	}
	return fmt.Errorf("client: connection lost: %w", err)
}

// write sends f numbered with the order field (1, 2, 3, … on each connection), so the
// server applies the frames in the order they were written even when it handles them
// concurrently (docs/protocol.md, "Ordering"). Frames are numbered and written under one
// lock: the numbers follow the wire order.
func (cn *conn) write(ctx context.Context, f protocol.ClientFrame) error {
	return cn.writeID(ctx, f, "")
}

// writeID is write with the frame's client_id ("": none).
func (cn *conn) writeID(ctx context.Context, f protocol.ClientFrame, clientID string) error {
	cn.writeMu.Lock()
	defer cn.writeMu.Unlock()
	data := protocol.Marshal(f)
	if clientID != "" {
		data = withField(data, protocol.FieldClientID, clientID)
	}
	data = withOrder(data, cn.order+1)
	if err := writeMessage(ctx, cn.ws, data); err != nil {
		// A failed write leaves the socket unusable: drop it so the reader ends and the
		// client reconnects (where numbering starts again at 1).
		cn.ws.CloseNow()
		return err
	}
	cn.order++
	cn.touch()
	return nil
}

// withOrder adds the top-level field "order": n to a JSON object.
func withOrder(obj []byte, n int64) []byte {
	if len(obj) < 2 || obj[len(obj)-1] != '}' {
		return obj
	}
	out := append([]byte(nil), obj[:len(obj)-1]...)
	if len(obj) > 2 {
		out = append(out, ',')
	}
	return fmt.Appendf(out, `"%s":%d}`, protocol.FieldOrder, n)
}

// writeMessage writes data as one text message in frames of at most MaxFrameBytes.
func writeMessage(ctx context.Context, ws *websocket.Conn, data []byte) error {
	if len(data) <= MaxFrameBytes {
		return ws.Write(ctx, websocket.MessageText, data)
	}
	w, err := ws.Writer(ctx, websocket.MessageText)
	if err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), MaxFrameBytes)
		if _, err := w.Write(data[:n]); err != nil { // one Write is one frame
			return err
		}
		data = data[n:]
	}
	return w.Close()
}

func (cn *conn) close() {
	cn.once.Do(func() { close(cn.quit) })
	cn.ws.CloseNow()
}

func (cn *conn) closeNormally() {
	cn.once.Do(func() { close(cn.quit) })
	cn.ws.Close(websocket.StatusNormalClosure, "")
}
