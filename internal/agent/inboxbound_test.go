package agent_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/agent"
)

// TestInboxBound: the injects waiting in an agent's inbox are bounded in number
// (MaxInline on the state item, MaxInboxItems as items of their own) and in bytes
// (MaxInboxBytes). An inject past the bound gets an *InboxFullError and is not queued;
// a waking one still gets in; once a turn drains the inbox, injects are queued again, and the turn carried every
// one that was accepted, each once.
func TestInboxBound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		sizes  []int // the steers accepted before the refused one, after MaxInline short ones
		refuse int   // the size of the refused one
	}{
		{"count", repeat(300, agent.MaxInboxItems), 300},
		{"bytes", repeat(agent.MaxTextBytes-64, agent.MaxInboxBytes/agent.MaxTextBytes), 2000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, opts{})
			var accepted []string
			for i := range agent.MaxInline {
				accepted = append(accepted, fmt.Sprintf("short %d", i))
			}
			for i, size := range tc.sizes {
				accepted = append(accepted, text(fmt.Sprintf("steer %d ", i), size))
			}
			for _, s := range accepted {
				e.inject(s, false)
			}
			err := e.svc.Inject(e.ctx, e.agentID, text("one too many ", tc.refuse), false)
			var full *agent.InboxFullError
			if !errors.As(err, &full) || !errors.Is(err, agent.ErrInboxFull) {
				t.Fatalf("inject past the bound: %v; want an *InboxFullError", err)
			}
			if full.Items != int64(len(tc.sizes)) {
				t.Fatalf("refusal counts %d waiting items, want %d", full.Items, len(tc.sizes))
			}
			// A wake still gets in (WakeReserve), and drains them all.
			e.inject("go", true)
			evs := e.waitTurnEnds(1)
			e.settle()
			e.noErrors()
			var got []string
			for _, ev := range ofType(evs, agent.TypeContextInjected) {
				got = append(got, str(ev, "text"))
			}
			if len(got) != len(accepted) {
				t.Fatalf("the turn carried %d steers, want the %d accepted", len(got), len(accepted))
			}
			for _, s := range got {
				if strings.HasPrefix(s, "one too many") {
					t.Fatalf("the refused inject was queued")
				}
			}
			// Drained, the inbox takes injects again, as many as before.
			for i := range tc.sizes {
				if err := e.svc.Inject(e.ctx, e.agentID, text(fmt.Sprintf("again %d ", i), tc.sizes[i]), false); err != nil {
					t.Fatalf("inject %d after the drain: %v", i, err)
				}
			}
		})
	}
}

func repeat(v, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// text is prefix padded with "x" to size bytes.
func text(prefix string, size int) string {
	return prefix + strings.Repeat("x", max(0, size-len(prefix)))
}
