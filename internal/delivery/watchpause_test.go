package delivery

import (
	"testing"
	"time"
)

// TestWatchPause pins the pacing of a waiting post's looks at the tip (lagged.go): the
// next look comes once half the room under the bound would be used at the rate of the
// appends seen, between watchMin and watchEvery.
func TestWatchPause(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, c := range []struct {
		name          string
		n             int64
		since         time.Duration
		behind, queue int64
		want          time.Duration
	}{
		{"no new events", 0, 100 * ms, 3, 16, watchEvery},
		{"at the bound", 5, 100 * ms, 16, 16, watchEvery},
		{"slow appends", 1, 100 * ms, 2, 16, watchEvery},
		{"16 events per 100 ms, 14 of room", 16, 100 * ms, 2, 16, 43750 * time.Microsecond},
		{"an event per ms", 100, 100 * ms, 2, 16, watchMin},
	} {
		if got := watchPause(c.n, c.since, c.behind, c.queue); got != c.want {
			t.Errorf("%s: watchPause(%d, %v, %d, %d) = %v, want %v", c.name, c.n, c.since, c.behind, c.queue, got, c.want)
		}
	}
}
