package agentservice

import (
	"context"

	"github.com/terret/terret-ws/internal/schedule"
)

var _ schedule.Injector = (*Runtime)(nil)

// InjectFire queues a schedule's fire (agent.Service.InjectFire): the schedule
// function's and terret dev's engine's injector.
func (rt *Runtime) InjectFire(ctx context.Context, agentID string, f schedule.Fire) error {
	ctx, flush := rt.fast.Invocation(ctx)
	defer flush()
	return rt.svc.InjectFire(ctx, agentID, f)
}
