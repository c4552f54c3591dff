package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// turnKind is one kind of turn driven through the real runtime with the scripted model.
type turnKind struct {
	Name string
	Text string // the waking inject
}

// turnKinds: a plain-text turn (the reply streamed as two chunks), the README's
// tool-call script, and a 40-event turn — a tool call then a 35-chunk answer whose
// chunks come 50 ms apart, as a provider's text arrives (the runtime flushes a chunk
// per 200 ms or 512 bytes; 50 ms already exceeds a fast-path send here, so every
// chunk is its own delivery, as it would be at 200 ms).
func turnKinds() []turnKind {
	long, _ := json.Marshal(map[string]any{"script": []any{
		map[string]any{"call": []any{map[string]any{"tool": "echo", "args": map[string]any{"text": "hi"}}}},
		map[string]any{"say": strings.Repeat("Streaming answer text of a typical length. ", 35), "chunks": 35, "delay_ms": 50},
	}})
	return []turnKind{
		{Name: "plain", Text: "Summarise the benchmark in one line."},
		{Name: "tool", Text: `{"script":[{"call":[{"tool":"echo","args":{"text":"hi"}}]},{"say":"done"}]}`},
		{Name: "40-event", Text: string(long)},
	}
}

type turnResult struct {
	Kind   string
	Turns  int
	Events int64 // events the client received
	Cost   phaseCost
	Wall   time.Duration // inject sent → turn/end received, summed
	// windows are the turns' measurement windows: Cost.Inv.Busy is recomputed from the
	// invocations started in them once every invocation has ended (busyStartedIn).
	windows [][2]time.Time
}

// runTurns drives turns through the whole service: a client sends inject{wake}, the
// message function hands it to the runtime, the runner runs the turn and appends its
// events, which reach the client by the fast path and the stream backstop. A first
// turn (which also titles the session) is not counted.
func (b *bench) runTurns(ctx context.Context) error {
	cl, err := b.subscribed(ctx, "turns")
	if err != nil {
		return err
	}
	defer cl.close()
	turn := func(text string) (events int64, wall time.Duration, err error) {
		t0 := time.Now()
		if err := cl.send(ctx, map[string]any{"type": "inject", "text": text, "wake": true}); err != nil {
			return 0, 0, err
		}
		for {
			f, err := cl.next(60 * time.Second)
			if err != nil {
				return events, 0, err
			}
			if f.Type == "error" {
				return events, 0, fmt.Errorf("turn: error frame %s", f.Code)
			}
			if f.Seq != nil {
				events++
			}
			if f.Type == "turn/end" {
				return events, f.At.Sub(t0), nil
			}
		}
	}
	drain := func() (n int64) {
		for {
			select {
			case f := <-cl.frames:
				if f.Seq != nil {
					n++
				}
			default:
				return n
			}
		}
	}
	if _, _, err := turn("Warm up and title the session."); err != nil {
		return fmt.Errorf("warm-up turn: %w", err)
	}
	b.st.settle(ctx)
	drain()
	for _, k := range turnKinds() {
		r := turnResult{Kind: k.Name}
		for i := 0; i < b.o.turns; i++ {
			before := b.st.snap()
			n, wall, err := turn(k.Text)
			if err != nil {
				return fmt.Errorf("%s turn: %w", k.Name, err)
			}
			b.st.settle(ctx)
			n += drain()
			after := b.st.snap()
			r.Cost = r.Cost.add(before.to(after))
			r.windows = append(r.windows, [2]time.Time{before.at, after.at})
			r.Turns++
			r.Events += n
			r.Wall += wall
		}
		b.res.turns = append(b.res.turns, r)
		b.progress("turns: %d %s turns, %.1f events each", r.Turns, k.Name, float64(r.Events)/float64(r.Turns))
	}
	// A deliver "watch" invocation sleeps out a busy sender's 30 s lease: wait for the
	// last ones, then charge each turn the whole duration of the invocations it started
	// (Lambda bills a sleeping watch like a working one).
	began := time.Now()
	b.st.settleAll(ctx, 40*time.Second)
	b.progress("turns: last invocations ended after %v", time.Since(began).Round(time.Millisecond))
	for i := range b.res.turns {
		t := &b.res.turns[i]
		t.Cost.Inv.Busy = map[string]time.Duration{}
		for _, w := range t.windows {
			for k, v := range b.st.inv.busyStartedIn(w[0], w[1]) {
				t.Cost.Inv.Busy[k] += v
			}
		}
	}
	return nil
}
