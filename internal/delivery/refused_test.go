package delivery

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	gwtypes "github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"

	"github.com/terret/terret-ws/internal/protocol"
)

// goneSocket answers every post GoneException and calls onPost, if set, with the
// post's number (from 1) first. It counts posts and deletes.
type goneSocket struct {
	mu             sync.Mutex
	posts, deletes int
	onPost         func(n int)
}

func (s *goneSocket) PostToConnection(_ context.Context, in *apigatewaymanagementapi.PostToConnectionInput, _ ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error) {
	s.mu.Lock()
	s.posts++
	n := s.posts
	s.mu.Unlock()
	if s.onPost != nil {
		s.onPost(n)
	}
	return nil, &gwtypes.GoneException{Message: aws.String("gone " + aws.ToString(in.ConnectionId))}
}

func (s *goneSocket) DeleteConnection(context.Context, *apigatewaymanagementapi.DeleteConnectionInput, ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.DeleteConnectionOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deletes++
	return nil, &gwtypes.GoneException{}
}

// lastHelloEnd is a HelloObserver that keeps the last end it heard.
type lastHelloEnd struct {
	mu    sync.Mutex
	end   HelloEnd
	posts int
}

func (*lastHelloEnd) ReplayRead(bool) {}

func (o *lastHelloEnd) HelloEnded(_ string, end HelloEnd, posts int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.end, o.posts = end, posts
}

// TestRefusedDeparture: the unauthorized frame of a refused connection (KickDrop, no
// conn# record) is posted until $disconnect has recorded the client's departure, in
// either order of the two: recorded before deliver's first post, the loop ends after
// that one post; recorded while the frame is being posted again (at the second post),
// it ends after the post that met it. The loop ends because the client left
// (HelloLeft), nothing is deleted, and the invocation succeeds. The grace is an hour
// and the invocation's context ten seconds: a loop that missed the departure would end
// on the context, failed.
func TestRefusedDeparture(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		departAt  int // the post at which $disconnect records the departure; 0: before the first
		wantPosts int
	}{
		{"departed before the first post", 0, 1},
		{"departed at the second post", 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			records := newMemRecords()
			sock := &goneSocket{}
			if tc.departAt == 0 {
				records.depart("cx")
			} else {
				sock.onPost = func(n int) {
					if n == tc.departAt {
						records.depart("cx")
					}
				}
			}
			obs := &lastHelloEnd{}
			d := newDeliverer(Config{DeliverFunction: "deliver", HelloGrace: time.Hour, Observer: obs, Logger: discardLogger()},
				&memLog{}, records, memSlots{}, sock, &kickLog{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := d.HandleKick(ctx, Kick{Kind: KickDrop, ConnectionID: "cx", Code: protocol.CodeUnauthorized}); err != nil {
				t.Fatalf("HandleKick = %v; want nil (the client left)", err)
			}
			if obs.end != HelloLeft || obs.posts != tc.wantPosts || sock.posts != tc.wantPosts || sock.deletes != 0 {
				t.Errorf("the loop ended %q after %d posts (%d posted, %d deletes); want %q after %d, no delete",
					obs.end, obs.posts, sock.posts, sock.deletes, HelloLeft, tc.wantPosts)
			}
		})
	}
}
