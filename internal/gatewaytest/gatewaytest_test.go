package gatewaytest_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/gatewaytest"
)

// TestOpenReadsInOrder: Open sends the bearer token, Next hands out text messages in
// order, and a binary message ends the reading with ErrBinary, reported again at every
// later call; a refused handshake is Open's error, with the response.
func TestOpenReadsInOrder(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx := r.Context()
		for _, m := range []struct {
			typ websocket.MessageType
			b   string
		}{{websocket.MessageText, "one"}, {websocket.MessageText, "two"}, {websocket.MessageBinary, "bin"}} {
			if err := ws.Write(ctx, m.typ, []byte(m.b)); err != nil {
				return
			}
		}
		_, _, _ = ws.Read(ctx) // until the client goes
	}))
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if _, resp, err := gatewaytest.Open(ctx, url, "wrong", nil, 10); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("Open with a wrong token: %v, %v; want an error and a 401 response", resp, err)
	}
	c, _, err := gatewaytest.Open(ctx, url, "tok", nil, 10)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer c.Conn.CloseNow()
	for _, want := range []string{"one", "two"} {
		if b, err := c.Next(time.Minute); err != nil || string(b) != want {
			t.Fatalf("Next: %q, %v; want %q", b, err, want)
		}
	}
	for range 2 {
		if b, err := c.Next(time.Minute); !errors.Is(err, gatewaytest.ErrBinary) {
			t.Fatalf("Next after a binary message: %q, %v; want %v", b, err, gatewaytest.ErrBinary)
		}
	}
	if _, ok, err := c.Ready(); !ok || !errors.Is(err, gatewaytest.ErrBinary) {
		t.Fatalf("Ready after the end: ok %v, %v; want true, %v", ok, err, gatewaytest.ErrBinary)
	}
}
