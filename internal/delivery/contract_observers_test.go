package delivery

// The observer seats in the contract suite (contract_test.go): each observer connection
// has a seat of its own beside the ownership record (connections.ObserverSeat), found
// through the agent's observer index (ObserverIndex). These scenarios hold the double
// (memory_observers_test.go) to connections.Store on DynamoDB Local for the seats'
// rules: up to max observers, the oldest superseded by one more; the driver and the
// observers never supersede one another; a seat has its own cursor, lease, mark and
// watch; an observer that leaves takes its seat and entry; and a reset, a revoked
// token and a deleted agent reach every observer they concern.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/terret/terret-ws/internal/connections"
)

// obsConn is the id of the scenario's observer connection i.
func (e *contractEnv) obsConn(i int) string { return fmt.Sprintf("%s-o%d", e.C1, i) }

// obsSeat is the seat key of the scenario's observer connection i.
func (e *contractEnv) obsSeat(i int) string { return connections.ObserverSeat(e.A, e.obsConn(i)) }

// observe connects observer i to A with the named observer token, up to max observers,
// and wants superseded to be the observer connection it superseded ("" for none).
func (e *contractEnv) observe(t *testing.T, i int, token string, max int, superseded string) connections.Owner {
	t.Helper()
	prev := e.observeFn(t, e.A, e.obsConn(i), e.hashFn(t, e.A, token), max)
	if prev.ConnID != superseded {
		t.Fatalf("observer %s superseded %q; want %q", e.obsConn(i), prev.ConnID, superseded)
	}
	if prev.ConnID != "" && (!prev.Observer || prev.AgentID != e.A) {
		t.Fatalf("observer %s superseded %+v; want an observer's seat on %s", e.obsConn(i), prev, e.A)
	}
	return prev
}

// wantObservers fails unless A's observer index lists exactly the observers want, oldest
// first, each with the hash of its token, connected at its offset from contractT0.
func (e *contractEnv) wantObservers(t *testing.T, want ...obsWant) {
	t.Helper()
	got, err := e.idx.Observers(context.Background(), e.A)
	if err != nil {
		t.Fatalf("observers of %s: %v", e.A, err)
	}
	var gv, wv []obsEntry
	for _, o := range got {
		gv = append(gv, obsEntry{o.ConnID, o.TokenHash, since(o.ConnectedAt)})
	}
	for _, w := range want {
		wv = append(wv, obsEntry{e.obsConn(w.i), e.hashFn(t, e.A, w.token), w.at})
	}
	if !slices.Equal(gv, wv) {
		t.Fatalf("observers = %+v\nwant        %+v", gv, wv)
	}
}

// obsEntry is an entry of the observer index as a scenario names it (i, token) and as
// it is read (conn, hash); at is its connected time's offset from contractT0.
type obsEntry struct {
	conn, hash string
	at         time.Duration
}

// obsWant is an entry a scenario wants listed: observer i, with the named token,
// connected at offset at from contractT0.
type obsWant struct {
	i     int
	token string
	at    time.Duration
}

func entry(i int, token string, at time.Duration) obsWant { return obsWant{i, token, at} }

// seatView is an observer's seat as the rules see it, with whose it is.
type seatView struct {
	ownerView
	ConnID, AgentID, TokenHash string
	Observer                   bool
}

// seat returns observer i's seat, failing if it has none.
func (e *contractEnv) seat(t *testing.T, i int) seatView {
	t.Helper()
	o, err := e.Owner(context.Background(), e.obsSeat(i))
	if err != nil {
		t.Fatalf("seat of %s: %v", e.obsConn(i), err)
	}
	return seatView{viewOf(o), o.ConnID, o.AgentID, o.TokenHash, o.Observer}
}

// wantSeat fails unless observer i's seat is want, that of i, with the hash of token.
func (e *contractEnv) wantSeat(t *testing.T, i int, token string, want ownerView) {
	t.Helper()
	w := seatView{want, e.obsConn(i), e.A, e.hashFn(t, e.A, token), true}
	if got := e.seat(t, i); got != w {
		t.Fatalf("seat of %s = %+v\nwant %+v", e.obsConn(i), got, w)
	}
}

// wantNoSeat fails unless observer i has no seat.
func (e *contractEnv) wantNoSeat(t *testing.T, i int) {
	t.Helper()
	if o, err := e.Owner(context.Background(), e.obsSeat(i)); !errors.Is(err, connections.ErrNotFound) {
		t.Fatalf("seat of %s = %+v, %v; want none", e.obsConn(i), o, err)
	}
}

// wantConn fails unless connID's record is want and has role.
func (e *contractEnv) wantConn(t *testing.T, connID, role string, want connView) {
	t.Helper()
	c, err := e.Conn(context.Background(), connID)
	if err != nil {
		t.Fatalf("conn %s: %v", connID, err)
	}
	if got := connViewOf(c); got != want || c.Role != role || c.AgentID != e.A {
		t.Fatalf("conn %s = %+v (role %q, agent %q)\nwant %+v (role %q, agent %q)", connID, got, c.Role, c.AgentID, want, role, e.A)
	}
}

var authorized = connView{State: connections.StateAuthorized}

// welcomeSeat takes observer i's seat lease, posts nothing and lets go with hello
// recorded: what a sender does for an observer that has not subscribed yet.
func (e *contractEnv) welcomeSeat(t *testing.T, i int) {
	t.Helper()
	res, err := e.Acquire(context.Background(), e.obsSeat(i), holder("hello"), contractTTL, -1)
	if err != nil || res.Outcome != connections.Acquired {
		t.Fatalf("acquire the seat of %s = %v, %v", e.obsConn(i), res.Outcome, err)
	}
	if _, ok, err := e.Release(context.Background(), res.Owner, "hello", connections.Progress{HelloSent: true}); err != nil || !ok {
		t.Fatalf("release the seat of %s = %v, %v", e.obsConn(i), ok, err)
	}
}

// closer is a Deliverer over the scenario's records posting to socket, for the rules
// that close connections (reset, revocation).
func (e *contractEnv) closer(socket *memSocket) *Deliverer {
	return newDeliverer(Config{Logger: discardLogger()}, nil, e.Records, nil, socket, nil)
}

// tokenRecord is the token item's stream record of a change from the hashes before to
// those after (nil: the item deleted).
func tokenRecord(before, after []string) events.DynamoDBEventRecord {
	img := func(hs []string) map[string]events.DynamoDBAttributeValue {
		if hs == nil {
			return nil
		}
		m := map[string]events.DynamoDBAttributeValue{}
		for _, h := range hs {
			m[h] = events.NewStringAttribute("x")
		}
		return map[string]events.DynamoDBAttributeValue{"hashes": events.NewMapAttribute(m)}
	}
	return events.DynamoDBEventRecord{Change: events.DynamoDBStreamRecord{OldImage: img(before), NewImage: img(after)}}
}

// wantClosed fails unless socket was sent exactly one error frame per connection of
// conns and deleted exactly them, in any order.
func wantClosed(t *testing.T, socket *memSocket, conns ...string) {
	t.Helper()
	for _, c := range conns {
		if got := socket.seen(t, c); !slices.Equal(got, []string{"error"}) {
			t.Fatalf("frames to %s = %v; want one error frame", c, got)
		}
	}
	socket.mu.Lock()
	deleted := slices.Sorted(slices.Values(socket.deleted))
	posted := len(socket.frames)
	socket.mu.Unlock()
	want := slices.Sorted(slices.Values(conns))
	if !slices.Equal(deleted, want) || posted != len(conns) {
		t.Fatalf("deleted %v, %d connections posted to; want %v deleted, each posted to", deleted, posted, want)
	}
}

// observerScenarios are the rules of the observer seats and their index, run by
// TestRecordsContract after contractScenarios. In each, C1 owns A at the start.
var observerScenarios = []struct {
	name string
	run  func(t *testing.T, e *contractEnv)
}{
	{"observers take seats up to the bound, beside the ownership record", func(t *testing.T, e *contractEnv) {
		for i := range 3 {
			e.observe(t, i, "t1", 3, "")
			e.clock.advance(time.Millisecond) // connected_at is in ms: the order is the connects'
		}
		e.wantObservers(t, entry(0, "t1", 0), entry(1, "t1", time.Millisecond), entry(2, "t1", 2*time.Millisecond))
		for i := range 3 {
			e.wantSeat(t, i, "t1", ownerView{})
			e.wantConn(t, e.obsConn(i), connections.RoleObserver, authorized)
			c, _ := e.Conn(context.Background(), e.obsConn(i))
			if c.Key() != e.obsSeat(i) || c.TokenHash != e.hashFn(t, e.A, "t1") {
				t.Fatalf("conn %s: key %q, hash %q; want its seat, t1's hash", c.ID, c.Key(), c.TokenHash)
			}
		}
		e.wantOwner(t, ownerView{})
		e.wantConn(t, e.C1, "", authorized)
		read, err := e.idx.Seats(context.Background(), []string{e.A, e.obsSeat(0), e.obsSeat(2), e.obsSeat(9)})
		if err != nil {
			t.Fatalf("seats: %v", err)
		}
		if len(read) != 3 || read[e.A].ConnID != e.C1 || read[e.A].Observer || read[e.obsSeat(0)].ConnID != e.obsConn(0) ||
			!read[e.obsSeat(2)].Observer || read[e.obsSeat(2)].Key() != e.obsSeat(2) {
			t.Fatalf("seats = %+v; want the driver's, o0's and o2's, o9 missing", read)
		}
	}},
	{"one more observer supersedes the oldest, closed as a superseded driver is", func(t *testing.T, e *contractEnv) {
		ctx := context.Background()
		// o0 is being sent its hello by h1; o1 was sent its hello.
		e.observe(t, 0, "t1", 2, "")
		if _, err := e.Subscribe(ctx, e.obsSeat(0), e.obsConn(0), connections.Subscription{From: 0, Stamp: "1"}); err != nil {
			t.Fatalf("subscribe o0: %v", err)
		}
		res, err := e.Acquire(ctx, e.obsSeat(0), holder("h1"), contractTTL, -1)
		if err != nil || res.Outcome != connections.Acquired {
			t.Fatalf("acquire o0's seat = %v, %v", res.Outcome, err)
		}
		e.clock.advance(time.Millisecond)
		e.observe(t, 1, "t2", 2, "")
		e.welcomeSeat(t, 1)
		e.clock.advance(time.Millisecond)

		prev := e.observe(t, 2, "t1", 2, e.obsConn(0))
		want := ownerView{Lease: "h1", Kind: connections.HolderOnce, Until: contractTTL, Sub: 1}
		if got := viewOf(prev); got != want {
			t.Fatalf("superseded seat = %+v\nwant %+v", got, want)
		}
		e.wantNoSeat(t, 0)
		e.wantConn(t, e.obsConn(0), connections.RoleObserver,
			connView{State: connections.StateSuperseded, Unwelcomed: true, Closer: "h1", CloserUntil: contractTTL})
		e.takeClose(t, e.obsConn(0), "h2", false, false) // h1 closes it, hello first
		e.wantObservers(t, entry(1, "t2", time.Millisecond), entry(2, "t1", 2*time.Millisecond))

		e.clock.advance(time.Millisecond)
		e.observe(t, 3, "t1", 2, e.obsConn(1))
		e.wantNoSeat(t, 1)
		e.wantConn(t, e.obsConn(1), connections.RoleObserver, connView{State: connections.StateSuperseded}) // hello went out: dropped at once
		e.wantObservers(t, entry(2, "t1", 2*time.Millisecond), entry(3, "t1", 3*time.Millisecond))

		// Never the driver.
		e.wantOwner(t, ownerView{})
		e.wantConn(t, e.C1, "", authorized)
	}},
	{"a lowered bound supersedes the oldest only, and every listed observer keeps its seat", func(t *testing.T, e *contractEnv) {
		for i := range 3 {
			e.observe(t, i, "t1", 3, "")
			e.welcomeSeat(t, i)
			e.clock.advance(time.Millisecond)
		}
		// The bound is lowered to 1 with three connected: one connect supersedes one.
		e.observe(t, 3, "t1", 1, e.obsConn(0))
		e.wantNoSeat(t, 0)
		e.wantObservers(t, entry(1, "t1", time.Millisecond), entry(2, "t1", 2*time.Millisecond), entry(3, "t1", 3*time.Millisecond))
		for _, i := range []int{1, 2, 3} {
			e.wantConn(t, e.obsConn(i), connections.RoleObserver, authorized)
			if _, err := e.Owner(context.Background(), e.obsSeat(i)); err != nil {
				t.Fatalf("seat of listed observer %s: %v", e.obsConn(i), err)
			}
		}
		e.clock.advance(time.Millisecond)
		e.observe(t, 4, "t1", 1, e.obsConn(1))
		e.wantObservers(t, entry(2, "t1", 2*time.Millisecond), entry(3, "t1", 3*time.Millisecond), entry(4, "t1", 4*time.Millisecond))
	}},
	{"an observer superseded before its hello with no sender: any closer takes it, once", func(t *testing.T, e *contractEnv) {
		e.observe(t, 0, "t1", 1, "")
		e.clock.advance(time.Millisecond)
		if prev := e.observe(t, 1, "t1", 1, e.obsConn(0)); viewOf(prev) != (ownerView{}) {
			t.Fatalf("superseded seat = %+v; want as connected", viewOf(prev))
		}
		want := connView{State: connections.StateSuperseded, Unwelcomed: true, HelloPosted: true, Closer: "h2", CloserUntil: time.Millisecond + contractTTL}
		if got := e.takeClose(t, e.obsConn(0), "h2", true, true); got != want {
			t.Fatalf("taken = %+v\nwant %+v", got, want)
		}
		e.takeClose(t, e.obsConn(0), "h3", false, false)
		wantErr(t, "clear owed by h2", e.ClearOwed(context.Background(), e.obsConn(0), "h2"), nil)
		e.wantConn(t, e.obsConn(0), connections.RoleObserver, connView{State: connections.StateSuperseded})
		e.wantObservers(t, entry(1, "t1", time.Millisecond))
	}},
	{"the driver's claim supersedes no observer", func(t *testing.T, e *contractEnv) {
		e.observe(t, 0, "t1", 0, "")
		e.welcomeSeat(t, 0)
		e.claim(t, e.A, e.C2)
		e.wantConn(t, e.C1, "", connView{State: connections.StateSuperseded, Unwelcomed: true})
		e.wantConn(t, e.obsConn(0), connections.RoleObserver, authorized)
		e.wantSeat(t, 0, "t1", ownerView{Hello: true, Released: "hello"})
		e.wantObservers(t, entry(0, "t1", 0))
		if o, err := e.Owner(context.Background(), e.A); err != nil || o.ConnID != e.C2 {
			t.Fatalf("owner = %+v, %v; want %s", o, err, e.C2)
		}
	}},
	{"an observer's seat has its own subscription, cursor, lease and mark", func(t *testing.T, e *contractEnv) {
		ctx := context.Background()
		e.subscribe(t, 0, "1")
		drv := e.acquire(t, "d1", -1, connections.Acquired)
		e.observe(t, 0, "t1", 0, "")
		seat := e.obsSeat(0)

		_, err := e.Subscribe(ctx, seat, e.C1, connections.Subscription{From: 1, Stamp: "1"})
		wantErr(t, "the driver subscribing on an observer's seat", err, connections.ErrNotOwner)
		_, err = e.Subscribe(ctx, e.A, e.obsConn(0), connections.Subscription{From: 1, Stamp: "1"})
		wantErr(t, "an observer subscribing on the driver's seat", err, connections.ErrNotOwner)
		if _, err := e.Subscribe(ctx, seat, e.obsConn(0), connections.Subscription{From: 3, Requested: 3, Stamp: "2"}); err != nil {
			t.Fatalf("subscribe o0: %v", err)
		}
		_, err = e.Subscribe(ctx, seat, e.obsConn(0), connections.Subscription{From: 9, Stamp: "1"})
		wantErr(t, "o0 subscribing stamped earlier", err, connections.ErrSuperseded)
		e.wantSeat(t, 0, "t1", ownerView{Pending: true, Sub: 1, Next: 3})

		// The driver's lease is live; the seat's is free.
		res, err := e.Acquire(ctx, seat, holder("o1"), contractTTL, -1)
		if err != nil || res.Outcome != connections.Acquired {
			t.Fatalf("acquire the seat under the driver's live lease = %v, %v", res.Outcome, err)
		}
		e.clock.advance(time.Second)
		if res, err := e.Acquire(ctx, seat, holder("o2"), contractTTL, -1); err != nil || res.Outcome != connections.LeaseHeld || res.Owner.Lease != "o1" {
			t.Fatalf("acquire a held seat = %v (%q), %v", res.Outcome, res.Owner.Lease, err)
		}
		if done, err := e.MarkPending(ctx, seat, 8); err != nil || !done {
			t.Fatalf("mark the seat = %v, %v", done, err)
		}
		o, err := e.Checkpoint(ctx, res.Owner, "o1", connections.Progress{Next: 5, HelloSent: true}, contractTTL)
		if err != nil {
			t.Fatalf("checkpoint the seat: %v", err)
		}
		e.wantSeat(t, 0, "t1", ownerView{Lease: "o1", Kind: connections.HolderOnce, Until: contractTTL + time.Second, Pending: true, PendingTo: 9, Sub: 1, Next: 5, Hello: true})
		e.release(t, o, "o1", connections.Progress{Next: 7, HelloSent: true}, false) // the mark reaches 8
		e.release(t, o, "o1", connections.Progress{Next: 9, HelloSent: true}, true)
		e.wantSeat(t, 0, "t1", ownerView{Sub: 1, Next: 9, Hello: true, Released: "o1"})
		if done, err := e.MarkPending(ctx, seat, 8); err != nil || !done {
			t.Fatalf("mark for events the seat was sent = %v, %v; want nothing owed", done, err)
		}

		// The driver's record went its own way.
		e.wantOwner(t, ownerView{Lease: "d1", Kind: connections.HolderOnce, Until: contractTTL, Sub: 1})
		e.release(t, drv, "d1", connections.Progress{Next: 2, HelloSent: true}, true)
		e.wantOwner(t, ownerView{Sub: 1, Next: 2, Hello: true, Released: "d1"})
		e.wantSeat(t, 0, "t1", ownerView{Sub: 1, Next: 9, Hello: true, Released: "o1"})
	}},
	{"an observer's seat has its own watch claim and abandon", func(t *testing.T, e *contractEnv) {
		ctx := context.Background()
		e.observe(t, 0, "t1", 0, "")
		seat := e.obsSeat(0)
		if ok, err := e.ClaimWatch(ctx, seat, "w1", contractT0.Add(5*time.Second)); err != nil || !ok {
			t.Fatalf("claim the seat's watch = %v, %v", ok, err)
		}
		e.claimWatch(t, "w2", 7*time.Second, true) // the driver's: another record
		if v := e.seat(t, 0); v.Watch != 5*time.Second {
			t.Fatalf("seat's claim until %v; want 5s", v.Watch)
		}
		seen, _ := e.Owner(ctx, seat)
		if ok, err := e.EndWatch(ctx, seen, "w1", false); err != nil || !ok {
			t.Fatalf("end the seat's watch = %v, %v", ok, err)
		}
		if v := e.seat(t, 0); v.Watch != 0 {
			t.Fatalf("seat's claim until %v after its end; want none", v.Watch)
		}
		if v := e.owner(t); v.Watch != 7*time.Second {
			t.Fatalf("driver's claim until %v; want kept, 7s", v.Watch)
		}

		res, err := e.Acquire(ctx, seat, holder("o1"), contractTTL, -1)
		if err != nil || res.Outcome != connections.Acquired {
			t.Fatalf("acquire the seat = %v, %v", res.Outcome, err)
		}
		wantErr(t, "abandon the seat", e.Abandon(ctx, res.Owner, "o1", connections.Progress{Next: 4, HelloSent: true}), nil)
		e.wantSeat(t, 0, "t1", ownerView{Next: 4, Hello: true, Released: "o1"})
		e.wantOwner(t, ownerView{Watch: 7 * time.Second})
	}},
	{"replies owed before an observer's hello are its seat's", func(t *testing.T, e *contractEnv) {
		ctx := context.Background()
		e.observe(t, 0, "t1", 0, "")
		seat := e.obsSeat(0)
		wantErr(t, "owe to o0", e.OweReply(ctx, seat, e.obsConn(0), connections.Reply{Frame: []byte("r1")}), nil)
		wantErr(t, "owe to the driver on o0's seat", e.OweReply(ctx, seat, e.C1, connections.Reply{Frame: []byte("x")}), connections.ErrNotOwner)
		if v := e.owner(t); v.Replies != 0 {
			t.Fatalf("driver owes %d replies; want none", v.Replies)
		}
		got, err := e.TakeReplies(ctx, seat, e.obsConn(0))
		if err != nil || len(got) != 1 || string(got[0].Frame) != "r1" {
			t.Fatalf("take o0's replies = %q, %v; want r1", got, err)
		}
		e.welcomeSeat(t, 0)
		wantErr(t, "owe after o0's hello", e.OweReply(ctx, seat, e.obsConn(0), connections.Reply{Frame: []byte("r2")}), connections.ErrHelloSent)
	}},
	{"an observer that leaves takes its seat and its entry, nothing else", func(t *testing.T, e *contractEnv) {
		ctx := context.Background()
		for i := range 3 {
			e.observe(t, i, "t1", 0, "")
		}
		wantErr(t, "set o1 lagged", e.SetState(ctx, e.obsConn(1), connections.StateLagged), nil)
		e.wantConn(t, e.obsConn(1), connections.RoleObserver, connView{State: connections.StateLagged})

		wantErr(t, "forget o1", e.Forget(ctx, e.obsConn(1), e.obsSeat(1)), nil)
		_, err := e.Conn(ctx, e.obsConn(1))
		wantErr(t, "conn o1 after forget", err, connections.ErrNotFound)
		e.wantNoSeat(t, 1)
		e.wantObservers(t, entry(0, "t1", 0), entry(2, "t1", 0))

		wantErr(t, "disown o2's seat by another connection", e.Disown(ctx, e.obsSeat(2), e.C1), nil)
		e.wantSeat(t, 2, "t1", ownerView{})
		e.wantObservers(t, entry(0, "t1", 0), entry(2, "t1", 0))
		wantErr(t, "disown o2's seat", e.Disown(ctx, e.obsSeat(2), e.obsConn(2)), nil)
		e.wantNoSeat(t, 2)
		e.wantObservers(t, entry(0, "t1", 0))

		e.wantOwner(t, ownerView{})
		e.wantConn(t, e.C1, "", authorized)
		e.wantSeat(t, 0, "t1", ownerView{})
	}},
	{"an index entry counts through a connection's lifetime and not a millisecond more", func(t *testing.T, e *contractEnv) {
		e.observe(t, 0, "t1", 0, "")
		e.clock.advance(3 * time.Hour)
		e.observe(t, 1, "t1", 0, "")
		e.wantObservers(t, entry(0, "t1", 0), entry(1, "t1", 3*time.Hour))
		e.clock.advance(time.Millisecond)
		e.wantObservers(t, entry(1, "t1", 3*time.Hour))
		// The bound counts the entries listed: o1 is the oldest, and superseded.
		e.observe(t, 2, "t1", 1, e.obsConn(1))
		e.wantObservers(t, entry(2, "t1", 3*time.Hour+time.Millisecond))
	}},
	{"a session reset closes every observer", func(t *testing.T, e *contractEnv) {
		ctx := context.Background()
		e.observe(t, 0, "t1", 0, "")
		e.welcomeSeat(t, 0)
		e.observe(t, 1, "t2", 0, "")
		socket := &memSocket{}
		// The driver connected after the reset: it is left open; the observers are not.
		if err := e.closer(socket).closeReset(ctx, e.A, resetMarker{conn: e.C2}); err != nil {
			t.Fatalf("close after reset: %v", err)
		}
		wantClosed(t, socket, e.obsConn(0), e.obsConn(1))
		for i := range 2 {
			e.wantNoSeat(t, i)
			e.wantConn(t, e.obsConn(i), connections.RoleObserver, connView{State: connections.StateUnauthorized})
		}
		e.wantObservers(t)
		e.wantOwner(t, ownerView{})
		e.wantConn(t, e.C1, "", authorized)

		// A reset the driver read the old log of closes it too.
		e.observe(t, 2, "t1", 0, "")
		socket = &memSocket{}
		if err := e.closer(socket).closeReset(ctx, e.A, resetMarker{conn: e.C1}); err != nil {
			t.Fatalf("close after reset: %v", err)
		}
		wantClosed(t, socket, e.obsConn(2), e.C1)
		_, err := e.Owner(ctx, e.A)
		wantErr(t, "owner after reset", err, connections.ErrNotFound)
		e.wantConn(t, e.C1, "", connView{State: connections.StateUnauthorized})
	}},
	{"a revoked token closes the observers that hold it, not the driver", func(t *testing.T, e *contractEnv) {
		ctx := context.Background()
		e.observe(t, 0, "t1", 0, "")
		e.observe(t, 1, "t2", 0, "")
		e.observe(t, 2, "t1", 0, "")
		t1, t2, drv := e.hashFn(t, e.A, "t1"), e.hashFn(t, e.A, "t2"), e.drivers[e.C1]
		socket := &memSocket{}
		if err := e.closer(socket).revoke(ctx, e.A, tokenRecord([]string{drv, t1, t2}, []string{drv, t2})); err != nil {
			t.Fatalf("revoke t1: %v", err)
		}
		wantClosed(t, socket, e.obsConn(0), e.obsConn(2))
		e.wantNoSeat(t, 0)
		e.wantNoSeat(t, 2)
		e.wantConn(t, e.obsConn(2), connections.RoleObserver, connView{State: connections.StateUnauthorized})
		e.wantSeat(t, 1, "t2", ownerView{})
		e.wantConn(t, e.obsConn(1), connections.RoleObserver, authorized)
		e.wantObservers(t, entry(1, "t2", 0))
		e.wantOwner(t, ownerView{})
		e.wantConn(t, e.C1, "", authorized)

		// The driver's token: the driver only.
		socket = &memSocket{}
		if err := e.closer(socket).revoke(ctx, e.A, tokenRecord([]string{drv, t2}, []string{t2})); err != nil {
			t.Fatalf("revoke the driver's token: %v", err)
		}
		wantClosed(t, socket, e.C1)
		e.wantConn(t, e.obsConn(1), connections.RoleObserver, authorized)
		e.wantObservers(t, entry(1, "t2", 0))
	}},
	{"deleting the agent closes the driver and every observer", func(t *testing.T, e *contractEnv) {
		ctx := context.Background()
		e.observe(t, 0, "t1", 0, "")
		e.observe(t, 1, "t2", 0, "")
		t1, t2, drv := e.hashFn(t, e.A, "t1"), e.hashFn(t, e.A, "t2"), e.drivers[e.C1]
		socket := &memSocket{}
		if err := e.closer(socket).revoke(ctx, e.A, tokenRecord([]string{drv, t1, t2}, nil)); err != nil {
			t.Fatalf("delete: %v", err)
		}
		wantClosed(t, socket, e.obsConn(0), e.obsConn(1), e.C1)
		e.wantObservers(t)
		e.wantNoSeat(t, 0)
		e.wantNoSeat(t, 1)
		_, err := e.Owner(ctx, e.A)
		wantErr(t, "owner after delete", err, connections.ErrNotFound)
	}},
}
