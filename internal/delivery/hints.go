package delivery

import (
	"sort"

	"github.com/terret/terret-ws/internal/sessionlog"
)

// take returns the run of hints that starts exactly at next, if any.
func take(hints []sessionlog.Event, next int64) ([]sessionlog.Event, bool) {
	for i, ev := range hints {
		if ev.Seq == next {
			return hints[i:], true
		}
		if ev.Seq > next {
			return nil, false
		}
	}
	return nil, false
}

// normalize sorts hints by seq, drops duplicates and keeps only the first contiguous run
// of the sorted list's tail that can be sent without a read.
func normalize(hints []sessionlog.Event) []sessionlog.Event {
	if len(hints) == 0 {
		return nil
	}
	out := append([]sessionlog.Event(nil), hints...)
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	k := 0
	for i := range out {
		if k > 0 && out[k-1].Seq == out[i].Seq {
			continue
		}
		out[k] = out[i]
		k++
	}
	out = out[:k]
	// Only a gapless run can be sent from hints; cut at the first gap.
	for i := 1; i < len(out); i++ {
		if out[i].Seq != out[i-1].Seq+1 {
			return out[:i]
		}
	}
	return out
}
