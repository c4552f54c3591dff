package hang

import (
	"flag"
	"testing"
	"time"
)

// TestBound: the bound ends Margin before the binary's deadline, whatever that is, and
// is never under a second.
func TestBound(t *testing.T) {
	f := flag.Lookup("test.timeout")
	if f == nil {
		t.Fatal("no test.timeout flag")
	}
	prev := f.Value.String()
	t.Cleanup(func() { _ = f.Value.Set(prev) })
	tests := []struct {
		timeout  string
		min, max time.Duration
	}{
		{"0s", 10 * time.Minute, 10 * time.Minute},
		{"1s", time.Second, time.Second},
		{"1h", time.Hour - Margin - time.Minute, time.Hour - Margin},
	}
	for _, tc := range tests {
		if err := f.Value.Set(tc.timeout); err != nil {
			t.Fatal(err)
		}
		if got := Bound(); got < tc.min || got > tc.max {
			t.Errorf("-timeout %s: Bound() = %v, want within [%v, %v]", tc.timeout, got, tc.min, tc.max)
		}
	}
}
