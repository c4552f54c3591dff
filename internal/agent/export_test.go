package agent

import (
	"context"
	"fmt"
	"reflect"
)

// CheckFold compares the model context a runner builds for agentID from its checkpoint
// (the fold items below it, the events from it on) with the projection of every event
// of the log from seq 0: the summary, the messages (history) and the budget estimate
// (contextView.tokens) must be equal. It reports how many folded events the runner's
// context holds.
func CheckFold(ctx context.Context, cfg Config, agentID string) (folded int, err error) {
	c, err := newCore(cfg)
	if err != nil {
		return 0, err
	}
	st, err := c.store.getState(ctx, agentID)
	if err != nil {
		return 0, err
	}
	w := &logWindow{log: c.log, agentID: agentID, last: -1, logged: map[string]int64{}}
	if err := w.begin(ctx, c.store, st); err != nil {
		return 0, err
	}
	if err := w.refresh(ctx); err != nil {
		return 0, err
	}
	all := newWindow(c.log, agentID, 0)
	if err := all.refresh(ctx); err != nil {
		return 0, err
	}
	got, want := w.view(), all.view()
	seqOf := func(cp *compaction) int64 {
		if cp == nil {
			return -1
		}
		return cp.seq
	}
	if got.summary != want.summary || got.through != want.through {
		return 0, fmt.Errorf("summary through %d %q, want through %d %q", got.through, got.summary, want.through, want.summary)
	}
	if g, wt := history(got.evs), history(want.evs); !reflect.DeepEqual(g, wt) {
		return 0, fmt.Errorf("history from the fold:\n%+v\nfrom the events:\n%+v", g, wt)
	}
	if g, wt := got.tokens(0, seqOf(w.compacted)), want.tokens(0, seqOf(all.compacted)); g != wt {
		return 0, fmt.Errorf("budget estimate from the fold %d, from the events %d", g, wt)
	}
	return len(w.hist), nil
}
