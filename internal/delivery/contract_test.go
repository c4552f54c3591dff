package delivery

// One contract suite over Records, run against the in-memory double (memRecords) and
// against connections.Store on DynamoDB Local, both on one fake clock: each scenario
// drives the ownership and connection records through the interface and asserts the
// same outcomes on both, so that the double's rules cannot drift from the store's
// conditional writes. Expiry is exact to the millisecond (lease.Live: live through the
// lease's last millisecond) and nothing sleeps.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// fakeClock is the one clock both implementations read; only a scenario moves it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// contractT0 is where every scenario's clock starts: a whole millisecond, as the
// stores keep a lease's end. It is years in the past, so that a rule that read the wall
// clock instead of the fake one would find every lease a scenario writes run out.
var contractT0 = time.UnixMilli(1_600_000_000_000)

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// contractEnv is one scenario's view of one implementation: the records, the write a
// scenario starts from that Records has not (claim), the clock, and ids of its own.
type contractEnv struct {
	Records
	claimFn func(t *testing.T, agentID, connID string) (tokenHash string)
	clock   *fakeClock
	// A is the agent, C1 the connection that owns it at the start, C2 another one.
	A, C1, C2 string
	// The observer records (contract_observers_test.go): the index, the connect's
	// write Records has not (Observe), the hash of each named observer token of A, and
	// the hash of the token each claim presented, by connection.
	idx       ObserverIndex
	observeFn func(t *testing.T, agentID, connID, tokenHash string, max int) (superseded connections.Owner)
	hashFn    func(t *testing.T, agentID, token string) string
	drivers   map[string]string
}

// claim makes connID the owner of agentID, as connections.Store.Claim does with a
// current token.
func (e *contractEnv) claim(t *testing.T, agentID, connID string) {
	t.Helper()
	if e.drivers == nil {
		e.drivers = map[string]string{}
	}
	e.drivers[connID] = e.claimFn(t, agentID, connID)
}

// ownerView is an ownership record as the rules see it; times are offsets from
// contractT0, 0 for none.
type ownerView struct {
	Lease     string
	Kind      connections.HolderKind
	Until     time.Duration
	Pending   bool
	PendingTo int64
	Sub, Next int64
	Hello     bool
	Released  string
	Watch     time.Duration
	Replies   int
}

func viewOf(o connections.Owner) ownerView {
	return ownerView{
		Lease: o.Lease, Kind: o.LeaseKind, Until: since(o.LeaseUntil), Pending: o.Pending, PendingTo: o.PendingTo,
		Sub: o.Sub, Next: o.Next, Hello: o.HelloSent, Released: o.Released, Watch: since(o.WatchUntil), Replies: len(o.Replies),
	}
}

// connView is a connection record as the closing rules see it.
type connView struct {
	State       connections.State
	Unwelcomed  bool
	HelloPosted bool
	Closer      string
	CloserUntil time.Duration
}

func connViewOf(c connections.Conn) connView {
	return connView{State: c.State, Unwelcomed: c.Unwelcomed, HelloPosted: c.HelloPosted, Closer: c.Closer, CloserUntil: since(c.CloserUntil)}
}

func since(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return t.Sub(contractT0)
}

// owner returns A's record as the rules see it.
func (e *contractEnv) owner(t *testing.T) ownerView {
	t.Helper()
	o, err := e.Owner(context.Background(), e.A)
	if err != nil {
		t.Fatalf("owner of %s: %v", e.A, err)
	}
	return viewOf(o)
}

// wantOwner fails unless A's record is want.
func (e *contractEnv) wantOwner(t *testing.T, want ownerView) {
	t.Helper()
	if got := e.owner(t); got != want {
		t.Fatalf("record = %+v\nwant     %+v", got, want)
	}
}

func (e *contractEnv) conn(t *testing.T, connID string) connView {
	t.Helper()
	c, err := e.Conn(context.Background(), connID)
	if err != nil {
		t.Fatalf("conn %s: %v", connID, err)
	}
	return connViewOf(c)
}

// acquire takes A's lease for h and wants outcome; it returns the record it got.
func (e *contractEnv) acquire(t *testing.T, h string, upTo int64, want connections.AcquireOutcome) connections.Owner {
	t.Helper()
	res, err := e.Acquire(context.Background(), e.A, holder(h), contractTTL, upTo)
	if err != nil || res.Outcome != want {
		t.Fatalf("acquire by %s up to %d = %v, %v; want %v", h, upTo, res.Outcome, err, want)
	}
	return res.Owner
}

// subscribe subscribes C1 from seq from, stamped stamp.
func (e *contractEnv) subscribe(t *testing.T, from int64, stamp string) connections.Owner {
	t.Helper()
	o, err := e.Subscribe(context.Background(), e.A, e.C1, connections.Subscription{From: from, Requested: from, Stamp: stamp})
	if err != nil {
		t.Fatalf("subscribe from %d: %v", from, err)
	}
	return o
}

func (e *contractEnv) mark(t *testing.T, upTo int64, want bool) {
	t.Helper()
	if done, err := e.MarkPending(context.Background(), e.A, upTo); err != nil || done != want {
		t.Fatalf("mark up to %d = %v, %v; want %v", upTo, done, err, want)
	}
}

func (e *contractEnv) release(t *testing.T, o connections.Owner, h string, p connections.Progress, want bool) connections.Owner {
	t.Helper()
	cur, released, err := e.Release(context.Background(), o, h, p)
	if err != nil || released != want {
		t.Fatalf("release by %s at %+v = %v, %v; want released %v", h, p, released, err, want)
	}
	return cur
}

func (e *contractEnv) claimWatch(t *testing.T, w string, until time.Duration, want bool) {
	t.Helper()
	if ok, err := e.ClaimWatch(context.Background(), e.A, w, contractT0.Add(until)); err != nil || ok != want {
		t.Fatalf("claim watch by %s until %v = %v, %v; want %v", w, until, ok, err, want)
	}
}

func (e *contractEnv) endWatch(t *testing.T, seen connections.Owner, w string, force, want bool) {
	t.Helper()
	if ok, err := e.EndWatch(context.Background(), seen, w, force); err != nil || ok != want {
		t.Fatalf("end watch by %s (force %v) = %v, %v; want %v", w, force, ok, err, want)
	}
}

func (e *contractEnv) takeClose(t *testing.T, connID, h string, posted, want bool) connView {
	t.Helper()
	c, taken, err := e.TakeClose(context.Background(), connID, h, contractTTL, posted)
	if err != nil || taken != want {
		t.Fatalf("take close of %s by %s = %v, %v; want %v", connID, h, taken, err, want)
	}
	return connViewOf(c)
}

// contractTTL is every scenario's lease and closing lease.
const contractTTL = 10 * time.Second

func holder(id string) connections.Holder {
	return connections.Holder{ID: id, Kind: connections.HolderOnce}
}

// wantErr fails unless err is target (nil: no error).
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if target == nil && err != nil || target != nil && !errors.Is(err, target) {
		t.Fatalf("%s: %v; want %v", what, err, target)
	}
}

// contractScenarios are the rules of the ownership and connection records, each a
// sequence of calls with the outcome every implementation must give.
var contractScenarios = []struct {
	name string
	run  func(t *testing.T, e *contractEnv)
}{
	// Acquire: the lease is live through its last millisecond (lease.Live).
	{"acquire free", func(t *testing.T, e *contractEnv) {
		e.acquire(t, "h1", -1, connections.Acquired)
		e.wantOwner(t, ownerView{Lease: "h1", Kind: connections.HolderOnce, Until: contractTTL})
	}},
	{"acquire under a live lease", func(t *testing.T, e *contractEnv) {
		e.acquire(t, "h1", -1, connections.Acquired)
		e.clock.advance(5 * time.Second)
		if o := e.acquire(t, "h2", -1, connections.LeaseHeld); o.Lease != "h1" {
			t.Fatalf("held by %q; want h1", o.Lease)
		}
		e.wantOwner(t, ownerView{Lease: "h1", Kind: connections.HolderOnce, Until: contractTTL})
	}},
	{"acquire at the lease's last millisecond", func(t *testing.T, e *contractEnv) {
		e.acquire(t, "h1", -1, connections.Acquired)
		e.clock.advance(contractTTL)
		e.acquire(t, "h2", -1, connections.LeaseHeld)
	}},
	{"acquire one millisecond after the lease ran out", func(t *testing.T, e *contractEnv) {
		e.acquire(t, "h1", -1, connections.Acquired)
		e.clock.advance(contractTTL + time.Millisecond)
		e.acquire(t, "h2", -1, connections.Acquired)
		e.wantOwner(t, ownerView{Lease: "h2", Kind: connections.HolderOnce, Until: 2*contractTTL + time.Millisecond})
	}},
	{"acquire with no owner", func(t *testing.T, e *contractEnv) {
		res, err := e.Acquire(context.Background(), e.A+"-none", holder("h1"), contractTTL, -1)
		if err != nil || res.Outcome != connections.NoOwner {
			t.Fatalf("acquire = %v, %v; want no owner", res.Outcome, err)
		}
	}},
	{"acquire after hello with no subscription", func(t *testing.T, e *contractEnv) {
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.release(t, o, "h1", connections.Progress{HelloSent: true}, true)
		e.acquire(t, "h2", -1, connections.NothingOwed)
		e.wantOwner(t, ownerView{Hello: true, Released: "h1"})
	}},
	{"acquire up to a seq the cursor passed", func(t *testing.T, e *contractEnv) {
		e.subscribe(t, 0, "1")
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.release(t, o, "h1", connections.Progress{Next: 5, HelloSent: true}, true)
		e.acquire(t, "h2", 4, connections.NothingOwed)
		e.acquire(t, "h2", 5, connections.Acquired)
		e.wantOwner(t, ownerView{Lease: "h2", Kind: connections.HolderOnce, Until: contractTTL, Sub: 1, Next: 5, Hello: true, Released: "h1"})
	}},
	{"acquire with a mark left after the cursor passed", func(t *testing.T, e *contractEnv) {
		e.subscribe(t, 0, "1")
		o := e.acquire(t, "h1", -1, connections.Acquired)
		o = e.release(t, o, "h1", connections.Progress{Next: 5, HelloSent: true}, true)
		e.subscribe(t, 5, "2") // a subscribe marks without a seq
		e.acquire(t, "h2", 4, connections.Acquired)
	}},

	// Checkpoint: progress under the lease; the holder named on the record writes.
	{"checkpoint by a holder whose lease was taken over", func(t *testing.T, e *contractEnv) {
		o1 := e.acquire(t, "h1", -1, connections.Acquired)
		e.clock.advance(contractTTL + time.Millisecond)
		o2 := e.acquire(t, "h2", -1, connections.Acquired)
		_, err := e.Checkpoint(context.Background(), o1, "h1", connections.Progress{Next: 3, HelloSent: true}, contractTTL)
		wantErr(t, "checkpoint by h1", err, connections.ErrLeaseLost)
		e.clock.advance(2 * time.Second)
		if _, err := e.Checkpoint(context.Background(), o2, "h2", connections.Progress{Next: 3, HelloSent: true}, contractTTL); err != nil {
			t.Fatalf("checkpoint by h2: %v", err)
		}
		e.wantOwner(t, ownerView{Lease: "h2", Kind: connections.HolderOnce, Until: 2*contractTTL + 2*time.Second + time.Millisecond, Next: 3, Hello: true})
	}},
	{"checkpoint by a holder whose lease ran out, not taken over", func(t *testing.T, e *contractEnv) {
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.clock.advance(contractTTL + time.Second)
		if _, err := e.Checkpoint(context.Background(), o, "h1", connections.Progress{Next: 2, HelloSent: true}, contractTTL); err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
		e.wantOwner(t, ownerView{Lease: "h1", Kind: connections.HolderOnce, Until: 2*contractTTL + time.Second, Next: 2, Hello: true})
	}},
	{"checkpoint keeps a mark", func(t *testing.T, e *contractEnv) {
		e.subscribe(t, 0, "1")
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.mark(t, 8, true)
		if _, err := e.Checkpoint(context.Background(), o, "h1", connections.Progress{Next: 2, HelloSent: true}, contractTTL); err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
		e.wantOwner(t, ownerView{Lease: "h1", Kind: connections.HolderOnce, Until: contractTTL, Pending: true, PendingTo: 9, Sub: 1, Next: 2, Hello: true})
	}},
	{"checkpoint adopts a resubscribe", func(t *testing.T, e *contractEnv) {
		e.subscribe(t, 0, "1")
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.subscribe(t, 3, "2")
		e.clock.advance(time.Second)
		cur, err := e.Checkpoint(context.Background(), o, "h1", connections.Progress{Next: 7, HelloSent: true}, contractTTL)
		want := ownerView{Lease: "h1", Kind: connections.HolderOnce, Until: contractTTL + time.Second, Sub: 2, Next: 3, Hello: true}
		if err != nil || viewOf(cur) != want {
			t.Fatalf("checkpoint = %+v, %v; want %+v", viewOf(cur), err, want)
		}
		e.wantOwner(t, want)
	}},

	// Release: lets go unless a mark asks the holder to look again.
	{"release leaving a mark with a seq", func(t *testing.T, e *contractEnv) {
		e.subscribe(t, 0, "1")
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.mark(t, 8, true)
		cur := e.release(t, o, "h1", connections.Progress{Next: 5, HelloSent: true}, false)
		want := ownerView{Lease: "h1", Kind: connections.HolderOnce, Until: contractTTL, Pending: true, PendingTo: 9, Sub: 1}
		if viewOf(cur) != want {
			t.Fatalf("release returned %+v; want %+v", viewOf(cur), want)
		}
		e.wantOwner(t, want) // the progress is not written: the holder sends on
		e.release(t, o, "h1", connections.Progress{Next: 9, HelloSent: true}, true)
		e.wantOwner(t, ownerView{Sub: 1, Next: 9, Hello: true, Released: "h1"})
	}},
	{"release clearing a mark without a seq", func(t *testing.T, e *contractEnv) {
		e.subscribe(t, 0, "1")
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.clock.advance(time.Second)
		e.mark(t, -1, true)
		e.release(t, o, "h1", connections.Progress{Next: 4, HelloSent: true}, false)
		e.wantOwner(t, ownerView{Lease: "h1", Kind: connections.HolderOnce, Until: time.Second + connections.DefaultLease, Sub: 1, Next: 4, Hello: true})
		e.release(t, o, "h1", connections.Progress{Next: 4, HelloSent: true}, true)
		e.wantOwner(t, ownerView{Sub: 1, Next: 4, Hello: true, Released: "h1"})
	}},
	{"release unsubscribed past a mark with a seq", func(t *testing.T, e *contractEnv) {
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.mark(t, 8, true)
		e.release(t, o, "h1", connections.Progress{HelloSent: true}, true)
		e.wantOwner(t, ownerView{Hello: true, Released: "h1"})
	}},
	{"release by a holder whose lease was taken over", func(t *testing.T, e *contractEnv) {
		o1 := e.acquire(t, "h1", -1, connections.Acquired)
		e.clock.advance(contractTTL + time.Millisecond)
		e.acquire(t, "h2", -1, connections.Acquired)
		_, released, err := e.Release(context.Background(), o1, "h1", connections.Progress{Next: 1})
		wantErr(t, "release by h1", err, connections.ErrLeaseLost)
		if released {
			t.Fatal("released by a holder that lost the lease")
		}
	}},

	// MarkPending: only with a live holder, and the seq only grows.
	{"mark without a holder", func(t *testing.T, e *contractEnv) {
		e.mark(t, 3, false)
		e.mark(t, -1, false)
		e.wantOwner(t, ownerView{})
	}},
	{"mark with a holder, the seq only grows", func(t *testing.T, e *contractEnv) {
		e.subscribe(t, 0, "1")
		e.acquire(t, "h1", -1, connections.Acquired)
		for _, step := range []struct{ upTo, to int64 }{{8, 9}, {5, 9}, {12, 13}, {-1, 0}, {20, 0}} {
			e.mark(t, step.upTo, true)
			if v := e.owner(t); !v.Pending || v.PendingTo != step.to {
				t.Fatalf("after a mark up to %d: pending %v to %d; want to %d", step.upTo, v.Pending, v.PendingTo, step.to)
			}
		}
	}},
	{"mark for events already sent", func(t *testing.T, e *contractEnv) {
		e.subscribe(t, 0, "1")
		o := e.acquire(t, "h1", -1, connections.Acquired)
		if _, err := e.Checkpoint(context.Background(), o, "h1", connections.Progress{Next: 6, HelloSent: true}, contractTTL); err != nil {
			t.Fatal(err)
		}
		e.mark(t, 4, true)
		if v := e.owner(t); v.Pending {
			t.Fatalf("marked for events sent: %+v", v)
		}
	}},
	{"mark at the lease's last millisecond and after", func(t *testing.T, e *contractEnv) {
		e.acquire(t, "h1", -1, connections.Acquired)
		e.clock.advance(contractTTL)
		e.mark(t, -1, true)
		e.clock.advance(time.Millisecond)
		e.mark(t, 3, false)
	}},
	{"mark after the holder let go past it", func(t *testing.T, e *contractEnv) {
		e.subscribe(t, 0, "1")
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.release(t, o, "h1", connections.Progress{Next: 5, HelloSent: true}, true)
		e.mark(t, 4, true)  // nothing owed: Acquire would find the same
		e.mark(t, 5, false) // owed: try the lease
		e.mark(t, -1, false)
		e.wantOwner(t, ownerView{Sub: 1, Next: 5, Hello: true, Released: "h1"})
	}},

	// Abandon: lets go whatever the mark, and records who let go.
	{"abandon with a mark", func(t *testing.T, e *contractEnv) {
		e.subscribe(t, 0, "1")
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.mark(t, -1, true)
		wantErr(t, "abandon", e.Abandon(context.Background(), o, "h1", connections.Progress{Next: 3, HelloSent: true}), nil)
		e.wantOwner(t, ownerView{Pending: true, Sub: 1, Next: 3, Hello: true, Released: "h1"})
	}},
	{"abandon after a resubscribe", func(t *testing.T, e *contractEnv) {
		e.subscribe(t, 0, "1")
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.subscribe(t, 7, "2")
		wantErr(t, "abandon", e.Abandon(context.Background(), o, "h1", connections.Progress{Next: 3, HelloSent: true}), nil)
		e.wantOwner(t, ownerView{Pending: true, Sub: 2, Next: 7, Released: "h1"})
	}},
	{"abandon by a holder whose lease was taken over", func(t *testing.T, e *contractEnv) {
		o1 := e.acquire(t, "h1", -1, connections.Acquired)
		e.clock.advance(contractTTL + time.Millisecond)
		e.acquire(t, "h2", -1, connections.Acquired)
		wantErr(t, "abandon", e.Abandon(context.Background(), o1, "h1", connections.Progress{Next: 3, HelloSent: true}), nil)
		e.wantOwner(t, ownerView{Lease: "h2", Kind: connections.HolderOnce, Until: 2*contractTTL + time.Millisecond})
	}},

	// The watcher's claim: live through its last millisecond; its holder extends it.
	{"watch claim live, by its holder, at its end and after", func(t *testing.T, e *contractEnv) {
		e.claimWatch(t, "w1", 5*time.Second, true)
		e.claimWatch(t, "w2", 20*time.Second, false)
		e.clock.advance(5 * time.Second)
		e.claimWatch(t, "w2", 20*time.Second, false)
		e.claimWatch(t, "w1", 8*time.Second, true)
		if v := e.owner(t); v.Watch != 8*time.Second {
			t.Fatalf("claim until %v; want 8s", v.Watch)
		}
		e.clock.advance(3*time.Second + time.Millisecond)
		e.claimWatch(t, "w2", 20*time.Second, true)
		if v := e.owner(t); v.Watch != 20*time.Second {
			t.Fatalf("claim until %v; want 20s", v.Watch)
		}
		if ok, err := e.ClaimWatch(context.Background(), e.A+"-none", "w1", contractT0.Add(time.Minute)); ok || err != nil {
			t.Fatalf("claim watch with no record = %v, %v; want false", ok, err)
		}
	}},
	{"end watch unforced on a settled record", func(t *testing.T, e *contractEnv) {
		e.claimWatch(t, "w1", 5*time.Second, true)
		seen, _ := e.Owner(context.Background(), e.A)
		e.endWatch(t, seen, "w2", true, true) // not w2's: nothing to end
		if v := e.owner(t); v.Watch != 5*time.Second {
			t.Fatalf("claim until %v after another watcher's end; want 5s", v.Watch)
		}
		e.endWatch(t, seen, "w1", false, true)
		e.wantOwner(t, ownerView{})
		e.claimWatch(t, "w2", 5*time.Second, true)
	}},
	{"end watch unforced on a moved record", func(t *testing.T, e *contractEnv) {
		e.claimWatch(t, "w1", 5*time.Second, true)
		seen, _ := e.Owner(context.Background(), e.A)
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.endWatch(t, seen, "w1", false, false) // leased
		e.release(t, o, "h1", connections.Progress{HelloSent: true}, true)
		e.endWatch(t, seen, "w1", false, false) // let go since the look
		if v := e.owner(t); v.Watch != 5*time.Second {
			t.Fatalf("claim until %v; want kept, 5s", v.Watch)
		}
		seen, _ = e.Owner(context.Background(), e.A)
		e.endWatch(t, seen, "w1", false, true)
		if v := e.owner(t); v.Watch != 0 {
			t.Fatalf("claim until %v; want none", v.Watch)
		}
	}},
	{"end watch forced on a marked record", func(t *testing.T, e *contractEnv) {
		e.claimWatch(t, "w1", 5*time.Second, true)
		e.subscribe(t, 0, "1") // marks
		seen, _ := e.Owner(context.Background(), e.A)
		e.endWatch(t, seen, "w1", false, false)
		e.endWatch(t, seen, "w1", true, true)
		if v := e.owner(t); v.Watch != 0 {
			t.Fatalf("claim until %v; want none", v.Watch)
		}
	}},

	// Subscribe: the owner only; the latest stamp stays in force.
	{"subscribe by owner and stamp", func(t *testing.T, e *contractEnv) {
		_, err := e.Subscribe(context.Background(), e.A, e.C2, connections.Subscription{Stamp: "5"})
		wantErr(t, "subscribe by a non-owner", err, connections.ErrNotOwner)
		_, err = e.Subscribe(context.Background(), e.A+"-none", e.C1, connections.Subscription{Stamp: "5"})
		wantErr(t, "subscribe with no record", err, connections.ErrNotOwner)
		e.subscribe(t, 4, "5")
		_, err = e.Subscribe(context.Background(), e.A, e.C1, connections.Subscription{From: 9, Stamp: "3"})
		wantErr(t, "subscribe stamped earlier", err, connections.ErrSuperseded)
		e.wantOwner(t, ownerView{Pending: true, Sub: 1, Next: 4})
		e.subscribe(t, 2, "5")
		e.wantOwner(t, ownerView{Pending: true, Sub: 2, Next: 2})
	}},

	// Replies owed before hello.
	{"replies taken in order, once", func(t *testing.T, e *contractEnv) {
		ctx := context.Background()
		owed := []connections.Reply{{Frame: []byte("r1")}, {Frame: []byte("r2")}, {Frame: []byte("r3"), Close: "internal"}}
		for _, r := range owed {
			wantErr(t, "owe "+string(r.Frame), e.OweReply(ctx, e.A, e.C1, r), nil)
		}
		wantErr(t, "owe to a non-owner", e.OweReply(ctx, e.A, e.C2, connections.Reply{Frame: []byte("x")}), connections.ErrNotOwner)
		if got, err := e.TakeReplies(ctx, e.A, e.C2); err != nil || len(got) != 0 {
			t.Fatalf("take by a non-owner = %q, %v; want none", got, err)
		}
		got, err := e.TakeReplies(ctx, e.A, e.C1)
		if err != nil || !slices.EqualFunc(got, owed, func(a, b connections.Reply) bool { return string(a.Frame) == string(b.Frame) && a.Close == b.Close }) {
			t.Fatalf("take = %q, %v; want r1 r2 r3, r3 closing with internal", got, err)
		}
		if got, err := e.TakeReplies(ctx, e.A, e.C1); err != nil || len(got) != 0 {
			t.Fatalf("second take = %q, %v; want none", got, err)
		}
	}},
	{"replies bounded, and refused once hello is recorded", func(t *testing.T, e *contractEnv) {
		ctx := context.Background()
		for i := range connections.MaxReplies {
			wantErr(t, fmt.Sprint("owe ", i), e.OweReply(ctx, e.A, e.C1, connections.Reply{Frame: []byte("r")}), nil)
		}
		wantErr(t, "owe past the bound", e.OweReply(ctx, e.A, e.C1, connections.Reply{Frame: []byte("r")}), connections.ErrRepliesFull)
		if v := e.owner(t); v.Replies != connections.MaxReplies {
			t.Fatalf("%d replies owed; want %d", v.Replies, connections.MaxReplies)
		}
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.release(t, o, "h1", connections.Progress{HelloSent: true}, true)
		wantErr(t, "owe after hello", e.OweReply(ctx, e.A, e.C1, connections.Reply{Frame: []byte("r")}), connections.ErrHelloSent)
	}},

	// Closing a connection superseded before its hello: one closer at a time.
	{"take close once", func(t *testing.T, e *contractEnv) {
		e.acquire(t, "h1", -1, connections.Acquired)
		e.claim(t, e.A, e.C2) // supersedes C1 before its hello: the sender's lease closes it
		want := connView{State: connections.StateSuperseded, Unwelcomed: true, Closer: "h1", CloserUntil: contractTTL}
		if got := e.conn(t, e.C1); got != want {
			t.Fatalf("superseded = %+v\nwant %+v", got, want)
		}
		if got := e.takeClose(t, e.C1, "h2", false, false); got != want {
			t.Fatalf("refused take returned %+v; want %+v", got, want)
		}
		e.clock.advance(time.Second)
		want = connView{State: connections.StateSuperseded, Unwelcomed: true, HelloPosted: true, Closer: "h1", CloserUntil: contractTTL + time.Second}
		if got := e.takeClose(t, e.C1, "h1", true, true); got != want {
			t.Fatalf("taken = %+v\nwant %+v", got, want)
		}
		wantErr(t, "clear owed by h2", e.ClearOwed(context.Background(), e.C1, "h2"), connections.ErrLeaseLost)
		wantErr(t, "clear owed by h1", e.ClearOwed(context.Background(), e.C1, "h1"), nil)
		if got := e.takeClose(t, e.C1, "h1", false, false); got != (connView{State: connections.StateSuperseded}) {
			t.Fatalf("after settling: %+v; want nothing owed", got)
		}
		wantErr(t, "clear owed again", e.ClearOwed(context.Background(), e.C1, "h1"), connections.ErrLeaseLost)
		_, _, err := e.TakeClose(context.Background(), e.C1+"-none", "h1", contractTTL, false)
		wantErr(t, "take close with no record", err, connections.ErrNotFound)
	}},
	{"take close at the closer's last millisecond and after", func(t *testing.T, e *contractEnv) {
		e.acquire(t, "h1", -1, connections.Acquired)
		e.claim(t, e.A, e.C2)
		e.clock.advance(contractTTL)
		e.takeClose(t, e.C1, "h2", false, false)
		e.clock.advance(time.Millisecond)
		want := connView{State: connections.StateSuperseded, Unwelcomed: true, Closer: "h2", CloserUntil: 2*contractTTL + time.Millisecond}
		if got := e.takeClose(t, e.C1, "h2", false, true); got != want {
			t.Fatalf("taken = %+v\nwant %+v", got, want)
		}
	}},
	{"superseded with no sender, before hello", func(t *testing.T, e *contractEnv) {
		e.claim(t, e.A, e.C2)
		if got := e.takeClose(t, e.C1, "h2", false, true); got.Closer != "h2" || !got.Unwelcomed {
			t.Fatalf("taken = %+v; want closed by h2", got)
		}
	}},
	{"superseded after hello", func(t *testing.T, e *contractEnv) {
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.release(t, o, "h1", connections.Progress{HelloSent: true}, true)
		e.claim(t, e.A, e.C2)
		if got := e.takeClose(t, e.C1, "h2", false, false); got != (connView{State: connections.StateSuperseded}) {
			t.Fatalf("superseded after hello: %+v; want nothing owed", got)
		}
		e.wantOwner(t, ownerView{}) // a fresh record for C2
	}},

	// Delivery's own lease checks read the records' clock (Records.Now), so that they
	// agree with the store's conditions to the millisecond.
	{"a wake-up meets a lease at its last millisecond: it marks and does not try the lease", func(t *testing.T, e *contractEnv) {
		e.subscribe(t, 0, "1")
		o := e.acquire(t, "h1", -1, connections.Acquired)
		e.release(t, o, "h1", connections.Progress{HelloSent: true}, true)
		e.acquire(t, "h2", 3, connections.Acquired)
		e.clock.advance(contractTTL)
		rec := &acquireCount{Records: e.Records}
		d := newDeliverer(Config{Logger: discardLogger()}, nil, rec, nil, nil, nil)
		// Not a backstop: a fast-path wake-up, which marks and returns.
		if _, err := d.pump(context.Background(), e.A, []sessionlog.Event{{Seq: 3}}, wake{preRead: true}); err != nil {
			t.Fatalf("pump: %v", err)
		}
		if rec.n.Load() != 0 {
			t.Fatalf("%d acquires; want none: the lease is live through its last millisecond", rec.n.Load())
		}
		e.wantOwner(t, ownerView{Lease: "h2", Kind: connections.HolderOnce, Until: contractTTL, Pending: true, PendingTo: 4, Sub: 1, Hello: true, Released: "h1"})
	}},
	{"a retried holder at its lease's last millisecond needs no watcher", func(t *testing.T, e *contractEnv) {
		e.subscribe(t, 0, "1")
		res, err := e.Acquire(context.Background(), e.A, connections.Holder{ID: "r1", Kind: connections.HolderRetried}, contractTTL, -1)
		if err != nil || res.Outcome != connections.Acquired {
			t.Fatalf("acquire = %v, %v", res.Outcome, err)
		}
		e.mark(t, 3, true)
		e.clock.advance(contractTTL)
		o, err := e.Owner(context.Background(), e.A)
		if err != nil {
			t.Fatal(err)
		}
		// No invoker: a watcher's kick would fail the call.
		d := newDeliverer(Config{Logger: discardLogger()}, nil, e.Records, nil, nil, nil)
		if err := d.watch(context.Background(), o, 3, nil); err != nil {
			t.Fatalf("watch: %v; want none needed (covered)", err)
		}
		e.wantOwner(t, ownerView{Lease: "r1", Kind: connections.HolderRetried, Until: contractTTL, Pending: true, PendingTo: 4, Sub: 1})
	}},

	// The records' lifetime.
	{"set state, disown, forget", func(t *testing.T, e *contractEnv) {
		ctx := context.Background()
		wantErr(t, "set state", e.SetState(ctx, e.C1, connections.StateLagged), nil)
		if got := e.conn(t, e.C1); got.State != connections.StateLagged {
			t.Fatalf("state %q; want lagged", got.State)
		}
		wantErr(t, "set state with no record", e.SetState(ctx, e.C2, connections.StateLagged), nil)
		_, err := e.Conn(ctx, e.C2)
		wantErr(t, "conn with no record", err, connections.ErrNotFound)
		wantErr(t, "disown by a non-owner", e.Disown(ctx, e.A, e.C2), nil)
		e.wantOwner(t, ownerView{})
		wantErr(t, "disown", e.Disown(ctx, e.A, e.C1), nil)
		_, err = e.Owner(ctx, e.A)
		wantErr(t, "owner after disown", err, connections.ErrNotFound)
		e.claim(t, e.A, e.C1)
		wantErr(t, "forget", e.Forget(ctx, e.C1, e.A), nil)
		_, err = e.Owner(ctx, e.A)
		wantErr(t, "owner after forget", err, connections.ErrNotFound)
		_, err = e.Conn(ctx, e.C1)
		wantErr(t, "conn after forget", err, connections.ErrNotFound)
	}},
}

// acquireCount counts the lease acquires made through it.
type acquireCount struct {
	Records
	n atomic.Int64
}

func (r *acquireCount) Acquire(ctx context.Context, agentID string, h connections.Holder, ttl time.Duration, upTo int64) (connections.AcquireResult, error) {
	r.n.Add(1)
	return r.Records.Acquire(ctx, agentID, h, ttl, upTo)
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// contractImpls open one scenario's records on clock: the double, and the store on
// DynamoDB Local (its tables made once per run, each scenario on ids of its own).
var contractImpls = []struct {
	name  string
	setup func(t *testing.T) func(t *testing.T, clock *fakeClock) *contractEnv
}{
	{"memory", func(*testing.T) func(*testing.T, *fakeClock) *contractEnv {
		return func(_ *testing.T, clock *fakeClock) *contractEnv {
			m := newMemRecordsAt(clock.Now)
			return &contractEnv{Records: m, clock: clock, idx: m,
				claimFn: func(_ *testing.T, a, c string) string {
					h := "driver-" + c
					m.claimWith(a, c, h)
					return h
				},
				observeFn: func(_ *testing.T, a, c, h string, max int) connections.Owner { return m.observe(a, c, h, max) },
				hashFn:    func(_ *testing.T, a, tok string) string { return a + "-" + tok },
			}
		}
	}},
	{"dynamodb", func(t *testing.T) func(*testing.T, *fakeClock) *contractEnv {
		table := dynamotest.CreateTables(t)["ConnectionsTable"]
		db := dynamotest.Client(t)
		return func(_ *testing.T, clock *fakeClock) *contractEnv {
			st := connections.NewWithClock(db, table, clock.Now)
			tokens := auth.New(db, table).WithClock(clock.Now)
			claim := func(t *testing.T, a, c string) string {
				t.Helper()
				ctx := context.Background()
				tok, err := tokens.Create(ctx, a)
				if err != nil {
					t.Fatalf("token for %s: %v", a, err)
				}
				h := auth.Hash(tok)
				if _, err := st.Claim(ctx, a, c, h, tokens.Condition(a, h).ConditionCheck); err != nil {
					t.Fatalf("claim %s for %s: %v", a, c, err)
				}
				return h
			}
			observe := func(t *testing.T, a, c, h string, max int) connections.Owner {
				t.Helper()
				prev, err := st.Observe(context.Background(), a, c, h, tokens.Condition(a, h).ConditionCheck, max)
				if err != nil {
					t.Fatalf("observe %s for %s: %v", a, c, err)
				}
				return prev
			}
			// Each named observer token is created once, with the observer role.
			var mu sync.Mutex
			hashes := map[string]string{}
			hash := func(t *testing.T, a, name string) string {
				t.Helper()
				mu.Lock()
				defer mu.Unlock()
				if h, ok := hashes[a+"/"+name]; ok {
					return h
				}
				tok, err := tokens.CreateRole(context.Background(), a, 0, auth.RoleObserver)
				if err != nil {
					t.Fatalf("observer token %s for %s: %v", name, a, err)
				}
				hashes[a+"/"+name] = auth.Hash(tok)
				return auth.Hash(tok)
			}
			return &contractEnv{Records: st, claimFn: claim, clock: clock, idx: st, observeFn: observe, hashFn: hash}
		}
	}},
}

// TestRecordsContract runs every scenario — the ownership and connection records', then
// the observer seats' (contract_observers_test.go) — against every implementation of
// Records.
func TestRecordsContract(t *testing.T) {
	t.Parallel()
	for _, impl := range contractImpls {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			open := impl.setup(t)
			for i, sc := range slices.Concat(contractScenarios, observerScenarios) {
				t.Run(sc.name, func(t *testing.T) {
					t.Parallel()
					e := open(t, &fakeClock{now: contractT0})
					e.A, e.C1, e.C2 = fmt.Sprintf("a%d", i), fmt.Sprintf("c%d-1", i), fmt.Sprintf("c%d-2", i)
					e.claim(t, e.A, e.C1)
					sc.run(t, e)
				})
			}
		})
	}
}
