package delivery

import (
	"context"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
)

// Answer sends f, an error frame that leaves the connection open, to connID, a
// connection of agentID, after its hello — as Reply answers a frame, for a frame
// answered later than its handler: the runner refusing a queued inject whose
// expect_seq a turn overtook (agent.Answerer). A connection that no longer owns the
// agent, or is gone, gets nothing and it is no error. Cost: Reply's.
func (d *Deliverer) Answer(ctx context.Context, agentID, connID string, f protocol.Error) error {
	return d.Reply(ctx, connections.Conn{ID: connID, AgentID: agentID}, f)
}
