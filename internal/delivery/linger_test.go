package delivery_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/history"
)

// acquisitions counts the lease acquisitions (connections.Store.Acquire) made through a
// DynamoDB client that took the lease; attempts that found it held are not counted.
type acquisitions struct{ n atomic.Int64 }

func (a *acquisitions) addTo(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("CountAcquire",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleInitialize(ctx, in)
			if u, ok := in.Parameters.(*dynamodb.UpdateItemInput); ok && err == nil && strings.HasPrefix(aws.ToString(u.UpdateExpression), "SET #lease = :me") {
				a.n.Add(1)
			}
			return out, md, err
		}), middleware.After)
}

// TestFastPathLingers: events an appender streams one after another (a turn's chunks)
// go out under one lease — a handful of lease acquisitions for a hundred events, not one
// each — and a resubscribe in the middle of the stream is served within about a second
// (the sender's lingerLook), while the stream is still going, not when it pauses.
func TestFastPathLingers(t *testing.T) {
	t.Parallel()
	acq := &acquisitions{}
	db := dynamodb.NewFromConfig(dynamolocal.Config(), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(dynamotest.Endpoint(t))
		o.APIOptions = append(o.APIOptions, acq.addTo)
	})
	// Cursor writes only every 1,000 posts, so that nothing but the linger's own look
	// can make the sender notice the resubscribe while the stream goes on.
	r := startRig(t, rigConfig{db: db, names: dynamotest.CreateTables(t), cfg: delivery.Config{CheckpointEvery: 1000}})
	const agent, n, resubAt, from = "streaming", 100, 20, 5
	ctx := context.Background()
	c := r.dial(t, agent, r.token(t, agent))
	c.hello(t)
	h := history.New()
	s := c.subscribe(t, h, "c", 0)
	if err := c.follow(s, 0, patience); err != nil {
		t.Fatal(err)
	}
	before := acq.n.Load()

	// The appender: n events, 30 ms apart, each handed to the fast path as the runtime
	// does.
	var written, longGaps atomic.Int64
	writerDone := make(chan error, 1)
	go func() {
		last := time.Now()
		for i := range n {
			ev, err := r.log.Append(ctx, agent, "assistant/chunk", map[string]any{"text": "x", "index": i})
			if err != nil {
				writerDone <- err
				return
			}
			r.fast.OnAppend(ctx, ev)
			if now := time.Now(); i > 0 && now.Sub(last) > 200*time.Millisecond {
				longGaps.Add(1) // a slow append (a loaded machine): the sender may let go
			}
			last = time.Now()
			written.Store(ev.Seq)
			time.Sleep(30 * time.Millisecond)
		}
		writerDone <- nil
	}()
	if err := c.follow(s, resubAt, patience); err != nil {
		t.Fatal(err)
	}
	s.Drop()
	resubscribed := time.Now()
	s2 := c.subscribe(t, h, "c2", from)
	// Frames of the replaced subscription may still come before from_seq (the spec lets
	// the client discard them); the new one starts at from_seq.
	for {
		f, err := c.next(patience)
		if err != nil {
			t.Fatalf("waiting for the resubscription's first event: %v", err)
		}
		if f.Seq != nil && *f.Seq == from {
			s2.ReceiveID(*f.Seq, f.ID)
			break
		}
	}
	took, tipThen := time.Since(resubscribed), written.Load()
	t.Logf("resubscribe served after %v, the appender at seq %d of %d", took.Round(time.Millisecond), tipThen, n)
	if tipThen >= n {
		t.Errorf("the resubscribe was served only after the stream ended (%v): a lingering sender must look at the record every second", took)
	}
	if err := c.follow(s2, n, patience); err != nil {
		t.Fatal(err)
	}
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	r.fast.FlushAll()
	// One acquisition to start, one per gap long enough for the sender to let go, and a
	// few around the resubscribe (its replay, a hand-over, a watcher); counted before
	// settle's marker.
	got, gaps := acq.n.Load()-before, longGaps.Load()
	r.settle(t, c, s2, agent, n)
	h.CheckLog(t, readAll(t, r.log, agent))
	t.Logf("%d lease acquisitions for %d streamed events (%d gaps over 200 ms)", got, n, gaps)
	if got > gaps+6 {
		t.Errorf("%d lease acquisitions for %d events streamed 30 ms apart with %d long gaps: the fast path does not linger", got, n, gaps)
	}
}
