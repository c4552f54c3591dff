package client_test

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/client"
)

// wireFrame is one WebSocket frame as it crossed the wire from the client.
type wireFrame struct {
	fin     bool
	opcode  byte
	payload []byte
}

// rawServer accepts one WebSocket connection on a plain TCP listener, sends hello, and
// reports every frame the client writes — frames, not messages, which no WebSocket
// library shows.
func rawServer(t *testing.T) (url string, frames <-chan wireFrame) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan wireFrame, 1000)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		h := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		_, _ = io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
			"Sec-WebSocket-Accept: "+base64.StdEncoding.EncodeToString(h[:])+"\r\n\r\n")
		hello := []byte(`{"type":"hello","proto":1,"session_id":"a","last_seq":0}`)
		_, _ = nc.Write(append([]byte{0x81, byte(len(hello))}, hello...))
		for {
			var hdr [2]byte
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				return
			}
			n := uint64(hdr[1] & 0x7f)
			switch n {
			case 126:
				var b [2]byte
				if _, err := io.ReadFull(br, b[:]); err != nil {
					return
				}
				n = uint64(binary.BigEndian.Uint16(b[:]))
			case 127:
				var b [8]byte
				if _, err := io.ReadFull(br, b[:]); err != nil {
					return
				}
				n = binary.BigEndian.Uint64(b[:])
			}
			var mask [4]byte
			if _, err := io.ReadFull(br, mask[:]); err != nil {
				return
			}
			p := make([]byte, n)
			if _, err := io.ReadFull(br, p); err != nil {
				return
			}
			for i := range p {
				p[i] ^= mask[i%4]
			}
			ch <- wireFrame{fin: hdr[0]&0x80 != 0, opcode: hdr[0] & 0x0f, payload: p}
		}
	}()
	return "ws://" + ln.Addr().String() + "/agents/a/ws", ch
}

// messages reassembles n data messages from frames, skipping control frames, and
// returns them with the largest frame seen.
func messages(t *testing.T, frames <-chan wireFrame, n int) ([]string, int) {
	t.Helper()
	var out []string
	var cur []byte
	largest := 0
	for len(out) < n {
		select {
		case f := <-frames:
			if f.opcode >= 8 {
				continue
			}
			largest = max(largest, len(f.payload))
			cur = append(cur, f.payload...)
			if f.fin {
				out = append(out, string(cur))
				cur = nil
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d messages, want %d", len(out), n)
		}
	}
	return out, largest
}

// TestClientFrameOrderAndFragments: the client numbers its frames on a connection 1,
// 2, 3, … with the order field, and writes a message over 32 KB as continuation frames
// of at most client.MaxFrameBytes (API Gateway closes the socket on a larger frame).
func TestClientFrameOrderAndFragments(t *testing.T) {
	url, frames := rawServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, url, "tok", client.Options{PingInterval: -1})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	big := strings.Repeat("x", 100_000)
	for _, send := range []func() error{
		func() error { return c.Subscribe(ctx, 0) },
		func() error { return c.Inject(ctx, "small", false) },
		func() error { return c.Inject(ctx, big, true) },
		func() error { return c.Cancel(ctx, "") },
	} {
		if err := send(); err != nil {
			t.Fatal(err)
		}
	}
	msgs, largest := messages(t, frames, 4)
	for i, m := range msgs {
		var f struct {
			Type  string
			Order *int64
			Text  string
		}
		if err := json.Unmarshal([]byte(m), &f); err != nil {
			t.Fatalf("message %d is not JSON: %v", i, err)
		}
		if f.Order == nil || *f.Order != int64(i+1) {
			t.Errorf("message %d (%s) has order %v, want %d", i, f.Type, f.Order, i+1)
		}
		if i == 2 && f.Text != big {
			t.Errorf("the large inject arrived with %d bytes of text, want %d", len(f.Text), len(big))
		}
	}
	if largest > client.MaxFrameBytes {
		t.Errorf("largest frame %d bytes, want at most %d", largest, client.MaxFrameBytes)
	}
}
