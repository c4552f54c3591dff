package agent_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/metrics"
)

// lockedBuffer is the EMF stdout of a test: runner goroutines write to it at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// emfPoint is one EMF line, read as CloudWatch reads it.
type emfPoint struct {
	name, unit string
	value      float64
	dims       string // "k=v,k=v" in the order of the line's dimension set, sorted by name
}

func parseEMF(t *testing.T, out string) []emfPoint {
	t.Helper()
	var pts []emfPoint
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		l, err := metrics.Parse(line)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Values) != 1 {
			t.Fatalf("EMF line %s: %d values, want one", line, len(l.Values))
		}
		pts = append(pts, emfPoint{name: l.Name, unit: string(l.Unit), value: l.Values[0], dims: l.Dims})
	}
	return pts
}

// TestRuntimeMetrics: a turn that calls tools (one with bad arguments) and outlives its
// first invocation emits, as EMF lines on the default recorder, the turn by status,
// each model call's latency and tokens by provider and model, tool calls and errors
// by tool, and the runner's handover. Not parallel: it owns the process's default
// recorder while it runs.
func TestRuntimeMetrics(t *testing.T) {
	out := &lockedBuffer{}
	prev := metrics.Default()
	metrics.SetDefault(metrics.New(out, "", metrics.Dim{Name: "function", Value: "runner"}))
	t.Cleanup(func() { metrics.SetDefault(prev) })

	// As TestDeadlineHandover: 6 s invocations that hand over with under 3 s left.
	e := newEnv(t, opts{timeout: 6 * time.Second, margin: 5900 * time.Millisecond})
	sleep := `{"call":[{"tool":"sleep","args":{"ms":1000}}]}`
	e.inject(script(`{"call":[{"tool":"echo","args":{"text":"hi"}}]}`, `{"call":[{"tool":"sleep","args":{"ms":"soon"}}]}`,
		sleep, sleep, sleep, `{"say":"done"}`), true)
	e.waitTurnEnds(1)
	e.settle()
	e.noErrors()

	type agg struct {
		unit       string
		count, sum float64
	}
	got := map[string]agg{}
	for _, p := range parseEMF(t, out.String()) {
		k := p.name + "{" + p.dims + "}"
		a := got[k]
		if a.unit != "" && a.unit != p.unit {
			t.Errorf("%s in %s and %s", k, a.unit, p.unit)
		}
		a.unit, a.count, a.sum = p.unit, a.count+1, a.sum+p.value
		got[k] = a
	}
	model := "{function=runner,model=scripted,provider=scripted}"
	want := []struct {
		key, unit string
		count     float64
		sum       float64 // -1: any positive
	}{
		{"Turns{function=runner,status=" + agent.StatusCompleted + "}", "Count", 1, 1},
		{"ModelLatency" + model, "Milliseconds", 6, -2},
		{"ModelInputTokens" + model, "Count", 6, -1},
		{"ModelOutputTokens" + model, "Count", 6, -1},
		{"ToolCalls{function=runner,tool=echo}", "Count", 1, 1},
		{"ToolCalls{function=runner,tool=sleep}", "Count", 4, 4},
		{"ToolErrors{function=runner,tool=sleep}", "Count", 1, 1},
	}
	for _, w := range want {
		a, ok := got[w.key]
		switch {
		case !ok:
			t.Errorf("no %s point; got %v", w.key, got)
		case a.unit != w.unit || a.count != w.count:
			t.Errorf("%s: %v points in %s; want %v in %s", w.key, a.count, a.unit, w.count, w.unit)
		case w.sum == -1 && a.sum <= 0, w.sum == -2 && a.sum < 0, w.sum >= 0 && a.sum != w.sum:
			t.Errorf("%s: sum %v; want %v", w.key, a.sum, w.sum)
		}
	}
	if a := got["RunnerHandovers{function=runner}"]; a.unit != "Count" || a.count < 1 || int64(a.count) != e.inv.calls.Load()-1 {
		t.Errorf("RunnerHandovers %+v; want one per invocation after the first (%d invocations)", a, e.inv.calls.Load())
	}
	for k := range got {
		if strings.Contains(k, "ToolErrors{function=runner,tool=echo}") || strings.HasPrefix(k, "ModelErrors") {
			t.Errorf("unexpected series %s", k)
		}
	}
}
