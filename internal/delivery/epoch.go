package delivery

import (
	"context"

	"github.com/terret/terret-ws/internal/protocol"
)

// helloFrame is agentID's hello to a connection of role (connections.RoleDriver or
// RoleObserver): the log's tip (last_seq) and its epoch (the id of
// its seq 0, sessionlog.Log.Epoch), read at once so that hello waits for one read,
// not two. Cost: 2 read units (two strongly consistent one-item Queries).
func (d *Deliverer) helloFrame(ctx context.Context, agentID, role string) ([]byte, error) {
	type epochRead struct {
		epoch string
		err   error
	}
	epoch := make(chan epochRead, 1)
	go func() {
		e, err := d.log.Epoch(ctx, agentID)
		epoch <- epochRead{e, err}
	}()
	tip, err := d.log.Tip(ctx, agentID)
	e := <-epoch
	if err != nil {
		return nil, err
	}
	if e.err != nil {
		return nil, e.err
	}
	return protocol.Marshal(protocol.NewHello(agentID, tip, e.epoch).WithRole(role)), nil
}
