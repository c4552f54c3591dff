package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/dynamotest"
)

// TestDevMetrics: `terret dev` serves the functions' metrics at /metrics in Prometheus
// text format; a refused and an accepted connection show up in their counters.
func TestDevMetrics(t *testing.T) {
	t.Parallel()
	p := startDev(t, "--dynamodb-endpoint", dynamotest.Endpoint(t), "--table-prefix", dynamotest.UniqueName("m")+"-")
	out, _, code := p.run(t, "token", "create", "--agent", "a1")
	if code != 0 {
		t.Fatalf("token create exit %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, tok := range []string{"tt_wrong", strings.TrimSpace(out)} {
		c, _, err := websocket.Dial(ctx, p.wsURL("a1"), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
		if err != nil {
			t.Fatal(err)
		}
		f := readFrame(t, c) // unauthorized, then hello: both after the connect was counted
		if !strings.Contains(f, `"unauthorized"`) && !strings.Contains(f, `"hello"`) {
			t.Fatalf("first frame %s", f)
		}
		c.CloseNow()
	}
	base := strings.Replace(strings.SplitN(p.ready.WSURL, "/agents/", 2)[0], "ws://", "http://", 1)
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s\n%s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	for _, want := range []string{
		`(?m)^# TYPE terret_refused_connections_total counter$`,
		`(?m)^terret_refused_connections_total 1$`,
		`(?m)^terret_connections_total 1$`,
	} {
		if !regexp.MustCompile(want).Match(body) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
}
