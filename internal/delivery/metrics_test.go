package delivery_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/metrics"
	"github.com/terret/terret-ws/internal/service"
)

// emfOut is a function's stdout in a test: senders write to it at once.
type emfOut struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *emfOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

// series is one metric's points with one dimension set, as CloudWatch reads the EMF
// lines: every value of a value array is a point.
type series struct {
	unit   string
	points []float64
}

// readEMF aggregates the EMF lines written so far by "Name{dim=value,…}", dimensions
// in the order of the line's dimension set.
func (o *emfOut) readEMF(t *testing.T) map[string]*series {
	t.Helper()
	o.mu.Lock()
	out := o.b.String()
	o.mu.Unlock()
	got := map[string]*series{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		l, err := metrics.Parse(line)
		if err != nil {
			t.Fatal(err)
		}
		k := l.Name + "{" + l.Dims + "}"
		s := got[k]
		if s == nil {
			s = &series{unit: string(l.Unit)}
			got[k] = s
		} else if s.unit != string(l.Unit) {
			t.Errorf("%s in %s and %s", k, s.unit, l.Unit)
		}
		s.points = append(s.points, l.Values...)
	}
	return got
}

// total is the sum of s's points; 0 for none.
func total(s *series) float64 {
	sum := 0.0
	if s != nil {
		for _, v := range s.points {
			sum += v
		}
	}
	return sum
}

// TestDeliveryMetrics: the delivery core, observed as the functions observe it
// (service.DeliveryMetrics), writes EMF lines for what it posts and drops, with exact
// names, units and dimensions: events by path (fast path, stream consumer, replay),
// the append→post lag of each live event (by function only: the alarms read it so),
// replays, their length and a truncated one, and the connections dropped with lagged,
// superseded and unauthorized. One agent goes through it all, to spare connects.
func TestDeliveryMetrics(t *testing.T) {
	t.Parallel()
	out := &emfOut{}
	rec := metrics.New(out, "", metrics.Dim{Name: "function", Value: "deliver"})
	r := startRig(t, rigConfig{cfg: delivery.Config{
		ReplayLimit: 5, OutboundQueue: 8, Observer: service.DeliveryMetrics(rec, nil),
	}})
	ctx := context.Background()
	const agent = "a"
	next := func(c *wsClient, what string, seqs ...int64) {
		t.Helper()
		for _, want := range seqs {
			f, err := c.next(patience)
			if err != nil || f.Seq == nil || *f.Seq != want {
				t.Fatalf("%s: frame %s (%v), want seq %d", what, f.raw, err, want)
			}
		}
	}
	errorFrame := func(c *wsClient, code string) {
		t.Helper()
		if f, err := c.next(patience); err != nil || f.Type != "error" || f.Code != code {
			t.Fatalf("frame %s (%v), want error %s", f.raw, err, code)
		}
	}
	// caughtUp waits until the connection's cursor is past upTo and no sender holds
	// it: a hand-over still on its way then finds nothing owed.
	caughtUp := func(upTo int64) {
		t.Helper()
		hang.UntilNil(t, fmt.Sprintf("the cursor past %d with the lease let go", upTo), func() error {
			o, err := r.conns.Owner(ctx, agent)
			if err != nil {
				t.Fatal(err)
			}
			if o.Next > upTo && o.Lease == "" && !o.Pending {
				return nil
			}
			return fmt.Errorf("owner %+v", o)
		})
	}
	appendLog := func(n int) {
		t.Helper()
		for i := range n {
			if _, err := r.log.Append(ctx, agent, "test/event", map[string]int{"i": i}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// A second connection supersedes the first; a wrong token is refused.
	tok := r.token(t, agent)
	first := r.dial(t, agent, tok)
	first.hello(t)
	c := r.dial(t, agent, tok)
	c.hello(t)
	errorFrame(first, "superseded")
	errorFrame(r.dial(t, "refused", "tt_wrong"), "unauthorized")

	// A replay of session/created; then the fast path: three events the appender
	// hands over.
	c.send(t, `{"type":"subscribe","from_seq":0}`)
	next(c, "replay", 0)
	caughtUp(0)
	// A subscribe past its budget hands its sender over to a deliver invocation: once
	// none is left, the fast path's sender is the one to post the next event.
	r.kicks.settled(t)
	caughtUp(0)
	r.appendN(t, r.log, agent, 3, "f")
	next(c, "fast path", 1, 2, 3)
	r.fast.FlushAll()

	// The stream consumer's wake-up (Pump, no linger): two events.
	appendLog(2)
	if err := r.d.Pump(ctx, agent, nil); err != nil {
		t.Fatal(err)
	}
	next(c, "stream", 4, 5)

	// A resubscribe from 0 under a replay limit of 5: replay_truncated, then seqs 1–5.
	c.send(t, `{"type":"subscribe","from_seq":0}`)
	if f, err := c.next(patience); err != nil || f.Type != "replay_truncated" || f.From != 1 {
		t.Fatalf("frame %s (%v), want replay_truncated from 1", f.raw, err)
	}
	next(c, "truncated replay", 1, 2, 3, 4, 5)
	caughtUp(5)

	// A live tail 12 events behind, over an outbound queue of 8: lagged.
	appendLog(12)
	if err := r.d.Pump(ctx, agent, nil); err != nil {
		t.Fatal(err)
	}
	errorFrame(c, "lagged")

	want := []struct {
		key, unit string
		sum       float64
	}{
		{"EventsDelivered{Path=replay,function=deliver}", "Count", 6},
		{"Replays{function=deliver}", "Count", 2},
		{"ReplayLength{function=deliver}", "Count", 1 + 5},
		{"ReplayTruncated{function=deliver}", "Count", 1},
		{"Lagged{function=deliver}", "Count", 1},
		{"Superseded{function=deliver}", "Count", 1},
		{"Unauthorized{function=deliver}", "Count", 1},
	}
	// A sender reports when it ends, which may be just after its last post.
	var got map[string]*series
	var wrong []string
	hang.UntilNil(t, "the metrics of every post", func() error {
		got, wrong = out.readEMF(t), nil
		for _, w := range want {
			s := got[w.key]
			if s == nil || s.unit != w.unit || total(s) != w.sum {
				wrong = append(wrong, fmt.Sprintf("%s = %+v, want a sum of %v in %s", w.key, s, w.sum, w.unit))
			}
		}
		// The fast path posts the first of its events at least; on a loaded machine its
		// sender may run out of its budget and hand the rest to an asynchronous deliver
		// invocation, which posts them as stream. The stream's two are never fast.
		fast, stream := got["EventsDelivered{Path=fast,function=deliver}"], got["EventsDelivered{Path=stream,function=deliver}"]
		if fast == nil || stream == nil || fast.unit != "Count" || stream.unit != "Count" ||
			total(fast) < 1 || total(stream) < 2 || total(fast)+total(stream) != 5 {
			wrong = append(wrong, fmt.Sprintf("EventsDelivered fast %+v, stream %+v: want Counts, at least 1 fast and 2 stream, 5 in all", fast, stream))
		}
		if len(wrong) > 0 {
			return errors.New(strings.Join(wrong, "; "))
		}
		return nil
	})
	// One lag per live event posted (fast 3, stream 2; none for replayed events, nor
	// for the lagged tail, dropped before any post), by function alone.
	lag := got["DeliveryLag{function=deliver}"]
	if lag == nil || lag.unit != "Milliseconds" || len(lag.points) != 5 {
		t.Fatalf("DeliveryLag{function=deliver} = %+v, want 5 points in Milliseconds", lag)
	}
	for _, v := range lag.points {
		if v < 0 || v > float64(patience.Milliseconds()) {
			t.Errorf("DeliveryLag point %v ms, want between 0 and %v", v, patience.Milliseconds())
		}
	}
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.HasPrefix(k, "DeliveryLag{") && k != "DeliveryLag{function=deliver}" || strings.HasPrefix(k, "Lagged{") && k != "Lagged{function=deliver}" {
			t.Errorf("series %s: DeliveryLag and Lagged carry the function dimension alone", k)
		}
	}
	t.Logf("series: %v", keys)
}
