package main

import (
	"context"
	"fmt"
	"time"
)

// refusedResult is what connections with a wrong token cost the service: the refused
// path every client on the internet can take.
type refusedResult struct {
	Connections int
	Cost        phaseCost
}

// runRefused opens -refused connections to one agent with a token that is not its own,
// each until the unauthorized frame and the close, and then waits for the stack to go
// idle (the $disconnect handlers): units, invocations and posts per refused connection.
func (b *bench) runRefused(ctx context.Context) error {
	n := b.o.refused
	const agent = "refused-bench"
	if _, err := b.st.tokens.Create(ctx, agent); err != nil {
		return err
	}
	b.st.settle(ctx)
	before := b.st.snap()
	if err := parallel(8, n, func(i int) error {
		cl, err := dialAgent(ctx, b.st.dev.WebSocketURL(), agent, "tt_not-a-token", nil)
		if err != nil {
			return err
		}
		defer cl.close()
		f, err := cl.next(time.Minute)
		if err != nil {
			return err
		}
		if f.Type != "error" || f.Code != "unauthorized" {
			return fmt.Errorf("refused connection %d: first frame %s %s, want error unauthorized", i, f.Type, f.Code)
		}
		select {
		case <-cl.done:
			return nil
		case <-time.After(time.Minute):
			return fmt.Errorf("refused connection %d: not closed within a minute", i)
		}
	}); err != nil {
		return err
	}
	// Every $disconnect handler finished: its departure record's write, slower than the
	// quiet interval on a busy DynamoDB Local, is counted.
	b.st.settleAll(ctx, time.Minute)
	b.res.refused = refusedResult{Connections: n, Cost: before.to(b.st.snap())}
	return nil
}
