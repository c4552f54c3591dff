package connections_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/dynamotest"
)

type fixture struct {
	conns  *connections.Store
	tokens *auth.Store
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	names := dynamotest.CreateTables(t)
	db := dynamotest.Client(t)
	return fixture{connections.New(db, names["ConnectionsTable"]), auth.New(db, names["ConnectionsTable"])}
}

// claim authenticates tok for agent and claims it for conn.
func (f fixture) claim(t *testing.T, agent, conn, tok string) (string, error) {
	t.Helper()
	h := auth.Hash(tok)
	prev, err := f.conns.Claim(context.Background(), agent, conn, h, f.tokens.Condition(agent, h))
	return prev.ConnID, err
}

func TestClaimSupersedes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	tok, err := f.tokens.Create(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if prev, err := f.claim(t, "a", "c1", tok); err != nil || prev != "" {
		t.Fatalf("first claim = %q, %v", prev, err)
	}
	if prev, err := f.claim(t, "a", "c2", tok); err != nil || prev != "c1" {
		t.Fatalf("second claim = %q, %v; want c1 superseded", prev, err)
	}
	o, err := f.conns.Owner(ctx, "a")
	if err != nil || o.ConnID != "c2" || o.HelloSent || o.Sub != 0 {
		t.Fatalf("owner = %+v, %v", o, err)
	}
	c1, err := f.conns.Conn(ctx, "c1")
	if err != nil || c1.State != connections.StateSuperseded {
		t.Fatalf("c1 = %+v, %v; want superseded", c1, err)
	}
	c2, err := f.conns.Conn(ctx, "c2")
	if err != nil || c2.State != connections.StateAuthorized || c2.AgentID != "a" || c2.TokenHash != auth.Hash(tok) {
		t.Fatalf("c2 = %+v, %v", c2, err)
	}
	// The superseded connection's late disconnect must not remove the new owner.
	if err := f.conns.Forget(ctx, "c1", "a"); err != nil {
		t.Fatal(err)
	}
	if o, err := f.conns.Owner(ctx, "a"); err != nil || o.ConnID != "c2" {
		t.Fatalf("owner after old disconnect = %+v, %v", o, err)
	}
	if _, err := f.conns.Subscribe(ctx, "a", "c1", connections.Subscription{}); !errors.Is(err, connections.ErrNotOwner) {
		t.Fatalf("subscribe by superseded = %v, want ErrNotOwner", err)
	}
}

func TestClaimFailsAfterRevocation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	tok, _ := f.tokens.Create(ctx, "a")
	if _, err := f.tokens.Rotate(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.claim(t, "a", "c1", tok); !errors.Is(err, connections.ErrTokenGone) {
		t.Fatalf("claim with a rotated token = %v, want ErrTokenGone", err)
	}
	if _, err := f.conns.Owner(ctx, "a"); !errors.Is(err, connections.ErrNotFound) {
		t.Fatalf("owner after failed claim: %v", err)
	}
}

// TestClaimRace: many connects of one agent at once leave exactly one owner, and every
// other one is reported superseded by exactly one winner.
func TestClaimRace(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok, _ := f.tokens.Create(context.Background(), "a")
	const n = 6
	var wg sync.WaitGroup
	superseded := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prev, err := f.claim(t, "a", fmt.Sprintf("c%d", i), tok)
			if err != nil {
				t.Error(err)
			}
			superseded <- prev
		}()
	}
	wg.Wait()
	close(superseded)
	seen := map[string]int{}
	for s := range superseded {
		seen[s]++
	}
	o, _ := f.conns.Owner(context.Background(), "a")
	if seen[o.ConnID] != 0 {
		t.Fatalf("the final owner %s was reported superseded", o.ConnID)
	}
	if seen[""] != 1 {
		t.Fatalf("%d claims found no previous owner, want 1", seen[""])
	}
	for c, k := range seen {
		if c != "" && k != 1 {
			t.Fatalf("%s reported superseded %d times", c, k)
		}
	}
}

func TestLeaseAndPending(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	tok, _ := f.tokens.Create(ctx, "a")
	if _, err := f.claim(t, "a", "c1", tok); err != nil {
		t.Fatal(err)
	}
	o, ok, err := f.conns.Acquire(ctx, "a", "h1", time.Minute, -1)
	if err != nil || !ok || o.Lease != "h1" {
		t.Fatalf("acquire for hello = %+v, %v, %v", o, ok, err)
	}
	if _, _, err := f.conns.Acquire(ctx, "a", "h2", time.Minute, -1); !errors.Is(err, connections.ErrLeaseHeld) {
		t.Fatalf("second acquire = %v, want ErrLeaseHeld", err)
	}
	if marked, err := f.conns.MarkPending(ctx, "a", -1); err != nil || !marked {
		t.Fatalf("mark pending = %v, %v", marked, err)
	}
	// The holder cannot let go while pending is set: it is told to look again.
	cur, released, err := f.conns.Release(ctx, o, "h1", connections.Progress{HelloSent: true})
	if err != nil || released || cur.Pending || cur.Lease != "h1" || !cur.HelloSent {
		t.Fatalf("release with pending = %+v, %v, %v; want kept lease", cur, released, err)
	}
	cur, released, err = f.conns.Release(ctx, cur, "h1", connections.Progress{HelloSent: true})
	if err != nil || !released || cur.Lease != "" {
		t.Fatalf("second release = %+v, %v, %v", cur, released, err)
	}
	// Hello sent and not subscribed: nothing to send, no lease taken.
	if _, ok, err := f.conns.Acquire(ctx, "a", "h3", time.Minute, -1); ok || err != nil {
		t.Fatalf("acquire with nothing owed = %v, %v", ok, err)
	}
	if marked, _ := f.conns.MarkPending(ctx, "a", -1); marked {
		t.Fatal("MarkPending succeeded without a live lease")
	}
	// Subscribe: the cursor moves; a holder of the old subscription adopts the new one.
	if _, err := f.conns.Subscribe(ctx, "a", "c1", connections.Subscription{From: 5, Requested: 2, Truncated: true, ReplayEnd: 9}); err != nil {
		t.Fatal(err)
	}
	o, ok, err = f.conns.Acquire(ctx, "a", "h4", time.Minute, -1)
	if err != nil || !ok || o.Next != 5 || o.Sub != 1 || !o.Truncated || o.ReplayEnd != 9 || o.Requested != 2 {
		t.Fatalf("acquire after subscribe = %+v, %v, %v", o, ok, err)
	}
	if _, err := f.conns.Subscribe(ctx, "a", "c1", connections.Subscription{From: 1, Requested: 1, ReplayEnd: 9}); err != nil {
		t.Fatal(err)
	}
	cur, err = f.conns.Checkpoint(ctx, o, "h4", connections.Progress{Next: 7, HelloSent: true}, time.Minute)
	if err != nil || cur.Sub != 2 || cur.Next != 1 || cur.Lease != "h4" {
		t.Fatalf("checkpoint across resubscribe = %+v, %v; want the new subscription at 1 under the same lease", cur, err)
	}
	// An expired lease can be taken over, and the old holder learns it lost it.
	if _, ok, err := f.conns.Acquire(ctx, "a", "h5", time.Minute, -1); ok || !errors.Is(err, connections.ErrLeaseHeld) {
		t.Fatalf("acquire under a live lease = %v, %v", ok, err)
	}
	short, _ := f.conns.Checkpoint(ctx, cur, "h4", connections.Progress{Next: 3, HelloSent: true}, time.Millisecond)
	time.Sleep(time.Until(short.LeaseUntil) + time.Millisecond) // a lease expires by the clock
	if _, ok, err := f.conns.Acquire(ctx, "a", "h5", time.Minute, -1); !ok || err != nil {
		t.Fatalf("acquire of an expired lease = %v, %v", ok, err)
	}
	if _, _, err := f.conns.Release(ctx, short, "h4", connections.Progress{Next: 4}); !errors.Is(err, connections.ErrLeaseLost) {
		t.Fatalf("release by the expired holder = %v, want ErrLeaseLost", err)
	}
	if o, _ := f.conns.Owner(ctx, "a"); o.Next != 3 || o.Lease != "h5" {
		t.Fatalf("the expired holder's release changed the record: %+v", o)
	}
}

// TestSlotsBoundAcrossInstances: two stores (two Lambda instances) share 3 slots; at
// no time do more than 3 holders hold one.
func TestSlotsBoundAcrossInstances(t *testing.T) {
	t.Parallel()
	names := dynamotest.CreateTables(t)
	const n = 3
	a := connections.New(dynamotest.Client(t), names["ConnectionsTable"]).NewSlots(n, time.Minute)
	b := connections.New(dynamotest.Client(t), names["ConnectionsTable"]).NewSlots(n, time.Minute)
	var holding, peak, acquired atomic.Int64
	// Every holder keeps its slot until two hold at once: with 3 slots the second always
	// gets one, so the test exercises concurrency however the machine schedules it.
	overlapped := make(chan struct{})
	var overlapOnce sync.Once
	var wg sync.WaitGroup
	for i := range 10 {
		sl := a
		if i%2 == 1 {
			sl = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("h%d", i)
			for {
				slot, err := sl.TryAcquire(context.Background(), holder, i%n)
				if err != nil {
					t.Error(err)
					return
				}
				if slot < 0 {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				now := holding.Add(1)
				for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
				}
				if now >= 2 {
					overlapOnce.Do(func() { close(overlapped) })
				}
				acquired.Add(1)
				select {
				case <-overlapped:
				case <-time.After(time.Minute):
					t.Error("no second holder within a minute")
				}
				// Held a while longer, so that more holders overlap and a slot
				// handed out twice would show in the peak.
				time.Sleep(50 * time.Millisecond)
				holding.Add(-1)
				if err := sl.Release(context.Background(), holder, slot); err != nil {
					t.Error(err)
				}
				return
			}
		}()
	}
	wg.Wait()
	if acquired.Load() != 10 {
		t.Fatalf("%d of 10 holders got a slot", acquired.Load())
	}
	if peak.Load() > n {
		t.Fatalf("peak %d holders, bound is %d", peak.Load(), n)
	}
	if peak.Load() < 2 {
		t.Fatalf("peak %d: the test did not exercise concurrency", peak.Load())
	}
}

// TestWatchClaim: one watcher per agent; it may extend its own claim, another may take
// an expired one, and it cannot give its claim up while a Pending mark relies on it
// unless forced.
func TestWatchClaim(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if ok, err := f.conns.ClaimWatch(ctx, "a", "w1", time.Now().Add(time.Minute)); ok || err != nil {
		t.Fatalf("claim without an owner record = %v, %v; want false", ok, err)
	}
	tok, _ := f.tokens.Create(ctx, "a")
	if _, err := f.claim(t, "a", "c1", tok); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		watcher string
		until   time.Duration
		want    bool
	}{
		{"first claim", "w1", time.Minute, true},
		{"another while live", "w2", time.Minute, false},
		{"the holder extends", "w1", 50 * time.Millisecond, true},
	}
	for _, s := range steps {
		ok, err := f.conns.ClaimWatch(ctx, "a", s.watcher, time.Now().Add(s.until))
		if err != nil || ok != s.want {
			t.Fatalf("%s: claim = %v, %v; want %v", s.name, ok, err, s.want)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if ok, err := f.conns.ClaimWatch(ctx, "a", "w2", time.Now().Add(time.Minute)); !ok || err != nil {
		t.Fatalf("claim of an expired watch = %v, %v", ok, err)
	}
	// w2 holds it. A lease holder gets a Pending mark: w2 may not leave unforced.
	if _, ok, err := f.conns.Acquire(ctx, "a", "h1", time.Minute, -1); !ok || err != nil {
		t.Fatalf("acquire = %v, %v", ok, err)
	}
	if marked, err := f.conns.MarkPending(ctx, "a", -1); !marked || err != nil {
		t.Fatalf("mark = %v, %v", marked, err)
	}
	if done, err := f.conns.EndWatch(ctx, "a", "w2", false); done || err != nil {
		t.Fatalf("end watch with a mark set = %v, %v; want kept", done, err)
	}
	if ok, _ := f.conns.ClaimWatch(ctx, "a", "w3", time.Now().Add(time.Minute)); ok {
		t.Fatal("another watcher claimed a kept watch")
	}
	if done, err := f.conns.EndWatch(ctx, "a", "w1", true); !done || err != nil {
		t.Fatalf("end of a claim that is not w1's = %v, %v; want done (nothing of w1's left)", done, err)
	}
	if done, err := f.conns.EndWatch(ctx, "a", "w2", true); !done || err != nil {
		t.Fatalf("forced end = %v, %v", done, err)
	}
	if ok, err := f.conns.ClaimWatch(ctx, "a", "w3", time.Now().Add(time.Minute)); !ok || err != nil {
		t.Fatalf("claim after the end = %v, %v", ok, err)
	}
}

// TestAbandonAfterResubscribe: a holder that hands over after the client resubscribed
// still lets the lease go — the new subscription must not wait for it to run out — and
// leaves the new subscription's cursor and its Pending mark as they are.
func TestAbandonAfterResubscribe(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	tok, _ := f.tokens.Create(ctx, "a")
	if _, err := f.claim(t, "a", "c1", tok); err != nil {
		t.Fatal(err)
	}
	if _, err := f.conns.Subscribe(ctx, "a", "c1", connections.Subscription{From: 0, ReplayEnd: 20}); err != nil {
		t.Fatal(err)
	}
	o, ok, err := f.conns.Acquire(ctx, "a", "h1", time.Minute, -1)
	if err != nil || !ok {
		t.Fatalf("acquire = %v, %v", ok, err)
	}
	if _, err := f.conns.Subscribe(ctx, "a", "c1", connections.Subscription{From: 3, Requested: 3, ReplayEnd: 20}); err != nil {
		t.Fatal(err)
	}
	if err := f.conns.Abandon(ctx, o, "h1", connections.Progress{Next: 15, HelloSent: true}); err != nil {
		t.Fatal(err)
	}
	cur, err := f.conns.Owner(ctx, "a")
	if err != nil || cur.Lease != "" || cur.Next != 3 || cur.Sub != 2 || !cur.Pending {
		t.Fatalf("after abandon = %+v, %v; want the lease gone, the new cursor 3 and the mark kept", cur, err)
	}
	if _, ok, err := f.conns.Acquire(ctx, "a", "h2", time.Minute, -1); !ok || err != nil {
		t.Fatalf("acquire after abandon = %v, %v", ok, err)
	}
}
