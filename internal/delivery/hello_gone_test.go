package delivery_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	gwtypes "github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"

	"github.com/terret/terret-ws/internal/delivery"
)

// notOpen answers GoneException to every post, as API Gateway does both while $connect
// has not completed and after the client left, and counts the posts. firstGone is
// closed at the first one.
type notOpen struct {
	delivery.PostAPI
	mu        sync.Mutex
	posts     int
	firstGone chan struct{}
	once      sync.Once
}

func (p *notOpen) PostToConnection(_ context.Context, in *apigatewaymanagementapi.PostToConnectionInput, _ ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error) {
	p.mu.Lock()
	p.posts++
	p.mu.Unlock()
	p.once.Do(func() { close(p.firstGone) })
	return nil, &gwtypes.GoneException{Message: aws.String("injected: gone " + aws.ToString(in.ConnectionId))}
}

func (p *notOpen) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.posts
}

// TestHelloLoopEndsOnDisconnect: a client that hangs up while hello is still answered
// Gone stops the hello loop as soon as $disconnect has run — at most one more post
// after it — although the grace (10 minutes here) is far from over. Without the check
// of the conn# record the loop would post until the grace ran out and the deliver
// invocation would not finish within the test's patience.
func TestHelloLoopEndsOnDisconnect(t *testing.T) {
	t.Parallel()
	for round := range 3 {
		p := &notOpen{firstGone: make(chan struct{})}
		disconnected := make(chan string, 1)
		r := startRig(t, rigConfig{
			posts:        func(inner delivery.PostAPI) delivery.PostAPI { p.PostAPI = inner; return p },
			cfg:          delivery.Config{HelloGrace: 10 * time.Minute},
			disconnected: disconnected,
		})
		agent := "hangs-up-" + string(rune('a'+round))
		c := r.dial(t, agent, r.token(t, agent))
		select {
		case <-p.firstGone:
		case <-time.After(patience):
			t.Fatal("hello was never posted")
		}
		if err := c.c.CloseNow(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-disconnected:
		case <-time.After(patience):
			t.Fatal("$disconnect did not run")
		}
		atDisconnect := p.count()
		r.kicks.settled(t) // the connect's deliver invocation has returned
		if got := p.count(); got > atDisconnect+1 {
			t.Errorf("round %d: %d posts of hello, %d when $disconnect had run: want at most one more", round, got, atDisconnect)
		}
		t.Logf("round %d: %d posts of hello in all, %d before $disconnect", round, p.count(), atDisconnect)
	}
}
