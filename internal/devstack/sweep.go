package devstack

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
)

// sweeper invokes a function with a sweep's payload on a ticker, as template.yaml's
// one-minute schedules do on AWS: deliver with the token sweep's (an expired token's
// live connection is closed with unauthorized through the same stream path as a
// rotation), and runner with the quota sweep's (a wake a quota deferred runs once the
// quota allows).
type sweeper struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startSweeper(ctx context.Context, fn lambda.Handler, payload string, every time.Duration, logger *slog.Logger) *sweeper {
	if every <= 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &sweeper{cancel: cancel}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, err := fn.Invoke(ctx, []byte(payload)); err != nil && ctx.Err() == nil {
				logger.Error("sweep", "payload", payload, "error", err)
			}
		}
	}()
	return s
}

// stop ends the ticker and waits for a sweep under way.
func (s *sweeper) stop() {
	if s == nil {
		return
	}
	s.cancel()
	s.wg.Wait()
}
