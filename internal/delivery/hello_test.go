package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/dynamotest"
)

// helloLease is the sender lease of the hello tests: short, so that a killed holder's
// lease runs out quickly, and long enough for a live one on a loaded machine (it
// renews at half the term).
const helloLease = 2 * time.Second

// fate is what a gate does to the first invocation of its agent that reaches a point.
type fate int

const (
	hold   fate = iota // wait until released (a slow invocation)
	freeze             // never go on: killed with its lease held (it unwinds when the test ends)
	crash              // fail at once, as a crashed invocation: Lambda retries it
)

// killed is the panic a gate kills an invocation with; the local gateway reports it
// as the function's error, as Lambda reports a crashed one.
type killed struct{ point string }

// fates is a delivery.Gate that deals the first invocation of agent reaching each
// point its fate, and lets every later one pass.
type fates struct {
	agent   string
	fate    map[string]fate
	mu      sync.Mutex
	reached map[string]chan struct{} // closed when the point's first invocation reached it
	release chan struct{}            // closed to release held and frozen invocations
	once    sync.Once
}

func newFates(agent string, f map[string]fate) *fates {
	g := &fates{agent: agent, fate: f, reached: map[string]chan struct{}{}, release: make(chan struct{})}
	for p := range f {
		g.reached[p] = make(chan struct{})
	}
	return g
}

// letGo releases the held and frozen invocations (frozen ones unwind as killed).
func (g *fates) letGo() { g.once.Do(func() { close(g.release) }) }

func (g *fates) ReplayRead(bool) {}

func (g *fates) Wait(point, agentID string) {
	if agentID != g.agent {
		return
	}
	g.mu.Lock()
	ch, ok := g.reached[point]
	first := ok
	if ok {
		select {
		case <-ch:
			first = false
		default:
			close(ch)
		}
	}
	g.mu.Unlock()
	if !first {
		return
	}
	switch g.fate[point] {
	case hold:
		<-g.release
	case freeze:
		<-g.release
		panic(killed{point})
	case crash:
		panic(killed{point})
	}
}

// await waits until point's first invocation has reached it.
func (g *fates) await(t *testing.T, point string) {
	t.Helper()
	select {
	case <-g.reached[point]:
	case <-time.After(patience):
		t.Fatalf("no invocation reached %s", point)
	}
}

// helloRig starts a rig on tables names whose Deliverer runs past g, and lets g's
// invocations go before the gateway closes.
func helloRig(t *testing.T, names map[string]string, g *fates, lease time.Duration, served chan<- string) *rig {
	t.Helper()
	r := startRig(t, rigConfig{names: names, cfg: delivery.Config{Lease: lease, Observer: g}, served: served})
	t.Cleanup(g.letGo) // runs before the gateway's Close, registered earlier
	return r
}

// expect reads c's frames and wants exactly want: frame types ("hello", "error:CODE")
// and "closed" for the end of the socket.
func (c *wsClient) expect(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	for _, w := range want {
		f, err := c.next(patience)
		switch {
		case err != nil && !errors.Is(err, errNoFrame):
			got = append(got, "closed")
		case err != nil:
			t.Fatalf("frames %v, then none in %s; want %v", got, patience, want)
		case f.Type == "error":
			got = append(got, "error:"+f.Code)
		default:
			got = append(got, f.Type)
		}
		if got[len(got)-1] != w {
			t.Fatalf("frames %v, want %v", got, want)
		}
	}
}

// TestHelloFirst: hello is the first frame a connection gets, whatever else is owed
// to it first and whoever owing it dies. The subtests share one set of tables, each
// with an agent and a gateway of its own.
func TestHelloFirst(t *testing.T) {
	t.Parallel()
	names := dynamotest.CreateTables(t)
	t.Run("reply", func(t *testing.T) { testReplyAfterHello(t, names) })
	t.Run("superseded", func(t *testing.T) { testHelloBeforeSupersededKilled(t, names) })
	t.Run("internal", func(t *testing.T) { testInternalAfterHello(t, names) })
}

// failing is a socket.Controller whose every call fails unexpectedly: the message
// function answers internal.
type failing struct{}

var errBroken = errors.New("broken for the test")

func (failing) InjectFrom(context.Context, string, string, bool, string) error { return errBroken }
func (failing) Cancel(context.Context, string, string) error                   { return errBroken }
func (failing) Approve(context.Context, string, string) error                  { return errBroken }
func (failing) Deny(context.Context, string, string, string) error             { return errBroken }
func (failing) SetModel(context.Context, string, string, string) error         { return errBroken }
func (failing) SetPolicy(context.Context, string, []string) error              { return errBroken }

// testInternalAfterHello: an internal error on a freshly connected socket (an error
// frame and the close) reaches it after hello, and the message function does not
// wait for hello: with no sender at work it sends hello itself, and with a sender
// posting hello it hands the error over to that sender, which posts it right after
// hello and closes the connection.
func testInternalAfterHello(t *testing.T, names map[string]string) {
	const frame = `{"type":"set_policy","patterns":["*"]}`
	t.Run("no sender at work", func(t *testing.T) {
		t.Parallel()
		const agent = "internal-idle"
		g := newFates(agent, map[string]fate{delivery.GateKickPump: hold})
		r := startRig(t, rigConfig{names: names, cfg: delivery.Config{Lease: helloLease, Observer: g}, agent: failing{}})
		t.Cleanup(g.letGo)
		c := r.dial(t, agent, r.token(t, agent))
		g.await(t, delivery.GateKickPump) // the connect's sender is held before the lease
		c.send(t, frame)
		c.expect(t, "hello", "error:internal", "closed") // while the connect's sender is still held
	})
	t.Run("a sender posting hello", func(t *testing.T) {
		t.Parallel()
		const agent = "internal-busy"
		g := newFates(agent, map[string]fate{delivery.GateHello: hold})
		served := make(chan string, 4)
		r := startRig(t, rigConfig{names: names, cfg: delivery.Config{Observer: g}, served: served, agent: failing{}})
		t.Cleanup(g.letGo)
		c := r.dial(t, agent, r.token(t, agent))
		g.await(t, delivery.GateHello) // under the lease, hello not posted yet
		c.send(t, frame)
		select {
		case <-served:
		case <-time.After(patience):
			t.Fatal("the message function did not return while the sender was held")
		}
		if o, err := r.conns.Owner(context.Background(), agent); err != nil || len(o.Replies) != 1 {
			t.Fatalf("replies owed %d (%v), want the internal error handed to the sender", len(o.Replies), err)
		}
		g.letGo()
		c.expect(t, "hello", "error:internal", "closed")
		if _, err := r.conns.Owner(context.Background(), agent); !errors.Is(err, connections.ErrNotFound) {
			t.Fatalf("ownership record after the close: %v, want %v", err, connections.ErrNotFound)
		}
	})
	t.Run("no record", func(t *testing.T) {
		t.Parallel()
		const agent = "internal-forgotten"
		g := newFates(agent, map[string]fate{delivery.GateKickPump: hold})
		r := startRig(t, rigConfig{names: names, cfg: delivery.Config{Lease: helloLease, Observer: g}})
		t.Cleanup(g.letGo)
		c := r.dial(t, agent, r.token(t, agent))
		g.await(t, delivery.GateKickPump)
		ctx := context.Background()
		o, err := r.conns.Owner(ctx, agent)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.conns.Forget(ctx, o.ConnID, agent); err != nil {
			t.Fatal(err)
		}
		// hello can never go out now: the close comes alone.
		if err := r.d.Fail(ctx, o.ConnID); err != nil {
			t.Fatal(err)
		}
		c.expect(t, "closed")
	})
}

// testReplyAfterHello: an error reply to a frame of a freshly connected socket reaches
// it after hello, and the message function does not wait for hello to go out: with no
// sender at work it sends hello itself, and with a sender posting hello it hands the
// reply over to that sender, which posts it right after hello.
func testReplyAfterHello(t *testing.T, names map[string]string) {
	t.Run("no sender at work", func(t *testing.T) {
		t.Parallel()
		const agent = "reply-idle"
		g := newFates(agent, map[string]fate{delivery.GateKickPump: hold})
		r := helloRig(t, names, g, helloLease, nil)
		c := r.dial(t, agent, r.token(t, agent))
		g.await(t, delivery.GateKickPump) // the connect's sender is held before the lease
		c.send(t, `{"type":"nonsense"}`)
		c.expect(t, "hello", "error:bad_frame") // while the connect's sender is still held
	})
	t.Run("a sender posting hello", func(t *testing.T) {
		t.Parallel()
		const agent = "reply-busy"
		g := newFates(agent, map[string]fate{delivery.GateHello: hold})
		served := make(chan string, 4)
		r := helloRig(t, names, g, 0, served) // the default: held longer than helloLease, it would lose it
		c := r.dial(t, agent, r.token(t, agent))
		g.await(t, delivery.GateHello) // under the lease, hello not posted yet
		c.send(t, `{"type":"nonsense"}`)
		// The message function records the reply for the sender and returns; nothing is
		// posted while the sender is held.
		select {
		case <-served:
		case <-time.After(patience):
			t.Fatal("the message function did not return while the sender was held")
		}
		if o, err := r.conns.Owner(context.Background(), agent); err != nil || len(o.Replies) != 1 {
			t.Fatalf("replies owed %d (%v), want the reply handed to the sender", len(o.Replies), err)
		}
		g.letGo()
		c.expect(t, "hello", "error:bad_frame")
		c.send(t, `{"type":"nonsense"}`) // hello recorded: posted at once
		c.expect(t, "error:bad_frame")
	})
}

// testHelloBeforeSupersededKilled: a connection superseded before its hello went out
// gets hello, then superseded, then the close, whichever invocation owed it dies and
// wherever: the connect's sender before it takes the lease or under the lease before it
// posts hello (killed with its lease held), or the closer before it posts hello or
// after it posted and recorded hello (crashed, and retried). A frame the connection
// sends meanwhile changes nothing. (A live sender that closes the connection itself:
// devstack's TestHelloBeforeSuperseded.)
func testHelloBeforeSupersededKilled(t *testing.T, names map[string]string) {
	for i, tc := range []struct {
		name  string
		fates map[string]fate
		wait  string // the point the first connection's hello is stopped at
		lease time.Duration
		send  string // a frame the first connection sends once superseded
	}{
		{"sender killed before the lease", map[string]fate{delivery.GateKickPump: freeze}, delivery.GateKickPump, helloLease, ""},
		{"sender killed before hello", map[string]fate{delivery.GateHello: freeze}, delivery.GateHello, helloLease, ""},
		{"closer crashed before hello", map[string]fate{delivery.GateKickPump: freeze, delivery.GateCloseHello: crash}, delivery.GateKickPump, helloLease, ""},
		{"closer crashed after hello", map[string]fate{delivery.GateKickPump: freeze, delivery.GateCloseSuperseded: crash}, delivery.GateKickPump, helloLease, ""},
		// A sender held past its lease may post hello after its successor did: the
		// default lease keeps the held one live.
		{"sender alive, and a frame from the superseded connection", map[string]fate{delivery.GateHello: hold}, delivery.GateHello, 0, `{"type":"subscribe","from_seq":0}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			agent := fmt.Sprintf("killed-%d", i)
			g := newFates(agent, tc.fates)
			served := make(chan string, 10)
			r := helloRig(t, names, g, tc.lease, served)
			tok := r.token(t, agent)
			first := r.dial(t, agent, tok)
			g.await(t, tc.wait)
			second := r.dial(t, agent, tok) // supersedes first, whose hello is owed
			second.hello(t)
			if tc.send != "" {
				// Refused while the sender is held before hello: superseded only after
				// hello all the same.
				first.send(t, tc.send)
				select {
				case <-served:
				case <-time.After(patience):
					t.Fatal("the frame was not served")
				}
			}
			if tc.fates[delivery.GateHello] == hold {
				g.letGo()
			}
			first.expect(t, "hello", "error:superseded", "closed")
		})
	}
}
