package localgw_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/localgw"
)

func postInput(id, data string) *apigatewaymanagementapi.PostToConnectionInput {
	return &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(id), Data: []byte(data)}
}

func assertGone(t *testing.T, err error) {
	t.Helper()
	var gone *types.GoneException
	if !errors.As(err, &gone) {
		t.Fatalf("error %v (%T), want *types.GoneException", err, err)
	}
}

// connected starts a gateway with a recorder, dials one client and returns the
// client, its connection id and the recorder.
func connected(t *testing.T, cfg localgw.Config) (*localgw.Gateway, *websocket.Conn, string, *recorder) {
	t.Helper()
	rec := newRecorder()
	cfg.Routes = rec.routes()
	g := startGateway(t, cfg, nil)
	c := dial(t, g, "a1", nil)
	id := rec.waitFor(t, localgw.RouteConnect, 1)[0].RequestContext.ConnectionID
	return g, c, id, rec
}

func TestPostToConnection(t *testing.T) {
	tests := []struct {
		name    string
		id      func(real string) string
		size    int
		wantErr func(*testing.T, error)
	}{
		{name: "small frame delivered", id: same, size: 40},
		{name: "exactly 128 KiB delivered", id: same, size: localgw.MaxPostBytes},
		{name: "128 KiB + 1 is PayloadTooLarge", id: same, size: localgw.MaxPostBytes + 1, wantErr: func(t *testing.T, err error) {
			var tooLarge *types.PayloadTooLargeException
			if !errors.As(err, &tooLarge) {
				t.Fatalf("error %v (%T), want *types.PayloadTooLargeException", err, err)
			}
		}},
		{name: "unknown connection is Gone", id: func(string) string { return "AAAAAAAAAAAAAAA=" }, size: 10, wantErr: assertGone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, c, id, _ := connected(t, localgw.Config{})
			c.SetReadLimit(1 << 20)
			data := strings.Repeat("x", tt.size)
			_, err := managementClient(g).PostToConnection(ctxT(t), postInput(tt.id(id), data))
			if tt.wantErr != nil {
				tt.wantErr(t, err)
				return
			}
			if err != nil {
				t.Fatalf("PostToConnection: %v", err)
			}
			if got := readText(t, c); got != data {
				t.Fatalf("client got %d bytes, want the %d posted", len(got), len(data))
			}
		})
	}
}

func same(id string) string { return id }

func TestPostWithoutStagePrefix(t *testing.T) {
	g, c, id, _ := connected(t, localgw.Config{})
	u := g.LambdaEndpoint() + "/@connections/" + url.PathEscape(id)
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"type":"hello"}`))
	if st := httpStatus(t, req); st != http.StatusOK {
		t.Fatalf("POST %s answered %d", u, st)
	}
	if got := readText(t, c); got != `{"type":"hello"}` {
		t.Fatalf("client got %q", got)
	}
}

func TestConcurrentPostsArriveWhole(t *testing.T) {
	g, c, id, _ := connected(t, localgw.Config{})
	client := managementClient(g)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			frame := fmt.Sprintf("%02d:%s", i, strings.Repeat(string(rune('a'+i)), 4096))
			if _, err := client.PostToConnection(context.Background(), postInput(id, frame)); err != nil {
				errs <- err
			}
		})
	}
	seen := map[string]bool{}
	for range n {
		f := readText(t, c)
		want := fmt.Sprintf("%s:%s", f[:2], strings.Repeat(string(rune('a'+atoi(f[:2]))), 4096))
		if f != want {
			t.Fatalf("frame %.10q... is interleaved or corrupt", f)
		}
		seen[f[:2]] = true
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("PostToConnection: %v", err)
	}
	if len(seen) != n {
		t.Fatalf("got %d distinct frames, want %d", len(seen), n)
	}
}

func atoi(s string) int {
	var n int
	fmt.Sscanf(s, "%d", &n)
	return n
}

func TestGetConnection(t *testing.T) {
	before := time.Now().Add(-time.Second)
	g, _, id, _ := connected(t, localgw.Config{})
	out, err := managementClient(g).GetConnection(ctxT(t), &apigatewaymanagementapi.GetConnectionInput{ConnectionId: aws.String(id)})
	if err != nil {
		t.Fatalf("GetConnection: %v", err)
	}
	if out.ConnectedAt == nil || out.ConnectedAt.Before(before) || out.ConnectedAt.After(time.Now()) {
		t.Errorf("ConnectedAt %v, want about now", out.ConnectedAt)
	}
	if out.LastActiveAt == nil || out.LastActiveAt.Before(*out.ConnectedAt) {
		t.Errorf("LastActiveAt %v, want at or after ConnectedAt", out.LastActiveAt)
	}
	if out.Identity == nil || aws.ToString(out.Identity.SourceIp) != "127.0.0.1" || aws.ToString(out.Identity.UserAgent) == "" {
		t.Errorf("Identity %+v, want source 127.0.0.1 and a user agent", out.Identity)
	}
	_, err = managementClient(g).GetConnection(ctxT(t), &apigatewaymanagementapi.GetConnectionInput{ConnectionId: aws.String("nope")})
	assertGone(t, err)
}

func TestDeleteConnection(t *testing.T) {
	g, c, id, rec := connected(t, localgw.Config{})
	client := managementClient(g)
	if _, err := client.PostToConnection(ctxT(t), postInput(id, "last words")); err != nil {
		t.Fatalf("PostToConnection: %v", err)
	}
	if _, err := client.DeleteConnection(ctxT(t), &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(id)}); err != nil {
		t.Fatalf("DeleteConnection: %v", err)
	}
	// The frame posted before the delete arrives before the close.
	if got := readText(t, c); got != "last words" {
		t.Fatalf("client got %q before close", got)
	}
	if st := readClose(t, c); st != websocket.StatusNormalClosure {
		t.Fatalf("close status %v, want 1000", st)
	}
	ev := rec.waitFor(t, localgw.RouteDisconnect, 1)[0]
	if ev.RequestContext.ConnectionID != id || ev.RequestContext.DisconnectStatusCode != 1000 {
		t.Fatalf("disconnect %+v, want connection %s with status 1000", ev.RequestContext, id)
	}
	_, err := client.PostToConnection(ctxT(t), postInput(id, "after"))
	assertGone(t, err)
	_, err = client.DeleteConnection(ctxT(t), &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(id)})
	assertGone(t, err)
	if err := g.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := len(rec.get(localgw.RouteDisconnect)); n != 1 {
		t.Fatalf("$disconnect invoked %d times, want exactly 1", n)
	}
}

func TestPostTimesOutOnStalledClient(t *testing.T) {
	g, _, id, rec := connected(t, localgw.Config{WriteTimeout: 100 * time.Millisecond, StallTimeout: 100 * time.Millisecond})
	// The client never reads: once the socket buffers are full a write stalls, the
	// socket is closed after StallTimeout, and the posts fail with Gone.
	client := managementClient(g)
	frame := bytes.Repeat([]byte("y"), localgw.MaxPostBytes)
	var err error
	start := time.Now()
	for i := 0; i < 400 && err == nil; i++ {
		_, err = client.PostToConnection(ctxT(t), &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(id), Data: frame})
	}
	assertGone(t, err)
	if time.Since(start) > waitTimeout {
		t.Fatalf("stalled writes took %v", time.Since(start))
	}
	ev := rec.waitFor(t, localgw.RouteDisconnect, 1)[0]
	if ev.RequestContext.ConnectionID != id {
		t.Fatalf("disconnect for %s, want %s", ev.RequestContext.ConnectionID, id)
	}
}
