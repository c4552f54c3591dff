package delivery_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/history"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// markWrite picks connections.Store's MarkPending out of the requests a client sends.
const markWrite = "SET #pending = :mark"

// marks signals the marks a client's MarkPending writes leave: each one that DynamoDB
// accepted is sent on the channel of the moment (arm), if any.
type marks struct {
	mu sync.Mutex
	ch chan struct{}
}

// arm returns a channel that is closed by the next mark written.
func (m *marks) arm() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ch = make(chan struct{})
	return m.ch
}

func (m *marks) addTo(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("WatchMarks",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleInitialize(ctx, in)
			if u, ok := in.Parameters.(*dynamodb.UpdateItemInput); ok && err == nil && aws.ToString(u.UpdateExpression) == markWrite {
				m.mu.Lock()
				if m.ch != nil {
					close(m.ch)
					m.ch = nil
				}
				m.mu.Unlock()
			}
			return out, md, err
			// Before: outside the write meter's middleware, so a mark is metered by the
			// time it is signalled (the test reads the meter at the signal).
		}), middleware.Before)
}

// backstopClient is a DynamoDB Local client whose writes meter meters, whose releases
// rel watches and whose marks mk signals.
func backstopClient(t *testing.T, meter *dynamotest.WriteUnits, rel *releases, mk *marks) *dynamodb.Client {
	t.Helper()
	return dynamodb.New(meter.Client(t).Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, rel.addTo, mk.addTo)
	})
}

// backstopGate runs fn at each of the backstop's looks before it marks
// (delivery.GateBackstopLook) of agent, and counts the looks.
type backstopGate struct {
	agent string
	mu    sync.Mutex
	fn    func()
	looks int
}

func (g *backstopGate) ReplayRead(bool) {}

func (g *backstopGate) Wait(point, agentID string) {
	if point != delivery.GateBackstopLook || agentID != g.agent {
		return
	}
	g.mu.Lock()
	g.looks++
	fn := g.fn
	g.mu.Unlock()
	if fn != nil {
		fn()
	}
}

func (g *backstopGate) set(fn func()) (looks int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fn = fn
	return g.looks
}

// TestBackstopLookBeforeMark: a stream batch whose events a live holder has not
// recorded (its cursor on the record behind them) looks at the record again before it
// marks. If the holder's cursor has passed the batch's events by then, the backstop
// writes nothing — 0 write units, metered as cmd/bench meters; if it is still behind at
// the last look, the backstop marks the batch's seq (1 write unit), and the holder
// cannot let go without sending it.
func TestBackstopLookBeforeMark(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		moved     bool    // the holder records progress past the event before the first look
		wantUnits float64 // written by the backstop from its last look on
		wantLooks int     // looks at the record before the mark
	}{
		{"cursor past the batch: no mark", true, 0, 1},
		{"cursor behind the batch: marked", false, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const agent = "second"
			b := startBackstop(t, agent)
			r, meter, mk, gate := b.r, b.meter, b.mk, b.gate
			ctx := context.Background()

			// A live holder whose cursor is behind ev: ev appended by a process with no
			// fast path to it.
			ev, err := r.log.Append(ctx, agent, "test/event", map[string]any{"tag": "other process"})
			if err != nil {
				t.Fatal(err)
			}
			holder := connections.Holder{ID: "xholder", Kind: connections.HolderOnce}
			acq, err := r.conns.Acquire(ctx, agent, holder, time.Minute, -1)
			if err != nil || acq.Outcome != connections.Acquired || acq.Owner.Next > ev.Seq {
				t.Fatalf("acquire = %v, next %d (%v); want acquired, behind seq %d", acq.Outcome, acq.Owner.Next, err, ev.Seq)
			}
			o := acq.Owner
			before, _ := meter.Units() // taken again at each look
			gate.set(func() {
				if tc.moved && o.Next <= ev.Seq {
					// The holder has sent ev and records it, keeping the lease.
					cur, err := r.conns.Checkpoint(ctx, o, holder.ID, connections.Progress{Next: ev.Seq + 1, HelloSent: true}, time.Minute)
					if err != nil {
						t.Errorf("checkpoint: %v", err)
					}
					o = cur
				}
				before, _ = meter.Units()
			})
			marked := mk.arm()
			pumped := make(chan error, 1)
			go func() { pumped <- r.d.PumpFor(ctx, agent, []sessionlog.Event{ev}, time.Second) }()

			if tc.moved {
				if err := <-pumped; err != nil {
					t.Fatal(err)
				}
				after, _ := meter.Units()
				if units := after - before; units != tc.wantUnits {
					t.Errorf("the backstop wrote %v write units after its look; want %v", units, tc.wantUnits)
				}
				if cur, _ := r.conns.Owner(ctx, agent); cur.Pending || cur.Lease != holder.ID {
					t.Errorf("record after = pending %v, lease %q; want no mark, the lease still %q's", cur.Pending, cur.Lease, holder.ID)
				}
			} else {
				select {
				case <-marked:
				case err := <-pumped:
					t.Fatalf("the backstop returned (%v) without marking a holder behind its event", err)
				}
				after, _ := meter.Units()
				if units := after - before; units != tc.wantUnits {
					t.Errorf("the backstop wrote %v write units to mark; want %v", units, tc.wantUnits)
				}
				if cur, _ := r.conns.Owner(ctx, agent); !cur.Pending || cur.PendingTo != ev.Seq+1 {
					t.Errorf("mark = %v to %d; want to %d (seq %d, plus one)", cur.Pending, cur.PendingTo, ev.Seq+1, ev.Seq)
				}
				// The holder cannot let go without ev …
				if _, released, err := r.conns.Release(ctx, o, holder.ID, connections.Progress{Next: ev.Seq, HelloSent: true}); released || err != nil {
					t.Errorf("release behind the mark = %v, %v; want refused", released, err)
				}
			}
			// … and lets go once it has sent it.
			if _, released, err := r.conns.Release(ctx, o, holder.ID, connections.Progress{Next: ev.Seq + 1, HelloSent: true}); !released || err != nil {
				t.Errorf("release past the event = %v, %v; want released", released, err)
			}
			if !tc.moved {
				if err := <-pumped; err != nil {
					t.Fatal(err)
				}
			}
			r.kicks.settled(t)
			if looks := gate.set(nil); looks != tc.wantLooks {
				t.Errorf("%d looks before the mark; want %d", looks, tc.wantLooks)
			}
		})
	}
}

// TestBackstopLookRacesRelease: the fast path's holder lets go right at a stream
// backstop's look before its mark, through the history checker. Each round, the fast
// path sends one event and holds its release until the backstop is at its first look;
// in half the rounds another event was appended meanwhile by a process with no fast
// path, which the
// holder never sends (its progress at its release stops before it). The release then
// lands before the look (the look sees it let go), with it (no order), or after the
// look (the backstop has marked or given up by then). Every event must reach the
// client, in order, without a gap or a duplicate, before the next round; a backstop
// that finds the holder's events sent at its look writes nothing.
func TestBackstopLookRacesRelease(t *testing.T) {
	t.Parallel()
	const agent = "looking"
	b := startBackstop(t, agent)
	r, meter, rel, mk, gate, c, h, s := b.r, b.meter, b.rel, b.mk, b.gate, b.c, b.h, b.s
	ctx := context.Background()

	const (
		before = iota // the release is written before the look
		with          // the release and the look at once
		after         // the release waits for the backstop's mark, or its return
	)
	round := 0
	for _, missed := range []bool{false, true} {
		for _, when := range []int{before, with, after} {
			round++
			name := fmt.Sprintf("round %d: sent, release %s the look", round, [...]string{"before", "with", "after"}[when])
			if missed {
				name = fmt.Sprintf("round %d: missed, release %s the look", round, [...]string{"before", "with", "after"}[when])
			}
			t.Run(name, func(t *testing.T) {
				// play plays the round once and reports whether the backstop looked.
				play := func() (looked bool) {
					atLook, ended := make(chan struct{}), make(chan struct{})
					endRound := sync.OnceFunc(func() { close(ended) })
					defer endRound()
					pumped := make(chan error, 1)
					marked := mk.arm()
					var once sync.Once
					// The fast path's holder: its first release of the round waits for the
					// backstop's look (or, after, its mark or return) — or for the backstop's
					// return or the round's end, should the backstop never look.
					rel.set(func(string, int64) error {
						once.Do(func() {
							select {
							case <-atLook:
							case err := <-pumped:
								pumped <- err
								return
							case <-ended:
								return
							}
							if when == after {
								select {
								case <-marked:
								case err := <-pumped:
									pumped <- err
								case <-ended:
								}
							}
						})
						return nil
					})
					looks := gate.set(nil)
					var units float64
					gate.set(sync.OnceFunc(func() {
						close(atLook)
						if when == before {
							r.fast.FlushAll() // the linger ends: the holder lets go, and is done
						}
						units, _ = meter.Units()
					}))
					r.appendN(t, r.log, agent, 1, fmt.Sprintf("round %d", round))
					logged := readAll(t, r.log, agent)
					tip := logged[len(logged)-1]
					if err := c.follow(s, tip.Seq, patience); err != nil {
						t.Fatal(err)
					}
					batch := []sessionlog.Event{tip}
					if missed {
						ev, err := r.log.Append(ctx, agent, "test/event", map[string]any{"tag": "no fast path", "round": round})
						if err != nil {
							t.Fatal(err)
						}
						batch = []sessionlog.Event{ev}
					}
					go func() { pumped <- r.d.PumpFor(ctx, agent, batch, time.Second) }()
					if err := c.follow(s, batch[0].Seq, patience); err != nil {
						t.Fatalf("the round's events never all came: %v", err)
					}
					if err := <-pumped; err != nil {
						t.Fatal(err)
					}
					endRound()
					looked = gate.set(nil) != looks
					if looked && !missed && when == before {
						if after, _ := meter.Units(); after != units {
							t.Errorf("the backstop wrote %v write units though the holder had sent its event; want 0", after-units)
						}
					}
					rel.set(nil)
					r.fast.FlushAll()
					r.kicks.settled(t)
					return looked
				}
				// A fast-path holder that ran out of its budget before the backstop's
				// read (a loaded machine) has handed its work over to a retried holder,
				// which needs no look (covered): that play met another case, and the
				// round is played again until it meets its own (a few plays at most: a
				// machine that slow every time leaves the round unchecked, and says so).
				const plays = 8
				for n := 1; ; n++ {
					handed := r.kicks.handovers()
					if play() {
						break
					}
					if r.kicks.handovers() == handed {
						t.Errorf("the backstop made no look before it marked")
						break
					}
					if n == plays {
						t.Logf("%d plays: the fast path's holder handed over before the backstop's read every time; the look is unchecked", n)
						break
					}
					t.Logf("play %d: the fast path's holder handed over before the backstop's read; played again", n)
				}
			})
		}
	}
	logged := readAll(t, r.log, agent)
	r.settle(t, c, s, agent, logged[len(logged)-1].Seq)
	r.kicks.settled(t)
	h.CheckLog(t, readAll(t, r.log, agent))
}

// backstopRig is a rig whose DynamoDB client meters write units and holds releases and
// marks, with a client of agent subscribed from 0 and the subscribe's sender gone.
type backstopRig struct {
	r     *rig
	meter *dynamotest.WriteUnits
	rel   *releases
	mk    *marks
	gate  *backstopGate
	c     *wsClient
	h     *history.History
	s     *history.Sub
}

func startBackstop(t *testing.T, agent string) *backstopRig {
	t.Helper()
	b := &backstopRig{meter: &dynamotest.WriteUnits{}, rel: &releases{}, mk: &marks{}, gate: &backstopGate{agent: agent}, h: history.New()}
	served := make(chan string, 4)
	b.r = startRig(t, rigConfig{db: backstopClient(t, b.meter, b.rel, b.mk), cfg: delivery.Config{Observer: b.gate}, served: served})
	b.c = b.r.dial(t, agent, b.r.token(t, agent))
	b.c.hello(t)
	b.s = b.c.subscribe(t, b.h, "c", 0)
	if err := b.c.follow(b.s, 0, patience); err != nil {
		t.Fatal(err)
	}
	<-served // the subscribe's sender has let go
	b.r.kicks.settled(t)
	return b
}
