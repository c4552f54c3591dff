package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/eventsource"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// checker records what one client received per subscription and asserts the spec's
// exactness: after (re)subscribing from f, discarding until seq == f, the client sees
// f, f+1, … with no gap and no duplicate.
type checker struct {
	from    int64 // current subscription's from_seq
	synced  bool  // seen seq == from since the last subscribe
	next    int64 // next expected seq once synced
	history [][2]int64
}

func (ck *checker) subscribe(from int64) {
	if ck.synced || ck.from != 0 || len(ck.history) > 0 {
		ck.history = append(ck.history, [2]int64{ck.from, ck.next})
	}
	ck.from, ck.synced, ck.next = from, false, from
}

func (ck *checker) see(t *testing.T, who string, seq int64) {
	t.Helper()
	if !ck.synced {
		if seq != ck.from {
			return // a frame of the replaced subscription: the spec says discard
		}
		ck.synced = true
	}
	if seq != ck.next {
		t.Fatalf("%s: got seq %d, want %d (subscribed from %d): gap or duplicate", who, seq, ck.next, ck.from)
	}
	ck.next++
}

// TestConcurrentDeliveryExact: writers append while clients subscribe and resubscribe
// from random seqs, with the stream poller redelivering, splitting and reordering
// batches, and with extra sender processes pumping the same agents at once (as other
// Lambda instances would) — every client receives exactly from..tip, 5 rounds (20 under make soak).
func TestConcurrentDeliveryExact(t *testing.T) {
	e := startStack(t, devstack.Options{Faults: eventsource.Faults{Seed: 7, Redeliver: 0.3, Split: 0.3, Reorder: 0.5}})
	rounds := soakRounds(t, "DELIVERY_ROUNDS", 5, 20)
	const agents, writers, perWriter = 2, 2, 6
	roundFile := t.TempDir() + "/round"
	stop := startPumpProcesses(t, e, 2, roundFile, agents)
	defer stop()
	db := dynamolocal.Client(e.stack.DynamoDBEndpoint)
	start := time.Now()
	for round := range rounds {
		if err := os.WriteFile(roundFile, []byte(fmt.Sprint(round)), 0o600); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for a := range agents {
			agent := fmt.Sprintf("r%d-a%d", round, a)
			tok := e.token(t, agent)
			c := e.dial(t, agent, tok)
			defer c.c.CloseNow()
			c.hello(agent)
			var written atomic.Int64
			for w := range writers {
				wg.Add(1)
				wrng := rand.New(rand.NewPCG(uint64(round), uint64(a*10+w)))
				go func() {
					defer wg.Done()
					l := sessionlog.New(db, e.stack.Tables["LogTable"]) // its own instance
					for i := range perWriter {
						if _, err := l.Append(context.Background(), agent, "test/event", map[string]int{"w": w, "i": i}); err != nil {
							t.Error(err)
							return
						}
						written.Add(1)
						time.Sleep(time.Duration(wrng.IntN(3)) * time.Millisecond)
					}
				}()
			}
			wg.Add(1)
			crng := rand.New(rand.NewPCG(uint64(round), uint64(a)))
			go func() {
				defer wg.Done()
				rng := crng
				ck := &checker{}
				from := int64(rng.IntN(3))
				ck.subscribe(from)
				c.send(map[string]any{"type": "subscribe", "from_seq": from})
				resubAt := int64(2 + rng.IntN(6))
				resubbed := false
				final := int64(writers * perWriter)
				for {
					f, err := c.next(hang())
					if err != nil {
						t.Errorf("%s: %v (expected seq %d)", agent, err, ck.next)
						return
					}
					if f.Type == "replay_truncated" && f.Req == ck.from && f.From < f.Req {
						// Subscribed ahead of a tip that had not grown yet: the
						// stream starts at the tip + 1 (docs/protocol.md).
						ck.from, ck.next = f.From, f.From
						continue
					}
					if f.Seq == nil {
						t.Errorf("%s: protocol frame %s", agent, f)
						return
					}
					ck.see(t, agent, *f.Seq)
					if !resubbed && ck.synced && *f.Seq >= resubAt {
						resubbed = true
						from = int64(rng.IntN(int(*f.Seq) + 1))
						ck.subscribe(from)
						c.send(map[string]any{"type": "subscribe", "from_seq": from})
					}
					if ck.synced && ck.next > final && written.Load() == final {
						return
					}
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.Fatalf("round %d failed", round)
		}
		t.Logf("round %d done at %v", round, time.Since(start).Round(time.Millisecond))
	}
}

// startPumpProcesses runs n child processes that keep pumping the current round's
// agents (the round is read from roundFile), so several OS processes contend for the
// same delivery leases.
func startPumpProcesses(t *testing.T, e env, n int, roundFile string, agents int) func() {
	t.Helper()
	cfg, _ := json.Marshal(e.stack.Config)
	stopFile := t.TempDir() + "/stop"
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperPumpProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "DEVSTACK_PUMP_HELPER=1", "DEVSTACK_PUMP_CONFIG="+string(cfg),
			"DEVSTACK_PUMP_STOP="+stopFile, "DEVSTACK_PUMP_ROUND_FILE="+roundFile, fmt.Sprintf("DEVSTACK_PUMP_AGENTS=%d", agents),
			dynamotest.EnvEndpoint+"="+e.stack.DynamoDBEndpoint)
		cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	return func() {
		os.WriteFile(stopFile, nil, 0o600)
		for _, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Errorf("pump process: %v", err)
			}
		}
	}
}

// TestHelperPumpProcess is the body of a sender process of TestConcurrentDeliveryExact.
func TestHelperPumpProcess(t *testing.T) {
	if os.Getenv("DEVSTACK_PUMP_HELPER") != "1" {
		t.Skip("helper process for TestConcurrentDeliveryExact")
	}
	var cfg config.Config
	if err := json.Unmarshal([]byte(os.Getenv("DEVSTACK_PUMP_CONFIG")), &cfg); err != nil {
		t.Fatal(err)
	}
	d := service.Deliverer(cfg, dynamolocal.Config(), service.Logger(io.Discard, "error"), service.Tuning{})
	l := sessionlog.New(dynamolocal.Client(cfg.DynamoDBEndpoint), cfg.LogTable)
	var agents int
	fmt.Sscan(os.Getenv("DEVSTACK_PUMP_AGENTS"), &agents)
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(os.Getenv("DEVSTACK_PUMP_STOP")); err == nil {
			return
		}
		b, err := os.ReadFile(os.Getenv("DEVSTACK_PUMP_ROUND_FILE"))
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for a := range agents {
			agent := fmt.Sprintf("r%s-a%d", b, a)
			// Like a stream consumer in another Lambda instance: woken by the newest
			// record, which it hands over as the hint.
			tip, err := l.Tip(context.Background(), agent)
			if err != nil {
				continue
			}
			hints, err := l.Read(context.Background(), agent, tip, 1)
			if err != nil {
				t.Error(err)
				continue
			}
			if err := d.Pump(context.Background(), agent, hints); err != nil && !strings.Contains(err.Error(), "context") {
				t.Errorf("pump %s: %v", agent, err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMaxConcurrentReplays: more connections than max_concurrent_replays subscribe
// together with replays to read; at most max_concurrent_replays replay reads run at
// once, all of them are reachable (the first readers hold their slots until that many
// read at once: a barrier), and every replay completes. Each poll for a slot reads at
// most connections.SlotGroupSize slot items, all of one group (counted on the wire).
func TestMaxConcurrentReplays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                 string
		slots, conns, events int
	}{
		{"one group", 2, 5, 30},
		{"three groups", 12, 14, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obs := &peakObserver{n: int64(tc.slots), full: make(chan struct{})}
			reads := &dynamotest.SlotReads{}
			// Pages of 10 events: each replay is several reads, so the replays contend.
			e := startStack(t, devstack.Options{MaxConcurrentReplays: tc.slots, Observer: obs, ReplayPage: 10,
				Measure: devstack.Measure{Clients: reads.Meter}})
			events := tc.events
			clients := make([]*client, tc.conns)
			var setup sync.WaitGroup
			dialing := make(chan struct{}, 4) // a few connects at a time: a busy DynamoDB Local serves each in turn
			for i := range tc.conns {
				setup.Add(1)
				go func() {
					defer setup.Done()
					dialing <- struct{}{}
					defer func() { <-dialing }()
					agent := fmt.Sprintf("m%d", i)
					e.seed(t, agent, events)
					clients[i] = e.dial(t, agent, e.token(t, agent))
					clients[i].hello(agent)
				}()
			}
			setup.Wait()
			if t.Failed() {
				t.FailNow()
			}
			var wg sync.WaitGroup
			for i, c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c.send(`{"type":"subscribe","from_seq":0}`)
					if f := c.must(hang()); f.Seq == nil || *f.Seq != 0 {
						t.Errorf("client %d: first frame %s", i, f)
					}
				}()
			}
			wg.Wait()
			for _, c := range clients {
				c.events(1, int64(events))
			}
			if p := obs.peak.Load(); p > int64(tc.slots) {
				t.Fatalf("%d replay reads at once, max_concurrent_replays is %d", p, tc.slots)
			} else if p < int64(tc.slots) {
				t.Fatalf("peak %d replay reads at once, want %d: the test did not contend", p, tc.slots)
			}
			if obs.total.Load() < int64(tc.conns) {
				t.Fatalf("%d replay reads for %d subscribes", obs.total.Load(), tc.conns)
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

// peakObserver records the peak of concurrent replay reads. The first reads wait until
// n run at once (closing full), so the bound is reached however slow the machine.
type peakObserver struct {
	now, peak, total atomic.Int64
	n                int64
	full             chan struct{}
	fullOnce         sync.Once
}

func (o *peakObserver) ReplayRead(start bool) {
	if !start {
		o.now.Add(-1)
		return
	}
	o.total.Add(1)
	n := o.now.Add(1)
	for p := o.peak.Load(); n > p && !o.peak.CompareAndSwap(p, n); p = o.peak.Load() {
	}
	if n >= o.n {
		o.fullOnce.Do(func() { close(o.full) })
	}
	// Held well under the slot lease (connections.DefaultLease, 30 s): a slot that
	// expired under a waiting reader would let one more read in.
	select {
	case <-o.full:
	case <-time.After(20 * time.Second):
	}
	// A slow read (a large page, a busy table): each read holds its slot long enough
	// that the waiting subscribes poll against full slots however fast the machine is.
	time.Sleep(50 * time.Millisecond)
}
