package devstack_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go/middleware"

	"github.com/terret/terret-ws/internal/devstack"
)

// TestMeasureHooks: with devstack.Measure, the log table starts without its stream — a
// log written then is replayed from the table — until EnableLogStream adds the stream
// and its poller, after which an append reaches a subscribed client through the stream
// consumer; handler invocations are seen by Wrap under their names, and handler
// requests by the Clients middleware.
func TestMeasureHooks(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	invoked := map[string]int{}
	var requests atomic.Int64
	e := startFaultStack(t, devstack.Options{Measure: devstack.Measure{
		LogStreamLater: true,
		MaxConcurrency: 8,
		Wrap: func(name string, h lambda.Handler) lambda.Handler {
			return handlerFunc(func(ctx context.Context, p []byte) ([]byte, error) {
				mu.Lock()
				invoked[name]++
				mu.Unlock()
				return h.Invoke(ctx, p)
			})
		},
		Clients: func(cfg aws.Config) aws.Config {
			cfg.APIOptions = append(cfg.APIOptions, func(st *middleware.Stack) error {
				return st.Initialize.Add(middleware.InitializeMiddlewareFunc("count", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					requests.Add(1)
					return next.HandleInitialize(ctx, in)
				}), middleware.After)
			})
			return cfg
		},
	}})
	const agent = "measured"
	e.seed(t, agent, 5) // before the stream exists
	c := e.dial(t, agent, e.token(t, agent))
	c.hello(agent)
	c.send(map[string]any{"type": "subscribe", "from_seq": 0})
	c.events(0, 5)
	if err := e.stack.EnableLogStream(context.Background()); err != nil {
		t.Fatal(err)
	}
	appendN(t, e.log, agent, 1)
	c.events(6, 6)
	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"connect", "message", "deliver (log stream)"} {
		if invoked[name] == 0 {
			t.Errorf("Wrap never saw %q (saw %v)", name, invoked)
		}
	}
	if requests.Load() == 0 {
		t.Errorf("the Clients middleware saw no request")
	}
}

type handlerFunc func(context.Context, []byte) ([]byte, error)

func (f handlerFunc) Invoke(ctx context.Context, p []byte) ([]byte, error) { return f(ctx, p) }
