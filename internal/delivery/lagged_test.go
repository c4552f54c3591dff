package delivery_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/history"
)

// heldPosts is a gateway in front of a client that stopped reading: once hold is set,
// the next post waits until it is released, then goes through — the local gateway
// holding a post for its write timeout, or API Gateway's refusals being retried.
type heldPosts struct {
	delivery.PostAPI
	mu      sync.Mutex
	hold    chan struct{} // the next post waits for it to close
	waiting chan struct{} // closed once that post waits
}

// set makes the next post wait until release is called; waiting closes when it does.
func (p *heldPosts) set() (waiting chan struct{}, release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	hold := make(chan struct{})
	p.hold, p.waiting = hold, make(chan struct{})
	return p.waiting, func() { close(hold) }
}

func (p *heldPosts) PostToConnection(ctx context.Context, in *apigatewaymanagementapi.PostToConnectionInput, opts ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error) {
	p.mu.Lock()
	hold, waiting := p.hold, p.waiting
	p.hold = nil
	p.mu.Unlock()
	if hold != nil {
		close(waiting)
		<-hold
	}
	return p.PostAPI.PostToConnection(ctx, in, opts...)
}

// tipReads counts, per tip, the reads of the log's tip that answered it.
type tipReads struct {
	delivery.LogReader
	mu   sync.Mutex
	seen map[int64]int
}

func (r *tipReads) Tip(ctx context.Context, session string) (int64, error) {
	tip, err := r.LogReader.Tip(ctx, session)
	if err == nil {
		r.mu.Lock()
		r.seen[tip]++
		r.mu.Unlock()
	}
	return tip, err
}

func (r *tipReads) count(tip int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[tip]
}

// TestPausedReaderLaggedWhilePostWaits (protocol: lagged; docs/architecture.md, "Flow
// control and lagged"): a reader in the live tail stops reading, so a post to it waits
// — and waits for as long as the test holds it. Events keep being appended with no
// wake-up, so only the sender's watch of the bound while its post waits can find the
// reader behind. With outbound_queue 4 and 5 events received:
//
//   - a post held while the tip is 4 events past the cursor (seqs 6–9, seq 6 the frame
//     held): two peeks at that tip drop nothing, and once the client reads again it
//     gets every event, with no lagged;
//   - one more event (seq 10, 5 past the cursor) and the connection is lagged while the
//     post is still held: the record says so before the post answers, never more than
//     2×4 events past what the client received. Released, the held frame (seq 6) comes,
//     then lagged, then a normal close.
//
// Without the watch the sender waits in the held post and nothing drops the reader.
func TestPausedReaderLaggedWhilePostWaits(t *testing.T) {
	t.Parallel()
	const queue = 4
	hp := &heldPosts{}
	tips := &tipReads{seen: map[int64]int{}}
	r := startRig(t, rigConfig{
		posts: func(p delivery.PostAPI) delivery.PostAPI { hp.PostAPI = p; return hp },
		logs:  func(l delivery.LogReader) delivery.LogReader { tips.LogReader = l; return tips },
		cfg:   delivery.Config{OutboundQueue: queue},
	})
	const agent = "paused"
	ctx := context.Background()
	tok := r.token(t, agent)
	if _, err := r.log.Create(ctx, agent); err != nil {
		t.Fatal(err)
	}
	c := r.dial(t, agent, tok)
	c.hello(t)
	h := history.New()
	s := c.subscribe(t, h, "c", 0)
	// Seqs 1–5, received, in two steps: never more than 3 past the cursor, so that a
	// post slower than watchAfter (a loaded machine) finds no reader behind yet.
	for _, step := range []struct {
		n    int
		upTo int64
	}{{2, 2}, {3, 5}} {
		r.appendN(t, r.log, agent, step.n, "read")
		if err := c.follow(s, step.upTo, patience); err != nil {
			t.Fatal(err)
		}
	}
	r.fast.FlushAll()
	o, err := r.conns.Owner(ctx, agent)
	if err != nil {
		t.Fatal(err)
	}
	state := func() connections.State {
		t.Helper()
		cn, err := r.conns.Conn(ctx, o.ConnID)
		if err != nil {
			t.Fatalf("conn %s: %v", o.ConnID, err)
		}
		return cn.State
	}
	appendQuiet := func(n int) { // no wake-up: only the sender's own peeks see these
		t.Helper()
		for i := range n {
			if _, err := r.log.Append(ctx, agent, "test/event", map[string]any{"tag": "unseen", "i": i}); err != nil {
				t.Fatal(err)
			}
		}
	}
	peeked := func(tip int64, n int) {
		t.Helper()
		hang.UntilNil(t, fmt.Sprintf("%d peeks at tip %d while the post waits", n, tip), func() error {
			if got := tips.count(tip); got < n {
				return fmt.Errorf("%d peeks", got)
			}
			return nil
		})
	}

	// Within the bound: seq 6 held, the tip 4 past the cursor.
	waiting, release := hp.set()
	r.appendN(t, r.log, agent, 1, "held") // seq 6
	<-waiting
	appendQuiet(3) // seqs 7–9
	peeked(9, 2)   // the second peek follows a first that dropped nothing
	if st := state(); st == connections.StateLagged {
		t.Fatalf("state %s with the tip %d events past the cursor, want the bound (%d) kept", st, queue, queue)
	}
	release()
	r.fast.FlushAll()
	r.appendN(t, r.log, agent, 1, "read again") // seq 10 wakes a sender from the cursor, 7
	if err := c.follow(s, 10, patience); err != nil {
		t.Fatalf("after a wait within the bound: %v", err)
	}
	r.fast.FlushAll()

	// Past the bound: seq 11 held; 10 received.
	waiting, release = hp.set()
	defer func() {
		if release != nil {
			release()
		}
	}()
	r.appendN(t, r.log, agent, 1, "held") // seq 11
	<-waiting
	appendQuiet(3) // seqs 12–14: 4 past the cursor
	peeked(14, 2)
	if st := state(); st == connections.StateLagged {
		t.Fatalf("state %s with the tip %d events past the cursor, want the bound (%d) kept", st, queue, queue)
	}
	appendQuiet(1) // seq 15: 5 past the cursor, 5 past the last event received
	hang.UntilNil(t, "the connection lagged while its post waits", func() error {
		if st := state(); st != connections.StateLagged {
			return fmt.Errorf("state %q", st)
		}
		return nil
	})
	release()
	release = nil
	if err := c.follow(s, 11, patience); err != nil {
		t.Fatalf("the held frame: %v", err)
	}
	if f, err := c.next(patience); err != nil || f.Type != "error" || f.Code != "lagged" {
		t.Fatalf("after the held frame: %s (%v), want lagged", f.raw, err)
	}
	if f, err := c.next(patience); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after lagged: %s (%v), want a normal close", f.raw, err)
	}
}
