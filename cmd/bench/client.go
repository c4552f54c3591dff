package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// frame is the part of a server frame the bench looks at; events have a seq.
type frame struct {
	Type   string `json:"type"`
	Seq    *int64 `json:"seq"`
	Code   string `json:"code"`
	At     time.Time
	Logged time.Time `json:"at"` // an event's append time (the envelope's at)
	Size   int
}

// wsClient is one protocol client. Its reader goroutine stamps every frame on arrival
// and hands it to the frames channel (or to onFrame, when set before the first frame).
type wsClient struct {
	agent  string
	c      *websocket.Conn
	msgs   atomic.Int64 // WebSocket messages received (a batch is one)
	frames chan frame
	done   chan struct{}
	err    error
}

func dialAgent(ctx context.Context, baseURL, agent, token string, onFrame func(frame)) (*wsClient, error) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, _, err := websocket.Dial(dctx, baseURL+"/agents/"+agent+"/ws", &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", agent, err)
	}
	c.SetReadLimit(1 << 20)
	cl := &wsClient{agent: agent, c: c, done: make(chan struct{})}
	if onFrame == nil {
		cl.frames = make(chan frame, 1<<16)
		onFrame = func(f frame) { cl.frames <- f }
	}
	go func() {
		defer close(cl.done)
		for {
			_, b, err := c.Read(context.Background())
			at := time.Now()
			if err != nil {
				cl.err = err
				return
			}
			cl.msgs.Add(1)
			// A batch (docs/protocol.md, "Extension: batched event frames") is events separated by "\n": each is a frame.
			for part := range bytes.SplitSeq(b, []byte{'\n'}) {
				var f frame
				if err := json.Unmarshal(part, &f); err != nil {
					cl.err = fmt.Errorf("frame %q: %w", part, err)
					return
				}
				f.At, f.Size = at, len(part)
				onFrame(f)
			}
		}
	}()
	return cl, nil
}

func (cl *wsClient) send(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return cl.c.Write(wctx, websocket.MessageText, b)
}

// next returns the next frame, or an error if none comes within d or the socket ends.
func (cl *wsClient) next(d time.Duration) (frame, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case f := <-cl.frames:
		return f, nil
	case <-cl.done:
		select {
		case f := <-cl.frames:
			return f, nil
		default:
		}
		return frame{}, fmt.Errorf("%s: socket ended: %v", cl.agent, cl.err)
	case <-t.C:
		return frame{}, fmt.Errorf("%s: no frame within %v", cl.agent, d)
	}
}

// until reads frames until one satisfies ok, and returns it.
func (cl *wsClient) until(d time.Duration, ok func(frame) bool) (frame, error) {
	deadline := time.Now().Add(d)
	for {
		f, err := cl.next(time.Until(deadline))
		if err != nil {
			return f, err
		}
		if f.Type == "error" {
			return f, fmt.Errorf("%s: error frame %s", cl.agent, f.Code)
		}
		if ok(f) {
			return f, nil
		}
	}
}

// seqAt reads until the event with seq arrives.
func (cl *wsClient) seqAt(d time.Duration, seq int64) (frame, error) {
	return cl.until(d, func(f frame) bool { return f.Seq != nil && *f.Seq >= seq })
}

func (cl *wsClient) close() { _ = cl.c.CloseNow() }

func subscribe(from int64) map[string]any {
	return map[string]any{"type": "subscribe", "from_seq": from}
}

// subscribeBatched is subscribe asking for batched event frames.
func subscribeBatched(from int64) map[string]any {
	return map[string]any{"type": "subscribe", "from_seq": from, "batch": true}
}
