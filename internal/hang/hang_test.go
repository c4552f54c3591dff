package hang

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
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

// TestUntil: Until returns at the check that first holds, and fails naming what, with
// the check's last reason, once the bound runs out.
func TestUntil(t *testing.T) {
	calls := 0
	Until(t, "the third check", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Fatalf("Until returned after %d checks, want 3", calls)
	}

	f := flag.Lookup("test.timeout")
	prev := f.Value.String()
	t.Cleanup(func() { _ = f.Value.Set(prev) })
	if err := f.Value.Set("1ns"); err != nil { // Bound: its floor, a second
		t.Fatal(err)
	}
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		UntilNil(rec, "a state never reached", func() error { return errors.New("cursor at 3") })
	}()
	<-done
	want := "hang: a state never reached: not reached before the test binary's deadline: cursor at 3"
	if rec.msg != want {
		t.Fatalf("failure = %q, want %q", rec.msg, want)
	}
}

// fatalRecorder keeps a Fatal's message and ends the goroutine, as testing.T does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}
