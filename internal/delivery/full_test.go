package delivery_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	gwtypes "github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/history"
)

// fullPosts is API Gateway in front of a client that stopped reading: while full is
// set, every post is refused with LimitExceededException, which API Gateway also
// answers when "the WebSocket client side buffer is full". The first refusal waits for
// hold to close (nil: it does not wait), so that a test can move the log's tip while a
// sender is in the middle of a post. Every frame refused is kept, in order.
type fullPosts struct {
	delivery.PostAPI
	mu      sync.Mutex
	full    bool
	hold    chan struct{}
	held    chan struct{} // closed at the first refusal
	refused []string
}

func (p *fullPosts) set(full bool, hold chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.full, p.hold, p.held = full, hold, make(chan struct{})
}

func (p *fullPosts) PostToConnection(ctx context.Context, in *apigatewaymanagementapi.PostToConnectionInput, opts ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error) {
	p.mu.Lock()
	if !p.full {
		p.mu.Unlock()
		return p.PostAPI.PostToConnection(ctx, in, opts...)
	}
	p.refused = append(p.refused, string(in.Data))
	hold, held := p.hold, p.held
	p.hold = nil
	p.mu.Unlock()
	if hold != nil {
		close(held)
		<-hold
	}
	return nil, &gwtypes.LimitExceededException{Message: aws.String("injected: client side buffer full")}
}

func (p *fullPosts) refusedFrames() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.refused...)
}

// TestFullClientBufferGetsLagged (protocol: lagged, in API Gateway's shape): a client
// whose buffer is full has its posts refused with LimitExceededException, and a frame
// refused is a frame the client has not received. With outbound_queue 4:
//
//   - a pause within the bound (2 events refused) drops nothing: once the client reads
//     again it gets every event, in order, and no lagged;
//   - a sender whose post is refused while the log's tip moves more than 4 events past
//     its cursor closes the connection with lagged at once, its lagged frame refused
//     too (the buffer is still full), then DeleteConnection: the client sees a normal
//     close and no event past the pause.
//
// The rig has no stream consumer and the events past the bound are appended without
// waking the fast path, so only the refused post's own check can find the reader
// lagging: without it the sender gives up (ErrPost) and the socket stays open.
func TestFullClientBufferGetsLagged(t *testing.T) {
	t.Parallel()
	fp := &fullPosts{}
	r := startRig(t, rigConfig{
		posts: func(p delivery.PostAPI) delivery.PostAPI { fp.PostAPI = p; return fp },
		cfg:   delivery.Config{OutboundQueue: 4},
	})
	const agent = "full"
	tok := r.token(t, agent)
	if _, err := r.log.Create(context.Background(), agent); err != nil {
		t.Fatal(err)
	}
	c := r.dial(t, agent, tok)
	c.hello(t)
	h := history.New()
	s := c.subscribe(t, h, "c", 0)
	if err := c.follow(s, 0, patience); err != nil {
		t.Fatal(err)
	}

	// A pause within the bound: seqs 1 and 2 refused, then taken.
	hold := make(chan struct{})
	fp.set(true, hold)
	r.appendN(t, r.log, agent, 1, "paused")
	<-fp.held
	if _, err := r.log.Append(context.Background(), agent, "test/event", map[string]any{"tag": "paused"}); err != nil {
		t.Fatal(err)
	}
	close(hold)
	r.fast.FlushAll() // the sender gave its post up (ErrPost): seqs 1–2 within the bound of 4
	fp.set(false, nil)
	r.appendN(t, r.log, agent, 1, "read again") // seq 3 wakes a sender from the cursor, 1
	if err := c.follow(s, 3, patience); err != nil {
		t.Fatalf("after a pause within the bound: %v", err)
	}
	for _, f := range fp.refusedFrames() {
		if strings.Contains(f, `"lagged"`) {
			t.Fatalf("lagged posted after a pause within the bound: %s", f)
		}
	}

	// Past the bound: seq 4 refused while seqs 5–9 are appended with no wake.
	hold = make(chan struct{})
	fp.set(true, hold)
	r.appendN(t, r.log, agent, 1, "stalled")
	<-fp.held
	for i := range 5 {
		if _, err := r.log.Append(context.Background(), agent, "test/event", map[string]any{"tag": "unseen", "i": i}); err != nil {
			t.Fatal(err)
		}
	}
	close(hold)
	f, err := c.next(patience)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("past the bound: frame %s (%v), want the connection closed (1000)", f.raw, err)
	}
	refused := fp.refusedFrames()
	if last := refused[len(refused)-1]; !strings.Contains(last, `"code":"lagged"`) {
		t.Fatalf("the last frame posted before the close is %s, want the lagged error frame", last)
	}
}
