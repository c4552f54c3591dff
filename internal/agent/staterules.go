package agent

import (
	"context"
	"time"
)

// runnerState is the runner's lease, claim and stimulus rules over the agent's state
// item: the writes whose conditions decide who works on an agent, which turn it
// records, and whether a stimulus arrived. store implements them as conditional
// writes on DynamoDB; state_contract_test.go runs one table of scenarios against it
// and against an in-memory double (memState) on one fake clock, so that a runner test
// of these rules alone needs no DynamoDB.
type runnerState interface {
	acquire(ctx context.Context, agentID, me string, now, until time.Time, c *claim) (state, bool, error)
	renew(ctx context.Context, agentID, me string, until time.Time) error
	release(ctx context.Context, agentID, me string, pending optional[int64], ended *endedTurn, ck *checkpoint) (cur state, released, wrote bool, err error)
	claimTurn(ctx context.Context, agentID, me string, c claim) (state, error)
	clearTurn(ctx context.Context, agentID, me, turnID string) (state, error)
	finishTurn(ctx context.Context, agentID, me, turnID string, u TurnUsage) (state, error)
	bump(ctx context.Context, agentID string) error
	putInbox(ctx context.Context, agentID string, it inboxItem) (bool, error)
	getState(ctx context.Context, agentID string, attrs ...string) (state, error)
	inboxRead(ctx context.Context, agentID string) ([]inboxItem, state, error)
}

var _ runnerState = (*store)(nil)
