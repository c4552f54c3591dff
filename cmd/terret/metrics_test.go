package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
)

// TestDevMetrics: `terret dev` serves the functions' metrics at /metrics in Prometheus
// text format; a refused and an accepted connection show up in their counters, and the
// accepted one's replay, a turn streamed to it and its being superseded in the delivery
// series.
func TestDevMetrics(t *testing.T) {
	t.Parallel()
	p := startDev(t, "--dynamodb-endpoint", dynamotest.Endpoint(t), "--table-prefix", dynamotest.UniqueName("m")+"-")
	out, _, code := p.run(t, "token", "create", "--agent", "a1")
	if code != 0 {
		t.Fatalf("token create exit %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
	defer cancel()
	tok := strings.TrimSpace(out)
	dial := func() *websocket.Conn {
		c, _, err := websocket.Dial(ctx, p.wsURL("a1"), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CloseNow() })
		return c
	}
	// read allows a loaded machine more than readFrame does: a replay waits for a slot.
	read := func(c *websocket.Conn) string {
		t.Helper()
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return string(b)
	}
	send := func(c *websocket.Conn, frame string) {
		if err := c.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
			t.Fatal(err)
		}
	}
	tok = "tt_wrong"
	if f := read(dial()); !strings.Contains(f, `"unauthorized"`) {
		t.Fatalf("first frame %s, want unauthorized", f)
	}
	tok = strings.TrimSpace(out)
	c := dial()
	if f := read(c); !strings.Contains(f, `"hello"`) {
		t.Fatalf("first frame %s, want hello", f)
	}
	// A replay of session/created, then a turn of the scripted model, streamed live.
	send(c, `{"type":"subscribe","from_seq":0}`)
	if f := read(c); !strings.Contains(f, `"seq":0,`) {
		t.Fatalf("frame %s, want seq 0", f)
	}
	send(c, `{"type":"inject","text":"hi","wake":true}`)
	for f := ""; !strings.Contains(f, `"type":"turn/end"`); {
		f = read(c)
	}
	dial() // supersedes c, after the turn's last events (its title)
	for f := ""; !strings.Contains(f, `"superseded"`); {
		if f = read(c); !strings.Contains(f, `"seq":`) && !strings.Contains(f, `"superseded"`) {
			t.Fatalf("frame %s, want events, then superseded", f)
		}
	}
	base := strings.Replace(strings.SplitN(p.ready.WSURL, "/agents/", 2)[0], "ws://", "http://", 1)
	wants := []string{
		`(?m)^# TYPE terret_refused_connections_total counter$`,
		`(?m)^terret_refused_connections_total 1$`,
		`(?m)^terret_connections_total 2$`,
		`(?m)^terret_events_appended_total [1-9]`,
		`(?m)^terret_events_delivered_total\{path="replay"\} 1$`,
		`(?m)^terret_events_delivered_total\{path="(fast|stream)"\} [1-9]`,
		`(?m)^terret_delivery_lag_milliseconds_count [1-9]`,
		`(?m)^terret_replays_total 1$`,
		`(?m)^terret_replay_length_total 1$`,
		`(?m)^terret_superseded_total 1$`,
		`(?m)^terret_unauthorized_total 1$`,
	}
	// A sender reports its posts when it ends, just after its last one.
	var body []byte
	var missing []string
	hang.UntilNil(t, "every figure in /metrics", func() error {
		res, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("GET /metrics: %d %s\n%s", res.StatusCode, res.Header.Get("Content-Type"), body)
		}
		missing = nil
		for _, want := range wants {
			if !regexp.MustCompile(want).Match(body) {
				missing = append(missing, want)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("/metrics lacks %q:\n%s", missing, body)
		}
		return nil
	})
}
