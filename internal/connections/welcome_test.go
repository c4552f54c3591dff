package connections_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/connections"
)

// TestOweReply: a reply is recorded only while hello is not recorded and the connection
// owns the agent, up to MaxReplies; TakeReplies hands them out once, in order, each
// with the close code it was stored with.
func TestOweReply(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	tok, err := f.tokens.Create(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.claim(t, "a", "c1", tok); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		conn, frame, close string
		want               error
	}{
		{"c1", "r1", "", nil},
		{"c1", "r2", "internal", nil},
		{"c0", "r3", "", connections.ErrNotOwner},
	} {
		if err := f.conns.OweReply(ctx, "a", tc.conn, connections.Reply{Frame: []byte(tc.frame), Close: tc.close}); !errors.Is(err, tc.want) && (err != nil || tc.want != nil) {
			t.Fatalf("owe reply %d to %s = %v, want %v", i, tc.conn, err, tc.want)
		}
	}
	o, err := f.conns.Owner(ctx, "a")
	if got := strs(o.Replies); err != nil || !slices.Equal(got, []string{"r1", "r2 closes internal"}) {
		t.Fatalf("record's replies = %v, %v; want [r1, r2 closes internal]", got, err)
	}
	if got, err := f.conns.TakeReplies(ctx, "a", "c1"); err != nil || !slices.Equal(strs(got), []string{"r1", "r2 closes internal"}) {
		t.Fatalf("take = %v, %v; want [r1, r2 closes internal]", strs(got), err)
	}
	if got, err := f.conns.TakeReplies(ctx, "a", "c1"); err != nil || len(got) != 0 {
		t.Fatalf("take again = %v, %v; want none", strs(got), err)
	}
	for i := range connections.MaxReplies {
		if err := f.conns.OweReply(ctx, "a", "c1", connections.Reply{Frame: []byte("r")}); err != nil {
			t.Fatalf("owe reply %d: %v", i, err)
		}
	}
	if err := f.conns.OweReply(ctx, "a", "c1", connections.Reply{Frame: []byte("r")}); !errors.Is(err, connections.ErrRepliesFull) {
		t.Fatalf("owe reply past the bound = %v, want %v", err, connections.ErrRepliesFull)
	}
	// Hello recorded: nothing is recorded any more, the reply goes out at once.
	o, _, err = acquire(f.conns, "a", "h1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.conns.Checkpoint(ctx, o, "h1", connections.Progress{HelloSent: true}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := f.conns.TakeReplies(ctx, "a", "c1"); err != nil {
		t.Fatal(err)
	}
	if err := f.conns.OweReply(ctx, "a", "c1", connections.Reply{Frame: []byte("late")}); !errors.Is(err, connections.ErrHelloSent) {
		t.Fatalf("owe reply after hello = %v, want %v", err, connections.ErrHelloSent)
	}
}

// strs shows replies as "frame" or "frame closes code".
func strs(rs []connections.Reply) []string {
	out := []string{}
	for _, r := range rs {
		if r.Close != "" {
			out = append(out, string(r.Frame)+" closes "+r.Close)
			continue
		}
		out = append(out, string(r.Frame))
	}
	return out
}

// TestClaimUnwelcomed: a claim that supersedes a connection before its hello was
// recorded makes closing it owed and hands the replaced record's sender lease over as
// the closing lease; TakeClose then admits that holder (or anyone once the lease ran
// out) and one closer at a time, and ClearOwed ends what is owed. A connection superseded
// after hello owes nothing of the kind.
func TestClaimUnwelcomed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	tok, err := f.tokens.Create(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.claim(t, "a", "c1", tok); err != nil {
		t.Fatal(err)
	}
	o, _, err := acquire(f.conns, "a", "h1") // c1's sender, about to post hello
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.claim(t, "a", "c2", tok); err != nil {
		t.Fatal(err)
	}
	c, err := f.conns.Conn(ctx, "c1")
	if err != nil || !c.Unwelcomed || c.Closer != "h1" || !c.CloserUntil.Equal(o.LeaseUntil) || c.State != connections.StateSuperseded {
		t.Fatalf("superseded record = %+v, %v; want closing owed, closer h1 until %v", c, err, o.LeaseUntil)
	}
	take := func(holder string, hello, want bool) connections.Conn {
		t.Helper()
		c, taken, err := f.conns.TakeClose(ctx, "c1", holder, time.Minute, hello)
		if err != nil || taken != want {
			t.Fatalf("take close for %s = %v, %v; want %v", holder, taken, err, want)
		}
		return c
	}
	take("w1", false, false) // h1's lease is live
	if c := take("h1", true, true); !c.HelloPosted {
		t.Fatalf("after h1 posted hello: %+v, want hello posted", c)
	}
	take("w1", false, false)
	if err := f.conns.ClearOwed(ctx, "c1", "w1"); !errors.Is(err, connections.ErrLeaseLost) {
		t.Fatalf("clear owed by w1 = %v, want %v", err, connections.ErrLeaseLost)
	}
	if err := f.conns.ClearOwed(ctx, "c1", "h1"); err != nil {
		t.Fatal(err)
	}
	if c := take("w1", false, false); c.Unwelcomed {
		t.Fatalf("after ClearOwed: %+v, want nothing owed", c)
	}

	// c2 gets hello; c3 supersedes it: nothing of the kind is owed to c2.
	o, _, err = acquire(f.conns, "a", "h2")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.conns.Release(ctx, o, "h2", connections.Progress{HelloSent: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.claim(t, "a", "c3", tok); err != nil {
		t.Fatal(err)
	}
	if c, err := f.conns.Conn(ctx, "c2"); err != nil || c.Unwelcomed || c.State != connections.StateSuperseded {
		t.Fatalf("c2 = %+v, %v; want superseded, nothing owed", c, err)
	}
	// c3 is superseded before hello with no lease held: any closer may take it.
	if _, err := f.claim(t, "a", "c4", tok); err != nil {
		t.Fatal(err)
	}
	if c, taken, err := f.conns.TakeClose(ctx, "c3", "w2", -time.Second, false); err != nil || !taken || !c.Unwelcomed || c.HelloPosted {
		t.Fatalf("take close of c3 = %+v, %v, %v; want taken, hello owed", c, taken, err)
	}
	// w2's closing lease has run out (a dead closer): the next closer takes over.
	if _, taken, err := f.conns.TakeClose(ctx, "c3", "w3", time.Minute, false); err != nil || !taken {
		t.Fatalf("take close of c3 after w2's lease ran out = %v, %v; want taken", taken, err)
	}
	if _, _, err := f.conns.TakeClose(ctx, "gone", "w2", time.Minute, false); !errors.Is(err, connections.ErrNotFound) {
		t.Fatalf("take close of a missing record = %v, want %v", err, connections.ErrNotFound)
	}
}
