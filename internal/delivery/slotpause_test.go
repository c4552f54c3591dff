package delivery

import (
	"testing"
	"time"
)

// TestSlotPause pins the replay slot wait's schedule: the doubling alone while the wait
// is short, then half the time waited, never past the cap.
func TestSlotPause(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, c := range []struct {
		wait, waited, want time.Duration
	}{
		{20 * ms, 0, 20 * ms},
		{160 * ms, 150 * ms, 160 * ms},
		{500 * ms, 600 * ms, 500 * ms},
		{500 * ms, 1000 * ms, 500 * ms},
		{500 * ms, 3 * time.Second, 1500 * ms},
		{500 * ms, 8 * time.Second, slotPauseCap},
		{500 * ms, time.Minute, slotPauseCap},
	} {
		if got := slotPause(c.wait, c.waited); got != c.want {
			t.Errorf("slotPause(%v, %v) = %v, want %v", c.wait, c.waited, got, c.want)
		}
	}
}
