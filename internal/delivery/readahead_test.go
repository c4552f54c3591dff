package delivery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/history"
	"github.com/terret/terret-ws/internal/protocol"
)

// TestReadAheadHistory: replays of many small pages, each read one page ahead of its
// posts under two replay slots shared by three agents, while each agent's client
// resubscribes mid-replay three times — back to a seq it has seen, in the page being
// posted or pages before it, while the sender reads ahead — switching batching, and a
// writer appends to the live tail.
// Every subscription receives exactly from..tip (history checker), over DynamoDB
// Local.
func TestReadAheadHistory(t *testing.T) {
	t.Parallel()
	r := startRig(t, rigConfig{cfg: delivery.Config{ReplayPage: 4, CheckpointEvery: 8, MaxConcurrentReplays: 2}})
	rounds := 2
	if testing.Short() {
		rounds = 1
	}
	const agents, seeded, live = 3, 30, 10
	const final = seeded + live // seq 0 is session/created
	began := time.Now()
	for round := range rounds {
		var wg sync.WaitGroup
		hs := make([]*history.History, agents)
		names := make([]string, agents)
		for a := range agents {
			names[a], hs[a] = fmt.Sprintf("ra%d-%d", round, a), history.New()
		}
		seed(t, r, names, seeded)
		for a, agent := range names {
			c := r.dial(t, agent, r.token(t, agent))
			c.hello(t)
			rng := rand.New(rand.NewPCG(uint64(round), uint64(a)))
			wg.Add(2)
			go func() {
				defer wg.Done()
				if err := resubscribingClient(c, hs[a], rng, seeded, final); err != nil {
					t.Errorf("%s: %v\n%s", agent, err, hs[a].Summary())
				}
			}()
			go func() {
				defer wg.Done()
				r.appendN(t, r.log, agent, live, "live")
			}()
		}
		wg.Wait()
		for a, agent := range names {
			hs[a].CheckLog(t, readAll(t, r.log, agent))
		}
		if t.Failed() {
			t.Fatalf("round %d failed", round)
		}
		t.Logf("round %d done at %v", round, time.Since(began).Round(time.Millisecond))
	}
	r.kicks.settled(t)
}

// seed creates each session and appends n events to it, the sessions at once.
func seed(t *testing.T, r *rig, sessions []string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for _, session := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.log.Create(context.Background(), session); err != nil {
				t.Error(err)
				return
			}
			for i := range n {
				if _, err := r.log.Append(context.Background(), session, "test/event", map[string]int{"i": i}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// resubscribingClient subscribes c from a seq in the first page, then, each time it
// has received a few more events, resubscribes from a random seq it has seen (three
// times), switching batching each time; then it follows to final.
func resubscribingClient(c *wsClient, h *history.History, rng *rand.Rand, seeded, final int64) error {
	batch := rng.IntN(2) == 0
	subscribe := func(from int64) (*history.Sub, error) {
		s := h.Subscribe("c", from)
		b, _ := json.Marshal(map[string]any{"type": "subscribe", "from_seq": from, "batch": batch})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return s, c.c.Write(ctx, websocket.MessageText, b)
	}
	sub, err := subscribe(int64(rng.IntN(4)))
	if err != nil {
		return err
	}
	resubs := 3
	at := sub.Next() + 3 + int64(rng.IntN(6))
	for !sub.Reached(final) {
		f, err := c.next(patience)
		if err != nil {
			return fmt.Errorf("expecting seq %d: %w", sub.Next(), err)
		}
		parts := []string{f.raw}
		if strings.Contains(f.raw, "\n") {
			parts = strings.Split(f.raw, "\n")
		}
		for _, p := range parts {
			var ev wsFrame
			if err := json.Unmarshal([]byte(p), &ev); err != nil {
				return fmt.Errorf("frame %q: %w", p, err)
			}
			if ev.Seq == nil {
				return fmt.Errorf("protocol frame %s", p)
			}
			sub.ReceiveID(*ev.Seq, ev.ID)
		}
		if err := sub.Err(); err != nil {
			return err
		}
		if seen := sub.Next() - 1; resubs > 0 && seen >= at {
			resubs--
			batch = !batch
			// At or before the last seq seen: frames of the replaced subscription still in
			// flight come after it, and the client tells them apart (docs/protocol.md). A
			// resubscribe ahead of it is ambiguous for any server.
			from := int64(rng.IntN(int(seen) + 1))
			if sub, err = subscribe(from); err != nil {
				return err
			}
			at = seen + 3 + int64(rng.IntN(6))
		}
	}
	return nil
}

// hookedPosts runs after each event frame posted, on the sender's goroutine: a test's
// way to act at an exact point of a sender's work.
type hookedPosts struct {
	delivery.PostAPI
	after func(connID string, seq int64)
}

func (p *hookedPosts) PostToConnection(ctx context.Context, in *apigatewaymanagementapi.PostToConnectionInput, opts ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error) {
	out, err := p.PostAPI.PostToConnection(ctx, in, opts...)
	var f wsFrame
	if err == nil && json.Unmarshal(in.Data, &f) == nil && f.Seq != nil {
		p.after(aws.ToString(in.ConnectionId), *f.Seq)
	}
	return out, err
}

// readAheadGate closes reached[agent] once the second replay read of agent has read
// its page: the first page is awaited, the second is read ahead.
type readAheadGate struct {
	reads   sync.Map // agent → *atomic.Int32
	reached map[string]chan struct{}
}

func (g *readAheadGate) ReplayRead(bool) {}

func (g *readAheadGate) Wait(point, agentID string) {
	ch, ok := g.reached[agentID]
	if point != delivery.GateReplayRead || !ok {
		return
	}
	n, _ := g.reads.LoadOrStore(agentID, new(atomic.Int32))
	if n.(*atomic.Int32).Add(1) == 2 {
		close(ch)
	}
}

// TestReadAheadDroppedOnResubscribe is TestReadAheadNeverPostedStale's resubscribe over
// DynamoDB Local and the local gateway: right after seq 1 of the first page (0…2) is
// posted, with the second page (3…5) already read ahead, the connection resubscribes
// (from 1, back into the first page, or from 7, past the page read ahead). Every frame
// after that is the new subscription's, from its from_seq on, exactly: the page read
// ahead for the old one is never posted. CheckpointEvery 1 makes the sender write its
// cursor before each post, so it learns of the resubscribe before its next post.
func TestReadAheadDroppedOnResubscribe(t *testing.T) {
	t.Parallel()
	froms := map[string]int64{"rd1": 1, "rd7": 7}
	gate := &readAheadGate{reached: map[string]chan struct{}{}}
	for agent := range froms {
		gate.reached[agent] = make(chan struct{})
	}
	var r *rig
	var conns sync.Map // connection → agent
	var acted sync.Map // agent → struct{}
	hook := func(connID string, seq int64) {
		a, ok := conns.Load(connID)
		if !ok || seq != 1 {
			return
		}
		agent := a.(string)
		if _, done := acted.LoadOrStore(agent, struct{}{}); done {
			return
		}
		<-gate.reached[agent]
		ctx := protocol.WithStamp(context.Background(), protocol.Stamp{At: time.Now().UnixMilli() + 1000})
		if err := r.d.Subscribe(ctx, agent, connID, froms[agent], false); err != nil {
			t.Errorf("resubscribe %s from %d: %v", agent, froms[agent], err)
		}
	}
	r = startRig(t, rigConfig{
		cfg:   delivery.Config{ReplayPage: 3, CheckpointEvery: 1, Observer: gate},
		posts: func(p delivery.PostAPI) delivery.PostAPI { return &hookedPosts{PostAPI: p, after: hook} },
	})
	var agents []string
	for agent := range froms {
		agents = append(agents, agent)
	}
	seed(t, r, agents, 8) // seqs 0 (session/created) … 8
	clients := map[string]*wsClient{}
	for _, agent := range agents {
		c := r.dial(t, agent, r.token(t, agent))
		c.hello(t)
		o, err := r.conns.Owner(context.Background(), agent)
		if err != nil {
			t.Fatal(err)
		}
		conns.Store(o.ConnID, agent)
		c.send(t, `{"type":"subscribe","from_seq":0}`)
		clients[agent] = c
	}
	for _, agent := range agents {
		c, from := clients[agent], froms[agent]
		var got []int64
		for len(got) < 2 || got[len(got)-1] != 8 {
			f, err := c.next(patience)
			if err != nil || f.Seq == nil {
				t.Fatalf("%s after %v: frame %s (%v), want an event", agent, got, f.raw, err)
			}
			got = append(got, *f.Seq)
		}
		want := []int64{0, 1}
		for s := from; s <= 8; s++ {
			want = append(want, s)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s events = %v; want %v: 0 and 1, then the new subscription's from %d on", agent, got, want, from)
		}
	}
}
