package agent

import (
	"context"
	"testing"
	"time"
)

// looks is the double with a hook after each failed lease write (a look that found
// the lease held): what the holder does meanwhile.
type looks struct {
	*memState
	failed int
	after  func(n int)
}

func (l *looks) acquire(ctx context.Context, agentID, me string, now, until time.Time, c *claim) (state, bool, error) {
	st, ok, err := l.memState.acquire(ctx, agentID, me, now, until, c)
	if err == nil && !ok {
		l.failed++
		l.after(l.failed)
	}
	return st, ok, err
}

// TestAcquireWaitRule: the runner's acquire over the double, on a fake clock. A free
// lease is taken at once. A holder that renews after the first look — the one that
// found the lease held — is alive and will see the stimulus: acquire gives up. A
// renewal sent before that look proves nothing even when it lands after it (a dead
// runner's last one): acquire waits the lease out and takes it over. (The same rule
// with a runner's crash and its turn resumed: TestLateRenewalOfADeadRunner.)
func TestAcquireWaitRule(t *testing.T) {
	t.Parallel()
	const ttl = 300 * time.Millisecond
	for _, tc := range []struct {
		name   string
		held   bool                                    // the old runner holds a live lease at the start
		holder func(l *looks, clock *time.Time, n int) // after the nth look
		taken  bool                                    // acquire takes the lease
		looks  int                                     // failed lease writes
	}{
		{"a free lease", false, nil, true, 0},
		{"a holder renewing after the first look", true, func(l *looks, clock *time.Time, n int) {
			*clock = clock.Add(ttl / 3)
			if err := l.renew(context.Background(), "a", "run_old", clock.Add(ttl)); err != nil {
				t.Errorf("the holder's renewal: %v", err)
			}
		}, false, 2},
		{"a dead holder's renewal landing after the first look", true, func(l *looks, clock *time.Time, n int) {
			if n == 1 { // sent a quarter lease before the look, written after it
				if err := l.renew(context.Background(), "a", "run_old", clock.Add(-ttl/4).Add(ttl)); err != nil {
					t.Errorf("the late renewal: %v", err)
				}
				return
			}
			*clock = clock.Add(ttl) // time passes: the dead runner's lease runs out
		}, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := stateT0
			l := &looks{memState: newMemState()}
			l.after = func(n int) {
				if tc.holder != nil {
					tc.holder(l, &clock, n)
				}
			}
			if tc.held {
				if _, ok, _ := l.memState.acquire(context.Background(), "a", "run_old", clock, clock.Add(ttl), nil); !ok {
					t.Fatal("the old runner's lease")
				}
				clock = clock.Add(ttl / 2)
			}
			c := &core{cfg: Config{LeaseDuration: ttl}, now: func() time.Time { return clock }}
			rn := &activeRun{c: c, rs: l, agent: "a", me: "run_new"}
			rn.log = rn.newWindow()
			_, ok, err := rn.acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			st, _ := l.getState(context.Background(), "a")
			if ok != tc.taken || l.failed != tc.looks {
				t.Fatalf("acquire took the lease: %v after %d looks (holder %q), want %v after %d", ok, l.failed, st.Runner, tc.taken, tc.looks)
			}
			if want := map[bool]string{true: "run_new", false: "run_old"}[tc.taken]; st.Runner != want {
				t.Errorf("the lease is %q's, want %q's", st.Runner, want)
			}
		})
	}
}
