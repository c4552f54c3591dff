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

// goneFirst answers GoneException to the first goneFor posts (-1: every post), as API
// Gateway does while $connect has not completed and after the client left, and passes
// the others through. It notes when the first post came and how many came in all.
type goneFirst struct {
	delivery.PostAPI
	goneFor   int
	mu        sync.Mutex
	posts     int
	first     time.Time
	firstPost chan struct{} // closed at the first post
	once      sync.Once
}

func (p *goneFirst) PostToConnection(ctx context.Context, in *apigatewaymanagementapi.PostToConnectionInput, opts ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error) {
	p.mu.Lock()
	p.posts++
	n := p.posts
	if n == 1 {
		p.first = time.Now()
	}
	p.mu.Unlock()
	p.once.Do(func() { close(p.firstPost) })
	if p.goneFor < 0 || n <= p.goneFor {
		return nil, &gwtypes.GoneException{Message: aws.String("injected: gone " + aws.ToString(in.ConnectionId))}
	}
	return p.PostAPI.PostToConnection(ctx, in, opts...)
}

func (p *goneFirst) count() (int, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.posts, p.first
}

// helloEnd is one first-frame loop's end, as a delivery.HelloObserver hears it.
type helloEnd struct {
	conn  string
	end   delivery.HelloEnd
	posts int
	at    time.Time
}

// helloEnds is a delivery.HelloObserver that hands each end to a channel.
type helloEnds chan helloEnd

func (helloEnds) ReplayRead(bool) {}

func (h helloEnds) HelloEnded(conn string, end delivery.HelloEnd, posts int) {
	h <- helloEnd{conn, end, posts, time.Now()}
}

func (h helloEnds) next(t *testing.T, what string) helloEnd {
	t.Helper()
	select {
	case e := <-h:
		return e
	case <-time.After(patience):
		t.Fatalf("no first-frame loop ended within %s (%s)", patience, what)
		return helloEnd{}
	}
}

// TestRefusedHangUpEndsDeliver: a client that completes the handshake without a token
// and hangs up at once holds the deliver invocation that posts its unauthorized frame
// only until $disconnect has run — not for the hello grace (the default, 30 s, here),
// although every post of the frame answers Gone, as it does both before the socket is
// open and after the client left. $disconnect finds no record of the refused socket and
// records its departure; the loop reads it at its next Gone, ends for that reason
// (delivery.HelloLeft) with at most one post after $disconnect, and the invocation
// returns. The wall time from deliver's first post to the loop's end is bounded at half
// the grace: the one time bound of these tests, because holding the invocation for the
// grace is the failure; on an idle machine it is under 0.2 s, and what a loaded one adds
// is $disconnect's own DynamoDB calls (seconds each at worst), so the bound has room for
// them and still fails a loop that waits out the grace (at the default $connect throttle of 50 a
// second, 1,500 concurrent invocations). Two orders: the client hangs up at once (its
// $disconnect may come before the loop's first post), and after the first Gone.
//
// A refused client whose socket opens late still gets its frame: its posts answer Gone
// a few times, then the frame is taken (delivery.HelloPosted), and nothing ends the
// loop early meanwhile.
func TestRefusedHangUpEndsDeliver(t *testing.T) {
	t.Parallel()
	grace := delivery.DefaultHelloGrace
	for _, tc := range []struct {
		name       string
		afterFirst bool // hang up after the first Gone, not at once
	}{
		{"hangs up at once", false},
		{"hangs up after the first Gone", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &goneFirst{goneFor: -1, firstPost: make(chan struct{})}
			ends := make(helloEnds, 4)
			disconnected := make(chan string, 1)
			r := startRig(t, rigConfig{
				posts:        func(inner delivery.PostAPI) delivery.PostAPI { p.PostAPI = inner; return p },
				cfg:          delivery.Config{Observer: ends},
				disconnected: disconnected,
			})
			r.token(t, "a") // the agent has a token; the client presents none
			c := r.dial(t, "a", "")
			if tc.afterFirst {
				select {
				case <-p.firstPost:
				case <-time.After(patience):
					t.Fatal("the unauthorized frame was never posted")
				}
			}
			if err := c.c.CloseNow(); err != nil {
				t.Fatal(err)
			}
			var conn string
			select {
			case conn = <-disconnected:
			case <-time.After(patience):
				t.Fatal("$disconnect did not run")
			}
			atDisconnect, _ := p.count()
			e := ends.next(t, "the refused connection's")
			r.kicks.settled(t) // the deliver invocation has returned
			posts, first := p.count()
			elapsed := e.at.Sub(first)
			t.Logf("deliver posted %d times (%d before $disconnect had run) over %s", posts, atDisconnect, elapsed)
			if e.conn != conn || e.end != delivery.HelloLeft {
				t.Fatalf("the loop of %s ended %q; want %s ended %q (the client left)", e.conn, e.end, conn, delivery.HelloLeft)
			}
			if posts > atDisconnect+1 || e.posts != posts {
				t.Errorf("%d posts (the loop counted %d), %d when $disconnect had run: want at most one more", posts, e.posts, atDisconnect)
			}
			if bound := grace / 2; elapsed >= bound {
				t.Errorf("deliver spent %s on a refused connection that left; want under %s (the grace is %s)", elapsed, bound, grace)
			}
		})
	}
	t.Run("opens late and stays", func(t *testing.T) {
		t.Parallel()
		const gone = 3
		p := &goneFirst{goneFor: gone, firstPost: make(chan struct{})}
		ends := make(helloEnds, 4)
		r := startRig(t, rigConfig{
			posts: func(inner delivery.PostAPI) delivery.PostAPI { p.PostAPI = inner; return p },
			cfg:   delivery.Config{Observer: ends},
		})
		r.token(t, "a")
		c := r.dial(t, "a", "")
		f, err := c.next(patience)
		if err != nil || f.Type != "error" || f.Code != "unauthorized" {
			t.Fatalf("first frame %s (%v); want error unauthorized", f.raw, err)
		}
		if e := ends.next(t, "the refused connection's"); e.end != delivery.HelloPosted || e.posts != gone+1 {
			t.Errorf("the loop ended %q after %d posts; want %q after %d", e.end, e.posts, delivery.HelloPosted, gone+1)
		}
	})
}
