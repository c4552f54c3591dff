package sessiondata

import (
	"testing"
	"time"
)

// TestPace: the eraser holds batches back so that erasing stays at Options.Rate items
// a second since it started, and never waits while it is behind (a clock of the
// test's, no wall time).
func TestPace(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := start
	st := New(nil, Tables{}, Options{Rate: 100})
	st.now = func() time.Time { return now }
	e := st.newEraser()
	steps := []struct {
		erased  int
		elapsed time.Duration
		want    time.Duration
	}{
		{0, 0, 250 * time.Millisecond},                       // the first 25 at 100/s: due at 0.25 s
		{25, 250 * time.Millisecond, 250 * time.Millisecond}, // on time: the next 25 wait their share
		{50, 900 * time.Millisecond, 0},                      // behind (due 0.75 s): no wait
		{1000, 9 * time.Second, 1250 * time.Millisecond},     // ahead: due at 10.25 s
	}
	for i, s := range steps {
		e.erased, now = s.erased, start.Add(s.elapsed)
		if got := e.wait(25); got != s.want {
			t.Errorf("step %d: wait %v, want %v", i, got, s.want)
		}
	}
	if d := New(nil, Tables{}, Options{}).o.Rate; d != DefaultRate {
		t.Errorf("default rate %d, want %d", d, DefaultRate)
	}
}
