package devstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/eventsource"
	"github.com/terret/terret-ws/internal/gatewaytest"
	"github.com/terret/terret-ws/internal/history"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// message is one WebSocket message split into its events: one, or several for a
// client that asked for batches.
type message struct {
	raw    []byte
	events []frame
}

// nextMessage reads one message within d and splits it. A protocol frame is returned
// as a message of one frame without seq; a batch holding one is an error.
func (c *client) nextMessage(d time.Duration) (message, error) {
	b, err := c.ws.Next(d)
	if errors.Is(err, gatewaytest.ErrNoFrame) {
		return message{}, errTimeout
	}
	if err != nil {
		return message{}, err
	}
	m := message{raw: b}
	for part := range bytes.SplitSeq(b, []byte{'\n'}) {
		var f frame
		if err := json.Unmarshal(part, &f); err != nil {
			return m, fmt.Errorf("message part %q is not JSON: %w", part, err)
		}
		f.raw = part
		m.events = append(m.events, f)
	}
	if len(m.events) > 1 {
		for _, f := range m.events {
			if f.Seq == nil {
				return m, fmt.Errorf("protocol frame %s inside a batch", f)
			}
		}
	}
	return m, nil
}

// batchStats counts what batched and unbatched connections received.
type batchStats struct {
	multi   atomic.Int64 // messages of several events, to batching connections
	v1Multi atomic.Int64 // messages of several events, to connections that did not ask
	over    atomic.Int64 // messages of several events larger than delivery.BatchBytes
}

func (st *batchStats) saw(m message, batch bool) {
	if len(m.events) < 2 {
		return
	}
	if !batch {
		st.v1Multi.Add(1)
	}
	st.multi.Add(1)
	if len(m.raw) > delivery.BatchBytes {
		st.over.Add(1)
	}
}

// TestBatchedDeliveryExact: writers append while each agent's client subscribes, with
// or without batching, resubscribes mid-stream (switching batching), and then hands
// over to a second connection of the opposite kind that supersedes the first — with
// the stream poller redelivering, splitting and reordering batches. Every subscription
// receives exactly from..tip (history checker), 4 rounds (20 under make soak); batches
// reach only the connections that asked, and never exceed BatchBytes.
func TestBatchedDeliveryExact(t *testing.T) {
	t.Parallel()
	e := startFaultStack(t, devstack.Options{PollInterval: 40 * time.Millisecond,
		Faults: eventsource.Faults{Seed: 17, Redeliver: 0.3, Split: 0.3, Reorder: 0.5}})
	rounds := soakRounds(t, "BATCH_ROUNDS", 4, 20)
	const agents, writers, perWriter = 2, 2, 8
	const final = writers * perWriter
	db := dynamolocal.Client(e.stack.DynamoDBEndpoint)
	var stats batchStats
	start := time.Now()
	for round := range rounds {
		var wg sync.WaitGroup
		hs := make([]*history.History, agents)
		names := make([]string, agents)
		for a := range agents {
			agent := fmt.Sprintf("b%d-a%d", round, a)
			names[a] = agent
			hs[a] = history.New()
			tok := e.token(t, agent)
			first := e.dial(t, agent, tok)
			first.hello(agent)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := sessionlog.New(db, e.stack.Tables["LogTable"])
					for i := range perWriter {
						if _, err := l.Append(context.Background(), agent, "test/event", map[string]int{"w": w, "i": i}); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(a)))
				if err := batchedClient(e, agent, tok, first, hs[a], rng, (round+a)%2 == 0, final, &stats); err != nil {
					t.Errorf("%s: %v\n%s", agent, err, hs[a].Summary())
				}
			}()
		}
		wg.Wait()
		for a, agent := range names {
			hs[a].CheckLog(t, fullLog(t, e, agent))
		}
		if t.Failed() {
			t.Fatalf("round %d failed", round)
		}
		t.Logf("round %d done at %v", round, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("%d messages of several events", stats.multi.Load())
	if stats.multi.Load() == 0 {
		t.Errorf("no message carried several events: batching never happened")
	}
	if n := stats.v1Multi.Load(); n > 0 {
		t.Errorf("%d messages of several events went to connections that did not ask for batches", n)
	}
	if n := stats.over.Load(); n > 0 {
		t.Errorf("%d batches exceed %d bytes", n, delivery.BatchBytes)
	}
}

// batchedClient is one agent's client in TestBatchedDeliveryExact: on first (hello
// read) it subscribes from 0..2 with batching set to batch, resubscribes once from a
// seq it has seen with batching flipped, then connects again with batching flipped
// once more — superseding first — and subscribes from 0 (a replay of several events,
// batched if it asked), following until it has every one of final events.
func batchedClient(e env, agent, tok string, first *client, h *history.History, rng *rand.Rand, batch bool, final int64, stats *batchStats) error {
	subscribe := func(c *client, name string, from int64, batch bool) (*history.Sub, error) {
		s := h.Subscribe(name, from)
		return s, sendFrame(c, map[string]any{"type": "subscribe", "from_seq": from, "batch": batch})
	}
	from := int64(rng.IntN(3))
	sub, err := subscribe(first, "first", from, batch)
	if err != nil {
		return err
	}
	resubAt, moveAt := int64(2+rng.IntN(5)), int64(8+rng.IntN(4))
	resubbed := false
	var c *client
	for c = first; ; {
		m, err := c.nextMessage(hang())
		if err != nil {
			return fmt.Errorf("expecting seq %d: %w", sub.Next(), err)
		}
		if f := m.events[0]; f.Type == "replay_truncated" && f.From < f.Req {
			sub.Truncated(f.From) // subscribed past a tip that had not grown yet
			continue
		}
		if m.events[0].Seq == nil {
			return fmt.Errorf("protocol frame %s", m.raw)
		}
		// Batches of the subscription a resubscribe replaced may still arrive on first.
		stats.saw(m, batch || (c == first && resubbed))
		for _, f := range m.events {
			sub.ReceiveID(*f.Seq, eventID(f))
		}
		if err := sub.Err(); err != nil {
			return err
		}
		seen := sub.Next() - 1
		switch {
		case !resubbed && seen >= resubAt:
			resubbed, batch = true, !batch
			if sub, err = subscribe(c, "first", int64(rng.IntN(int(seen)+1)), batch); err != nil {
				return err
			}
		case c == first && seen >= moveAt:
			// The caller moves to a new connection of the other kind.
			sub.Drop()
			batch = !batch
			if c, err = e.tryDial(agent, tok); err != nil {
				return err
			}
			defer c.c.CloseNow()
			if hello, err := c.next(hang()); err != nil || hello.Type != "hello" {
				return fmt.Errorf("second connection: first frame %s (%v), want hello", hello, err)
			}
			if sub, err = subscribe(c, "second", 0, batch); err != nil {
				return err
			}
		case c != first && sub.Reached(final): // the log's tip: every append is in
			return nil
		}
	}
}

// TestFaultSenderKilledBatched is TestFaultSenderKilled for a client that asked for
// batches: a sender SIGKILLed mid-batch leaves a successor that continues from the
// stored cursor, re-sending at most CheckpointEvery events, never skipping one.
func TestFaultSenderKilledBatched(t *testing.T) {
	t.Parallel()
	const agent, n = "killed-batched", 400
	e := startSeededStack(t, agent, n)
	ks := killSender(t, e, agent, n, true)
	ks.expire(t, e, agent)
	if _, err := e.log.Append(context.Background(), agent, "test/event", map[string]string{"after": "kill"}); err != nil {
		t.Fatal(err)
	}
	if err := ks.awaitTip(n+1, hang()); err != nil {
		t.Fatalf("%v\n%s", err, ks.h.Summary())
	}
	if err := resumedAt(ks.sub.Received(), ks.cursor, n+1); err != nil {
		t.Errorf("%v\n%s", err, ks.h.Summary())
	}
	if d := ks.sub.Duplicates(); len(d) > senderCheckpointEvery {
		t.Errorf("%d events came twice, want at most CheckpointEvery = %d", len(d), senderCheckpointEvery)
	}
}
