package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/protocol"
)

type cancelTag struct{}

// inboxLooks counts, per cancel (the cancelTag its context carries), the Queries of
// the agent's inbox: a cancel that waits for a wake in flight looks again after each
// pause.
type inboxLooks struct {
	agent.DB
	mu    sync.Mutex
	looks map[int]int
}

func (l *inboxLooks) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if tag, ok := ctx.Value(cancelTag{}).(int); ok && in.KeyConditionExpression != nil && strings.Contains(*in.KeyConditionExpression, "BETWEEN") {
		l.mu.Lock()
		l.looks[tag]++
		l.mu.Unlock()
	}
	return l.DB.Query(ctx, in, o...)
}

// TestCancelWaitsBounded: cancels from a client that does not number its frames, sent
// together to an idle agent, do not each hold their handler for InFlightBound: at most
// MaxWaitingCancels of them wait for a wake still in flight; the others answer
// not_running after one look. Every one answers not_running.
func TestCancelWaitsBounded(t *testing.T) {
	t.Parallel()
	looks := &inboxLooks{looks: map[int]int{}}
	e := newEnv(t, opts{wrapDB: func(db agent.DB) agent.DB { looks.DB = db; return looks }})
	const n = 8
	// Received a little ahead of now, so that every cancel is inside its wait
	// (InFlightBound after its receipt) when it first looks, however loaded the machine.
	const ahead = 5 * time.Second
	base := time.Now().Add(ahead).UnixMilli()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := protocol.WithStamp(context.WithValue(e.ctx, cancelTag{}, i), protocol.Stamp{At: base + int64(i)})
			errs[i] = e.svc.Cancel(ctx, e.agentID, "stop")
		}()
	}
	wg.Wait()
	waited := 0
	for i, err := range errs {
		if !errors.Is(err, agent.ErrNotRunning) {
			t.Errorf("cancel %d: %v; want not running", i, err)
		}
		if looks.looks[i] > 1 {
			waited++
		}
	}
	if waited == 0 || waited > agent.MaxWaitingCancels {
		t.Fatalf("%d of %d cancels waited for a wake in flight (inbox looks per cancel %v); want 1 to %d", waited, n, looks.looks, agent.MaxWaitingCancels)
	}
	// The waits are given back: a cancel sent later waits again.
	ctx := protocol.WithStamp(context.WithValue(e.ctx, cancelTag{}, n), protocol.Stamp{At: time.Now().Add(ahead).UnixMilli()})
	if err := e.svc.Cancel(ctx, e.agentID, "stop"); !errors.Is(err, agent.ErrNotRunning) {
		t.Fatalf("later cancel: %v", err)
	}
	if looks.looks[n] < 2 {
		t.Fatalf("a later cancel looked at the inbox %d times; want it to wait again", looks.looks[n])
	}
}
