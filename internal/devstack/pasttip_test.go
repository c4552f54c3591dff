package devstack_test

import (
	"context"
	"testing"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	hangbound "github.com/terret/terret-ws/internal/hang"
)

// TestSubscribePastTip: a subscribe past the log's tip (tip 0, from_seq 5) is never
// silent: the stream starts at the tip + 1, announced by
// replay_truncated{requested_from_seq 5, from_seq 1} before seq 1.
func TestSubscribePastTip(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	c := e.dial(t, "a1", tok)
	if h := c.hello("a1"); h.Last != 0 {
		t.Fatalf("hello last_seq %d, want 0", h.Last)
	}
	c.send(`{"type":"subscribe","from_seq":5}`)
	// Append only once the subscribe took effect, so that it saw the tip at 0.
	conns := connections.New(dynamolocal.Client(e.stack.DynamoDBEndpoint), e.stack.Tables["ConnectionsTable"])
	hangbound.Until(t, "the subscribe recorded", func() bool {
		o, err := conns.Owner(context.Background(), "a1")
		if err != nil {
			t.Fatal(err)
		}
		return o.Sub > 0
	})
	appendN(t, e.log, "a1", 3)
	f := c.must(hang())
	if f.Type != "replay_truncated" || f.Req != 5 || f.From != 1 || f.Seq != nil {
		t.Fatalf("first frame after subscribe %s, want replay_truncated{requested_from_seq 5, from_seq 1}", f)
	}
	c.events(1, 3)
	// A plain tail (from_seq = tip + 1) is not announced.
	c.send(`{"type":"subscribe","from_seq":4}`)
	appendN(t, e.log, "a1", 1)
	c.events(4, 4)
}

// TestSubscribePastTipIdle: on an idle log the replay_truncated of a subscribe past the
// tip comes at once, not with the next event (which may be hours away); the events
// appended afterwards follow it from the tip + 1, and it is not sent again.
func TestSubscribePastTipIdle(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	c := e.dial(t, "a1", tok)
	c.hello("a1")
	appendN(t, e.log, "a1", 2) // tip 2; not sent: nothing is subscribed yet
	c.send(`{"type":"subscribe","from_seq":9}`)
	f := c.must(hang()) // nothing is appended before it
	if f.Type != "replay_truncated" || f.Req != 9 || f.From != 3 || f.Seq != nil {
		t.Fatalf("first frame after subscribe %s, want replay_truncated{requested_from_seq 9, from_seq 3}", f)
	}
	appendN(t, e.log, "a1", 2)
	c.events(3, 4)
}
