package devstack

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/terret/terret-ws/internal/service"
)

// sweeper invokes the deliver function with the token sweep's payload on a ticker, as
// template.yaml's one-minute schedule does on AWS: an expired token's live connection is
// closed with unauthorized through the same stream path as a rotation.
type sweeper struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startSweeper(ctx context.Context, deliver lambda.Handler, every time.Duration, logger *slog.Logger) *sweeper {
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
			if _, err := deliver.Invoke(ctx, []byte(service.SweepInput)); err != nil && ctx.Err() == nil {
				logger.Error("token sweep", "error", err)
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
