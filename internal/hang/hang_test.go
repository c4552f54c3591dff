package hang

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// TestBound: the bound is Limit grown with the load average per CPU (up to
// MaxLoadFactor), and ends Margin before the binary's deadline, whatever that is, never
// under a second.
func TestBound(t *testing.T) {
	f := flag.Lookup("test.timeout")
	if f == nil {
		t.Fatal("no test.timeout flag")
	}
	prev, prevLoad := f.Value.String(), loadPath
	t.Cleanup(func() { _ = f.Value.Set(prev); loadPath = prevLoad })
	cpus := float64(runtime.NumCPU())
	tests := []struct {
		name     string
		timeout  string
		loadavg  string // "" : no load average to read
		min, max time.Duration
	}{
		{"no deadline, idle", "0s", "0.00 0.01 0.05 1/100 42", Limit, Limit},
		{"no deadline, no load average", "0s", "", Limit, Limit},
		{"no deadline, load twice the CPUs", "0s", fmt.Sprintf("%.2f 1 1 1/100 42", 2*cpus), 2 * Limit, 2 * Limit},
		{"no deadline, load far above", "0s", fmt.Sprintf("%.2f 1 1 1/100 42", 100*cpus), MaxLoadFactor * Limit, MaxLoadFactor * Limit},
		{"deadline nearer than the bound", "1m", "0.00 0 0 1/1 1", time.Minute - Margin - time.Minute, time.Minute - Margin},
		{"deadline past", "1s", "0.00 0 0 1/1 1", time.Second, time.Second},
		{"deadline far", "10h", "0.00 0 0 1/1 1", Limit, Limit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := f.Value.Set(tc.timeout); err != nil {
				t.Fatal(err)
			}
			loadPath = filepath.Join(t.TempDir(), "loadavg")
			if tc.loadavg != "" {
				if err := os.WriteFile(loadPath, []byte(tc.loadavg+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if got := Bound(); got < max(tc.min, time.Second) || got > tc.max {
				t.Errorf("-timeout %s, loadavg %q: Bound() = %v, want within [%v, %v]", tc.timeout, tc.loadavg, got, tc.min, tc.max)
			}
		})
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
	want := "hang: a state never reached: not reached in 1s: cursor at 3"
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
