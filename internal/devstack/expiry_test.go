package devstack_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/devstack"
)

// TestTokenExpiryEndToEnd: through the local stack, a live connection whose token
// expires is sent unauthorized and closed by the token sweep (the same stream path as a
// rotation), while the agent's other connection-worthy token keeps working; a connect
// with an expired token is refused at the door. The sweep's clock is the test's, so
// nothing waits for real time to pass.
func TestTokenExpiryEndToEnd(t *testing.T) {
	t.Parallel()
	var skew atomic.Int64 // how far the sweep's clock runs ahead of real time
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	e := startStack(t, devstack.Options{TokenSweep: 50 * time.Millisecond, TokenClock: clock})
	ctx := context.Background()
	short, err := e.tokens.CreateExpiring(ctx, "a1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := e.dial(t, "a1", short)
	c.hello("a1")
	c.send(`{"type":"subscribe","from_seq":0}`)
	c.events(0, 0)

	skew.Store(int64(2 * time.Hour)) // the sweep now sees the token as expired
	// The sweep's own write is the condition to wait for; from there on the drop takes
	// the rotation's path (and its time).
	for deadline := time.Now().Add(2 * time.Minute); ; {
		list, err := e.tokens.List(ctx, "a1")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sweep did not revoke the expired token: %+v", list)
		}
	}
	c.expectError("unauthorized")
	c.expectClosed()
	again := e.dial(t, "a1", short)
	again.expectError("unauthorized")
	again.expectClosed()

	// Already expired when presented (created with a clock two hours behind): refused at
	// connect, before any sweep could remove it.
	past := e.tokens.WithClock(func() time.Time { return time.Now().Add(-2 * time.Hour) })
	stale, err := past.CreateExpiring(ctx, "a2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	late := e.dial(t, "a2", stale)
	late.expectError("unauthorized")
	late.expectClosed()

	// A token without expiry is untouched by the sweep.
	forever := e.token(t, "a1")
	ok := e.dial(t, "a1", forever)
	ok.hello("a1")
	list, err := e.tokens.List(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !list[0].Expires.IsZero() || list[0].LastUsed.IsZero() {
		t.Fatalf("tokens of a1 after the sweep = %+v, want the one without expiry, used", list)
	}
}
