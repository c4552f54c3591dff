package connections_test

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
)

type fixture struct {
	conns  *connections.Store
	tokens *auth.Store
	db     *dynamodb.Client
	table  string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	names := dynamotest.CreateTables(t)
	db := dynamotest.Client(t)
	return fixture{connections.New(db, names["ConnectionsTable"]), auth.New(db, names["ConnectionsTable"]), db, names["ConnectionsTable"]}
}

// claim authenticates tok for agent and claims it for conn.
// connect makes a token for agent and claims the agent for conn with it: a connection
// that owns its agent. It returns the token.
func (f fixture) connect(t *testing.T, agent, conn string) string {
	t.Helper()
	tok, err := f.tokens.Create(context.Background(), agent)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.claim(t, agent, conn, tok); err != nil {
		t.Fatal(err)
	}
	return tok
}

func (f fixture) claim(t *testing.T, agent, conn, tok string) (string, error) {
	t.Helper()
	h := auth.Hash(tok)
	prev, err := f.conns.Claim(context.Background(), agent, conn, h, f.tokens.Condition(agent, h).ConditionCheck)
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
	f.connect(t, "a", "c1")
	o, got, err := acquire(f.conns, "a", "h1")
	if err != nil || got != connections.Acquired || o.Lease != "h1" || o.LeaseKind != connections.HolderOnce {
		t.Fatalf("acquire for hello = %+v, %v, %v; want acquired by h1 (once)", o, got, err)
	}
	if _, got, err := acquire(f.conns, "a", "h2"); err != nil || got != connections.LeaseHeld {
		t.Fatalf("second acquire = %v, %v; want %v", got, err, connections.LeaseHeld)
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
	if _, got, err := acquire(f.conns, "a", "h3"); got != connections.NothingOwed || err != nil {
		t.Fatalf("acquire with nothing owed = %v, %v; want %v", got, err, connections.NothingOwed)
	}
	if marked, _ := f.conns.MarkPending(ctx, "a", -1); marked {
		t.Fatal("MarkPending succeeded without a live lease")
	}
	// Subscribe: the cursor moves; a holder of the old subscription adopts the new one.
	if _, err := f.conns.Subscribe(ctx, "a", "c1", connections.Subscription{From: 5, Requested: 2, Truncated: true, ReplayEnd: 9}); err != nil {
		t.Fatal(err)
	}
	o, got, err = acquire(f.conns, "a", "h4")
	if err != nil || got != connections.Acquired || o.Next != 5 || o.Sub != 1 || !o.Truncated || o.ReplayEnd != 9 || o.Requested != 2 {
		t.Fatalf("acquire after subscribe = %+v, %v, %v; want acquired at 5 of subscription 1", o, got, err)
	}
	if _, err := f.conns.Subscribe(ctx, "a", "c1", connections.Subscription{From: 1, Requested: 1, ReplayEnd: 9}); err != nil {
		t.Fatal(err)
	}
	cur, err = f.conns.Checkpoint(ctx, o, "h4", connections.Progress{Next: 7, HelloSent: true}, time.Minute)
	if err != nil || cur.Sub != 2 || cur.Next != 1 || cur.Lease != "h4" {
		t.Fatalf("checkpoint across resubscribe = %+v, %v; want the new subscription at 1 under the same lease", cur, err)
	}
	// An expired lease can be taken over, and the old holder learns it lost it.
	if _, got, err := acquire(f.conns, "a", "h5"); got != connections.LeaseHeld || err != nil {
		t.Fatalf("acquire under a live lease = %v, %v; want %v", got, err, connections.LeaseHeld)
	}
	short, _ := f.conns.Checkpoint(ctx, cur, "h4", connections.Progress{Next: 3, HelloSent: true}, time.Millisecond)
	time.Sleep(time.Until(short.LeaseUntil) + time.Millisecond) // a lease expires by the clock
	if _, got, err := acquire(f.conns, "a", "h5"); got != connections.Acquired || err != nil {
		t.Fatalf("acquire of an expired lease = %v, %v; want %v", got, err, connections.Acquired)
	}
	if _, _, err := f.conns.Release(ctx, short, "h4", connections.Progress{Next: 4}); !errors.Is(err, connections.ErrLeaseLost) {
		t.Fatalf("release by the expired holder = %v, want ErrLeaseLost", err)
	}
	if o, _ := f.conns.Owner(ctx, "a"); o.Next != 3 || o.Lease != "h5" {
		t.Fatalf("the expired holder's release changed the record: %+v", o)
	}
}

// TestSlotsBoundAcrossInstances: two stores (two Lambda instances) share n slots, and a
// crowd of holders polls them one random group at a time, as delivery does. At no time
// do more than n holders hold a slot, and every one of the n slots is reachable: the
// first holders keep their slots until all n are held at once (a barrier, not a sleep),
// so the bound is reached on any machine. Every poll reads at most SlotGroupSize slot
// items, all of the group asked for (counted on the wire by a middleware).
func TestSlotsBoundAcrossInstances(t *testing.T) {
	t.Parallel()
	// One table for both rows, run one after the other: each leaves every slot free.
	names := dynamotest.CreateTables(t)
	for _, tc := range []struct {
		name       string
		n, holders int
	}{
		{"one group", 3, 10},
		{"three groups", 12, 14},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := &dynamotest.SlotReads{}
			a := connections.New(reads.Client(t), names["ConnectionsTable"]).NewSlots(tc.n, time.Minute)
			b := connections.New(reads.Client(t), names["ConnectionsTable"]).NewSlots(tc.n, time.Minute)
			if got, want := a.Groups(), (tc.n+connections.SlotGroupSize-1)/connections.SlotGroupSize; got != want {
				t.Fatalf("Groups() = %d, want %d", got, want)
			}
			n := int64(tc.n)
			var holding, peak, acquired atomic.Int64
			taken := make([]atomic.Bool, tc.n)
			full := make(chan struct{}) // closed once n holders hold a slot at once
			var fullOnce sync.Once
			var wg sync.WaitGroup
			for i := range tc.holders {
				sl := a
				if i%2 == 1 {
					sl = b
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					holder := fmt.Sprintf("h%d", i)
					for {
						group := mrand.IntN(sl.Groups())
						slot, err := sl.TryAcquire(context.Background(), holder, group)
						if err != nil {
							t.Error(err)
							return
						}
						if slot < 0 {
							time.Sleep(5 * time.Millisecond) // backoff before the next poll
							continue
						}
						if slot/connections.SlotGroupSize != group || slot >= tc.n {
							t.Errorf("holder %s asked group %d, got slot %d of %d", holder, group, slot, tc.n)
						}
						taken[slot].Store(true)
						now := holding.Add(1)
						for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
						}
						acquired.Add(1)
						if now == n {
							fullOnce.Do(func() { close(full) })
						}
						select {
						case <-full:
						case <-time.After(hang.Bound()):
							t.Errorf("holder %s: never %d holders at once", holder, n)
						}
						holding.Add(-1)
						if err := sl.Release(context.Background(), holder, slot); err != nil {
							t.Error(err)
						}
						return
					}
				}()
			}
			wg.Wait()
			if got := acquired.Load(); got != int64(tc.holders) {
				t.Fatalf("%d of %d holders got a slot", got, tc.holders)
			}
			if peak.Load() > n {
				t.Fatalf("peak %d holders, bound is %d", peak.Load(), n)
			}
			if peak.Load() != n {
				t.Fatalf("peak %d holders, want %d: the test did not exercise the bound", peak.Load(), n)
			}
			for i := range taken {
				if !taken[i].Load() {
					t.Errorf("slot %d was never taken", i)
				}
			}
			calls, most, spread := reads.Stats()
			if calls == 0 {
				t.Fatal("no BatchGetItem of slot items seen: the meter is not counting")
			}
			if most > connections.SlotGroupSize || spread > 0 {
				t.Fatalf("%d polls: up to %d slot items in one read, %d reads across groups; want at most %d, all of one group",
					calls, most, spread, connections.SlotGroupSize)
			}
		})
	}
}

// TestSlotGroups: group g holds slots g·k … min((g+1)·k, n)−1, a poll of a full group
// reports -1 while another group has free slots, and a group out of range is an error.
func TestSlotGroups(t *testing.T) {
	t.Parallel()
	names := dynamotest.CreateTables(t)
	ctx := context.Background()
	for _, tc := range []struct{ n, groups int }{{1, 1}, {4, 1}, {5, 2}, {12, 3}, {13, 4}} {
		if got := connections.New(dynamotest.Client(t), names["ConnectionsTable"]).NewSlots(tc.n, time.Minute).Groups(); got != tc.groups {
			t.Errorf("Groups() with %d slots = %d, want %d", tc.n, got, tc.groups)
		}
	}
	sl := connections.New(dynamotest.Client(t), names["ConnectionsTable"]).NewSlots(6, time.Minute)
	var got []int
	for i := range 2 { // group 1 is slots 4 and 5
		slot, err := sl.TryAcquire(ctx, fmt.Sprintf("h%d", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, slot)
	}
	if !(got[0] == 4 && got[1] == 5 || got[0] == 5 && got[1] == 4) {
		t.Fatalf("two acquires in group 1 of 6 slots = %v, want slots 4 and 5", got)
	}
	if slot, err := sl.TryAcquire(ctx, "h2", 1); slot != -1 || err != nil {
		t.Fatalf("acquire in the full group 1 = %d, %v; want -1, nil", slot, err)
	}
	if slot, err := sl.TryAcquire(ctx, "h2", 0); slot < 0 || slot > 3 || err != nil {
		t.Fatalf("acquire in group 0 = %d, %v; want a slot of 0-3", slot, err)
	}
	for _, g := range []int{-1, 2} {
		if _, err := sl.TryAcquire(ctx, "h3", g); !errors.Is(err, connections.ErrNoSlotGroup) {
			t.Errorf("acquire in group %d of 2 = %v, want ErrNoSlotGroup", g, err)
		}
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
	f.connect(t, "a", "c1")
	steps := []struct {
		name    string
		watcher string
		until   time.Duration
		want    bool
	}{
		{"first claim", "w1", time.Minute, true},
		{"another while live", "w2", time.Minute, false},
		// The holder may set any end, even one already past: the claim then runs out
		// at once, as a claim does when its watcher dies.
		{"the holder extends", "w1", -time.Millisecond, true},
	}
	for _, s := range steps {
		ok, err := f.conns.ClaimWatch(ctx, "a", s.watcher, time.Now().Add(s.until))
		if err != nil || ok != s.want {
			t.Fatalf("%s: claim = %v, %v; want %v", s.name, ok, err, s.want)
		}
	}
	if ok, err := f.conns.ClaimWatch(ctx, "a", "w2", time.Now().Add(time.Minute)); !ok || err != nil {
		t.Fatalf("claim of an expired watch = %v, %v", ok, err)
	}
	// w2 holds it. A lease holder gets a Pending mark: w2 may not leave unforced.
	if _, got, err := acquire(f.conns, "a", "h1"); got != connections.Acquired || err != nil {
		t.Fatalf("acquire = %v, %v; want %v", got, err, connections.Acquired)
	}
	if marked, err := f.conns.MarkPending(ctx, "a", -1); !marked || err != nil {
		t.Fatalf("mark = %v, %v", marked, err)
	}
	if done, err := f.conns.EndWatch(ctx, connections.Owner{AgentID: "a"}, "w2", false); done || err != nil {
		t.Fatalf("end watch with a mark set = %v, %v; want kept", done, err)
	}
	if ok, _ := f.conns.ClaimWatch(ctx, "a", "w3", time.Now().Add(time.Minute)); ok {
		t.Fatal("another watcher claimed a kept watch")
	}
	if done, err := f.conns.EndWatch(ctx, connections.Owner{AgentID: "a"}, "w1", true); !done || err != nil {
		t.Fatalf("end of a claim that is not w1's = %v, %v; want done (nothing of w1's left)", done, err)
	}
	if done, err := f.conns.EndWatch(ctx, connections.Owner{AgentID: "a"}, "w2", true); !done || err != nil {
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
	f.connect(t, "a", "c1")
	if _, err := f.conns.Subscribe(ctx, "a", "c1", connections.Subscription{From: 0, ReplayEnd: 20}); err != nil {
		t.Fatal(err)
	}
	o, got, err := acquire(f.conns, "a", "h1")
	if err != nil || got != connections.Acquired {
		t.Fatalf("acquire = %v, %v; want %v", got, err, connections.Acquired)
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
	if _, got, err := acquire(f.conns, "a", "h2"); got != connections.Acquired || err != nil {
		t.Fatalf("acquire after abandon = %v, %v; want %v", got, err, connections.Acquired)
	}
}

// acquire takes agent's lease for a HolderOnce holder named id, for a minute.
func acquire(st *connections.Store, agent, id string) (connections.Owner, connections.AcquireOutcome, error) {
	r, err := st.Acquire(context.Background(), agent, connections.Holder{ID: id, Kind: connections.HolderOnce}, time.Minute, -1)
	return r.Owner, r.Outcome, err
}

// TestHolderKind: Acquire records the holder's kind with the lease and a release
// removes it; a lease written before the lease_kind attribute existed (an older
// writer, mid rolling deploy) reads with the kind its holder id's prefix encodes.
func TestHolderKind(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if r, err := f.conns.Acquire(ctx, "a", connections.NewHolder(connections.HolderRetried), time.Minute, -1); err != nil || r.Outcome != connections.NoOwner {
		t.Fatalf("acquire without an owner = %v, %v; want %v", r.Outcome, err, connections.NoOwner)
	}
	f.connect(t, "a", "c1")
	for _, kind := range []connections.HolderKind{connections.HolderRetried, connections.HolderOnce} {
		h := connections.NewHolder(kind)
		r, err := f.conns.Acquire(ctx, "a", h, time.Minute, -1)
		if err != nil || r.Outcome != connections.Acquired || r.Owner.Lease != h.ID || r.Owner.LeaseKind != kind {
			t.Fatalf("acquire by %+v = %+v, %v; want acquired, lease %s of kind %s", h, r, err, h.ID, kind)
		}
		cur, released, err := f.conns.Release(ctx, r.Owner, h.ID, connections.Progress{HelloSent: true})
		if err != nil || !released || cur.Lease != "" || cur.LeaseKind != "" {
			t.Fatalf("release = %+v, %v, %v; want lease and kind gone", cur, released, err)
		}
		// Hello sent, not subscribed: owe hello again so the next acquire takes the lease.
		if _, err := f.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(f.table), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "agent#a"}},
			UpdateExpression:          aws.String("SET hello = :f"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":f": &types.AttributeValueMemberBOOL{Value: false}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		lease string
		want  connections.HolderKind
	}{
		{"r0123456789abcdef", connections.HolderRetried},
		{"x0123456789abcdef", connections.HolderOnce},
	} {
		until := time.Now().Add(time.Minute).UnixMilli()
		if _, err := f.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(f.table), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "agent#a"}},
			UpdateExpression: aws.String("SET lease = :l, lease_until = :u REMOVE lease_kind"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":l": &types.AttributeValueMemberS{Value: tc.lease}, ":u": &types.AttributeValueMemberN{Value: fmt.Sprint(until)},
			},
		}); err != nil {
			t.Fatal(err)
		}
		o, err := f.conns.Owner(ctx, "a")
		if err != nil || o.Lease != tc.lease || o.LeaseKind != tc.want {
			t.Errorf("old record leased by %s reads kind %q (%v); want %q", tc.lease, o.LeaseKind, err, tc.want)
		}
	}
}

// TestMarkSeq: a mark carries the seq it was left for and only grows — a lower seq
// never replaces a higher one, and a mark without a seq (a subscribe, a kick) is never
// narrowed to one — and a holder whose progress is past the mark's seq lets go and
// clears it in one write (1 write unit, metered as cmd/bench meters). A holder behind
// the mark's seq keeps the lease and the mark for one failed write, and a mark without
// a seq is cleared with one write more, as before marks had seqs.
func TestMarkSeq(t *testing.T) {
	t.Parallel()
	meter := &dynamotest.WriteUnits{}
	db := meter.Client(t)
	names := dynamotest.CreateTables(t)
	f := fixture{connections.New(db, names["ConnectionsTable"]), auth.New(db, names["ConnectionsTable"]), db, names["ConnectionsTable"]}
	ctx := context.Background()
	for i, tc := range []struct {
		name         string
		marks        []int64 // upTo of each MarkPending, in order (-1: no seq)
		next         int64   // the holder's progress at its release
		wantTo       int64   // PendingTo before the release
		wantReleased bool
		wantUnits    float64 // of the release
		wantPending  bool    // after the release
		unsubscribed bool    // the connection never subscribed (hello not sent)
	}{
		{"no mark", nil, 5, 0, true, 1, false, false},
		{"mark behind the progress", []int64{4}, 5, 5, true, 1, false, false},
		{"mark at the progress", []int64{5}, 5, 6, false, 1, true, false},
		{"a lower mark does not replace a higher", []int64{6, 4}, 5, 7, false, 1, true, false},
		{"a higher mark raises a lower", []int64{3, 6}, 7, 7, true, 1, false, false},
		{"a mark without a seq is never narrowed", []int64{3, -1, 8}, 9, 0, false, 2, false, false},
		// A holder of a connection that never subscribed sends no events: a mark with a
		// seq must not refuse its release, or it would look again for ever.
		{"not subscribed: a mark with a seq is owed nothing", []int64{3}, 0, 4, true, 1, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agent := fmt.Sprintf("a%d", i)
			f.connect(t, agent, "c")
			if !tc.unsubscribed {
				if _, err := f.conns.Subscribe(ctx, agent, "c", connections.Subscription{From: 0, ReplayEnd: 0}); err != nil {
					t.Fatal(err)
				}
			}
			o, got, err := acquire(f.conns, agent, "h1") // clears the subscribe's mark
			if err != nil || got != connections.Acquired {
				t.Fatalf("acquire = %v, %v", got, err)
			}
			for _, upTo := range tc.marks {
				if done, err := f.conns.MarkPending(ctx, agent, upTo); !done || err != nil {
					t.Fatalf("mark up to %d = %v, %v; want done", upTo, done, err)
				}
			}
			if cur, _ := f.conns.Owner(ctx, agent); cur.Pending != (len(tc.marks) > 0) || cur.PendingTo != tc.wantTo {
				t.Fatalf("mark = %v to %d; want %v to %d", cur.Pending, cur.PendingTo, len(tc.marks) > 0, tc.wantTo)
			}
			before, _ := meter.Units()
			cur, released, err := f.conns.Release(ctx, o, "h1", connections.Progress{Next: tc.next, HelloSent: true})
			after, _ := meter.Units()
			if err != nil || released != tc.wantReleased {
				t.Fatalf("release at %d = %v, %v; want released %v", tc.next, released, err, tc.wantReleased)
			}
			if units := after - before; units != tc.wantUnits {
				t.Errorf("release cost %v write units; want %v", units, tc.wantUnits)
			}
			if cur.Pending != tc.wantPending || (cur.Lease == "") != tc.wantReleased {
				t.Errorf("after release: pending %v, lease %q; want pending %v, released %v", cur.Pending, cur.Lease, tc.wantPending, tc.wantReleased)
			}
			stored, _ := f.conns.Owner(ctx, agent)
			if stored.Pending != tc.wantPending || stored.Lease != cur.Lease {
				t.Errorf("stored: pending %v, lease %q; want pending %v, lease %q", stored.Pending, stored.Lease, tc.wantPending, cur.Lease)
			}
		})
	}
}

// TestMarkBeforeSubscribe: a mark with a seq left while the connection is not
// subscribed (its first frames' events, while its hello is being posted) never holds the
// holder: nothing is owed, so its progress never reaches the seq, and a kept mark would
// have it release for ever. The release clears the mark with the lease, in one write.
func TestMarkBeforeSubscribe(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.connect(t, "a", "c1")
	o, got, err := acquire(f.conns, "a", "h1")
	if err != nil || got != connections.Acquired {
		t.Fatalf("acquire for hello = %v, %v", got, err)
	}
	if done, err := f.conns.MarkPending(ctx, "a", 5); !done || err != nil {
		t.Fatalf("mark up to 5 = %v, %v; want done", done, err)
	}
	cur, released, err := f.conns.Release(ctx, o, "h1", connections.Progress{HelloSent: true})
	if err != nil || !released || cur.Pending {
		t.Fatalf("release with the mark = %+v, %v, %v; want released, the mark cleared", cur, released, err)
	}
	if stored, _ := f.conns.Owner(ctx, "a"); stored.Pending || stored.Lease != "" {
		t.Errorf("stored: pending %v, lease %q; want neither", stored.Pending, stored.Lease)
	}
}

// TestMarksRace: wake-ups marking at once leave the highest seq, whatever their order.
func TestMarksRace(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.connect(t, "a", "c")
	if _, err := f.conns.Subscribe(ctx, "a", "c", connections.Subscription{}); err != nil {
		t.Fatal(err)
	}
	if _, got, err := acquire(f.conns, "a", "h1"); err != nil || got != connections.Acquired {
		t.Fatalf("acquire = %v, %v", got, err)
	}
	var wg sync.WaitGroup
	var highest atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5 {
				upTo := int64(mrand.IntN(100) + g*i)
				for h := highest.Load(); upTo > h && !highest.CompareAndSwap(h, upTo); h = highest.Load() {
				}
				if done, err := f.conns.MarkPending(ctx, "a", upTo); !done || err != nil {
					t.Errorf("mark up to %d = %v, %v; want done", upTo, done, err)
				}
			}
		}()
	}
	wg.Wait()
	if o, _ := f.conns.Owner(ctx, "a"); !o.Pending || o.PendingTo != highest.Load()+1 {
		t.Errorf("mark = %v to %d; want to %d (the highest seq marked, plus one)", o.Pending, o.PendingTo, highest.Load()+1)
	}
}

// TestDepart: a departure record is found by Departed, strongly consistent, at once;
// another connection's is not; it carries its TTL (DepartTTL from the store's clock) and
// makes no conn# record, so the connection stays unknown to every other reader.
func TestDepart(t *testing.T) {
	t.Parallel()
	names := dynamotest.CreateTables(t)
	db := dynamotest.Client(t)
	at := time.Unix(1_900_000_000, 0)
	st := connections.NewWithClock(db, names["ConnectionsTable"], func() time.Time { return at })
	ctx := context.Background()
	for _, id := range []string{"left", "stays"} {
		if ok, err := st.Departed(ctx, id); err != nil || ok {
			t.Fatalf("Departed(%s) before any departure = %v, %v; want false", id, ok, err)
		}
	}
	if err := st.Depart(ctx, "left"); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"left": true, "stays": false} {
		if ok, err := st.Departed(ctx, id); err != nil || ok != want {
			t.Errorf("Departed(%s) = %v, %v; want %v", id, ok, err, want)
		}
	}
	if _, err := st.Conn(ctx, "left"); !errors.Is(err, connections.ErrNotFound) {
		t.Errorf("Conn(left) after its departure: %v; want ErrNotFound", err)
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(names["ConnectionsTable"]),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "gone#left"}}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	exp, ok := out.Item["expires_at"].(*types.AttributeValueMemberN)
	if want := fmt.Sprint(at.Add(connections.DepartTTL).Unix()); !ok || exp.Value != want || len(out.Item) != 2 {
		t.Errorf("departure item %v; want pk and expires_at %s only", out.Item, want)
	}
}
