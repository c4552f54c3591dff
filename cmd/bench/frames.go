package main

import (
	"context"
	"fmt"
	"time"
)

// frameResult is what one kind of client frame costs the service, sent plain (v1) or
// numbered with the order field (docs/protocol.md, "Ordering").
type frameResult struct {
	Kind    string // set_policy, steer
	Ordered bool
	Frames  int
	Cost    phaseCost
}

// frameKinds are the frames measured: a set_policy (a conditional log append and a
// state write) and a steer (inject without wake: an inbox write, no turn).
var frameKinds = []struct {
	name  string
	frame func(i int) map[string]any
}{
	{"set_policy", func(i int) map[string]any {
		return map[string]any{"type": "set_policy", "patterns": []string{fmt.Sprintf("tool-%d", i)}}
	}},
	{"steer", func(i int) map[string]any {
		return map[string]any{"type": "inject", "text": fmt.Sprintf("steer %d", i), "wake": false}
	}},
}

// runFrames sends -frames frames of each kind on one connection of an agent of its
// own, once plain and once numbered, one at a time (the stack quiet again before the
// next, as frames a person sends are), and measures what they cost: request units,
// invocations and posts per client frame. The connection is not subscribed, so
// delivery costs only its check that nobody listens; connecting is outside the window.
//
// Frames sent back to back cost more, and not because of the order field: concurrent
// appends to one log retry on its seq (sessionlog), and a numbered burst whose handling
// outlasts socket.OrderWait is served without the order guarantee.
func (b *bench) runFrames(ctx context.Context) error {
	for _, k := range frameKinds {
		for _, ordered := range []bool{false, true} {
			agent := "frames-" + k.name
			if ordered {
				agent += "-ordered"
			}
			cl, err := b.connect(ctx, agent, nil)
			if err != nil {
				return err
			}
			b.st.settle(ctx)
			before := b.st.snap()
			for i := range b.o.frames {
				f := k.frame(i)
				if ordered {
					f["order"] = i + 1
				}
				if err := cl.send(ctx, f); err != nil {
					cl.close()
					return err
				}
				b.st.settle(ctx)
			}
			b.st.settleAll(ctx, 10*time.Second)
			cost := before.to(b.st.snap())
			select {
			case f := <-cl.frames:
				cl.close()
				return fmt.Errorf("%s: unexpected %s %s", agent, f.Type, f.Code)
			default:
			}
			cl.close()
			b.res.frames = append(b.res.frames, frameResult{Kind: k.name, Ordered: ordered, Frames: b.o.frames, Cost: cost})
		}
	}
	return nil
}
