package delivery_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// seedMixed appends to session: small events, two of 20 KB side by side (they never
// share a batch), one of 40 KB (always alone) and more small ones. It returns the log.
func seedMixed(t *testing.T, r *rig, session string) []sessionlog.Event {
	t.Helper()
	ctx := context.Background()
	if _, err := r.log.Create(ctx, session); err != nil {
		t.Fatal(err)
	}
	add := func(pad int) {
		if _, err := r.log.Append(ctx, session, "test/event", map[string]any{"pad": strings.Repeat("p", pad), "nl": "a\nb"}); err != nil {
			t.Fatal(err)
		}
	}
	for range 40 {
		add(10)
	}
	add(20 << 10)
	add(20 << 10)
	add(40 << 10)
	for range 40 {
		add(10)
	}
	return readAll(t, r.log, session)
}

// readMessages reads c's messages until they hold every event of log (after hello).
func readMessages(t *testing.T, c *wsClient, log []sessionlog.Event) []string {
	t.Helper()
	var msgs []string
	got := 0
	for got < len(log) {
		f, err := c.next(patience)
		if err != nil {
			t.Fatalf("after %d events: %v", got, err)
		}
		msgs = append(msgs, f.raw)
		got += strings.Count(f.raw, "\n") + 1
	}
	return msgs
}

// TestBatchFrames: a client that does not ask for batches gets one message per event,
// each byte for byte the envelope as encoded for v1; a client that asks gets the same
// bytes, packed: "\n" between envelopes, never more than CheckpointEvery events or
// BatchBytes per message, an event over BatchBytes alone.
func TestBatchFrames(t *testing.T) {
	t.Parallel()
	const every = 64 // a batch holds at most every/2 events
	r := startRig(t, rigConfig{cfg: delivery.Config{CheckpointEvery: every}})
	for _, batch := range []bool{false, true} {
		agent := fmt.Sprintf("frames-%v", batch)
		log := seedMixed(t, r, agent)
		want := make([]string, len(log))
		for i, ev := range log {
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			want[i] = string(b)
		}
		c := r.dial(t, agent, r.token(t, agent))
		c.hello(t)
		c.send(t, fmt.Sprintf(`{"type":"subscribe","from_seq":0,"batch":%v}`, batch))
		msgs := readMessages(t, c, log)
		if !batch {
			if len(msgs) != len(want) {
				t.Fatalf("v1: %d messages for %d events", len(msgs), len(want))
			}
			for i := range msgs {
				if msgs[i] != want[i] {
					t.Fatalf("v1 message %d:\ngot  %.300s\nwant %.300s", i, msgs[i], want[i])
				}
			}
			continue
		}
		if joined := strings.Join(msgs, "\n"); joined != strings.Join(want, "\n") {
			t.Fatalf("batched messages do not join to the log's envelopes")
		}
		for i, m := range msgs {
			n := strings.Count(m, "\n") + 1
			switch {
			case n > every/2:
				t.Errorf("message %d holds %d events, more than CheckpointEvery/2 = %d", i, n, every/2)
			case n > 1 && len(m) > delivery.BatchBytes:
				t.Errorf("message %d: %d events in %d bytes, more than %d", i, n, len(m), delivery.BatchBytes)
			case len(m) > delivery.MaxBatchBytes:
				t.Errorf("message %d is %d bytes", i, len(m))
			}
			if bytes.Contains([]byte(m), []byte(strings.Repeat("p", 40<<10))) && n != 1 {
				t.Errorf("the 40 KB event shares message %d with %d others", i, n-1)
			}
		}
		// 84 events: 41 small ones (with session/created) before the large, 40 after.
		if len(msgs) > 9 {
			t.Errorf("%d messages for %d events, want at most 9: %v", len(msgs), len(log), sizes(msgs))
		}
		t.Logf("batched: %d events in %d messages %v", len(log), len(msgs), sizes(msgs))
	}
}

func sizes(msgs []string) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = fmt.Sprintf("%d/%dB", strings.Count(m, "\n")+1, len(m))
	}
	return out
}
