package connections_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// TestWaitCap: of many frames entering the turnstile's wait at once, exactly max get
// in; leaving frees a place; a connection without a record admits none. Several
// rounds, real goroutines, one DynamoDB item.
func TestWaitCap(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.connect(t, "wait-agent", "wait-conn")
	const max, tries, rounds = 4, 12, 3
	for round := range rounds {
		var in atomic.Int64
		var wg sync.WaitGroup
		for range tries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := f.conns.EnterWait(ctx, "wait-conn", max)
				if err != nil {
					t.Error(err)
				}
				if ok {
					in.Add(1)
				}
			}()
		}
		wg.Wait()
		if got := in.Load(); got != max {
			t.Fatalf("round %d: %d of %d entered, want exactly %d", round, got, tries, max)
		}
		for range max {
			if err := f.conns.LeaveWait(ctx, "wait-conn"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Leaving more often than entering never goes below zero: the next round still
	// admits exactly max.
	if err := f.conns.LeaveWait(ctx, "wait-conn"); err != nil {
		t.Fatal(err)
	}
	for i := range max + 1 {
		ok, err := f.conns.EnterWait(ctx, "wait-conn", max)
		if err != nil || ok != (i < max) {
			t.Fatalf("enter %d after an extra leave: %v, %v; want %v", i, ok, err, i < max)
		}
	}
	if ok, err := f.conns.EnterWait(ctx, "no-such-conn", max); ok || err != nil {
		t.Errorf("a connection without a record entered: %v, %v", ok, err)
	}
}
