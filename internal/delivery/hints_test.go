package delivery

import (
	"slices"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// hinted returns events with the given seqs, in that order.
func hinted(seqs ...int64) []sessionlog.Event {
	out := make([]sessionlog.Event, 0, len(seqs))
	for _, s := range seqs {
		out = append(out, sessionlog.Event{Seq: s})
	}
	return out
}

func seqsOf(evs []sessionlog.Event) []int64 {
	out := []int64{}
	for _, ev := range evs {
		out = append(out, ev.Seq)
	}
	return out
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   []int64
		want []int64
	}{
		{"none", nil, []int64{}},
		{"one", []int64{7}, []int64{7}},
		{"sorted run", []int64{3, 4, 5}, []int64{3, 4, 5}},
		{"reordered", []int64{5, 3, 4}, []int64{3, 4, 5}},
		{"duplicates", []int64{3, 4, 3, 4, 5, 5}, []int64{3, 4, 5}},
		{"cut at the first gap", []int64{3, 4, 6, 7}, []int64{3, 4}},
		{"gap after reordering", []int64{9, 2, 3, 8}, []int64{2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := hinted(tc.in...)
			got := seqsOf(normalize(in))
			if !slices.Equal(got, tc.want) {
				t.Errorf("normalize(%v) = %v, want %v", tc.in, got, tc.want)
			}
			if !slices.Equal(seqsOf(in), seqsOf(hinted(tc.in...))) {
				t.Errorf("normalize(%v) changed its argument to %v", tc.in, seqsOf(in))
			}
		})
	}
}

func TestTake(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		hints  []int64
		next   int64
		want   []int64
		wantOK bool
	}{
		{"no hints", nil, 3, []int64{}, false},
		{"starts at next", []int64{3, 4, 5}, 3, []int64{3, 4, 5}, true},
		{"next inside", []int64{3, 4, 5}, 4, []int64{4, 5}, true},
		{"all sent", []int64{3, 4, 5}, 6, []int64{}, false},
		{"gap before the hints", []int64{5, 6}, 3, []int64{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := take(hinted(tc.hints...), tc.next)
			if ok != tc.wantOK || !slices.Equal(seqsOf(got), tc.want) {
				t.Errorf("take(%v, %d) = %v, %v; want %v, %v", tc.hints, tc.next, seqsOf(got), ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestCovered(t *testing.T) {
	t.Parallel()
	now := time.Now()
	live, expired := now.Add(time.Second), now.Add(-time.Second)
	for _, tc := range []struct {
		name string
		o    connections.Owner
		want bool
	}{
		{"nothing owed", connections.Owner{HelloSent: true, Pending: true, Lease: "x1", LeaseKind: connections.HolderOnce, LeaseUntil: live}, true},
		{"no mark, no lease", connections.Owner{HelloSent: true, Sub: 1}, true},
		{"hello owed, no mark, no lease", connections.Owner{}, true},
		{"mark, no lease", connections.Owner{HelloSent: true, Sub: 1, Pending: true}, false},
		{"live retried holder with a mark", connections.Owner{HelloSent: true, Sub: 1, Pending: true, Lease: "r1", LeaseKind: connections.HolderRetried, LeaseUntil: live}, true},
		{"live retried holder", connections.Owner{HelloSent: true, Sub: 1, Lease: "r1", LeaseKind: connections.HolderRetried, LeaseUntil: live}, true},
		{"expired retried holder", connections.Owner{HelloSent: true, Sub: 1, Pending: true, Lease: "r1", LeaseKind: connections.HolderRetried, LeaseUntil: expired}, false},
		{"live once holder with a mark", connections.Owner{HelloSent: true, Sub: 1, Pending: true, Lease: "x1", LeaseKind: connections.HolderOnce, LeaseUntil: live}, false},
		{"live once holder", connections.Owner{HelloSent: true, Sub: 1, Lease: "x1", LeaseKind: connections.HolderOnce, LeaseUntil: live}, false},
		{"lease ending now", connections.Owner{HelloSent: true, Sub: 1, Lease: "r1", LeaseKind: connections.HolderRetried, LeaseUntil: now}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := covered(tc.o, now); got != tc.want {
				t.Errorf("covered(%+v) = %v, want %v", tc.o, got, tc.want)
			}
		})
	}
}
