package socket

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/connections"
)

// What the routes need, declared here where it is used. The composition root
// (internal/service) wires the concrete stores and asserts that they satisfy these;
// the package's own route tests use fakes in memory.

// Tokens is the part of the token store the routes use (auth.Store).
type Tokens interface {
	// CheckRole checks agentID's token and returns its hash and role (auth.RoleDriver,
	// auth.RoleObserver); auth.ErrUnauthorized when it admits nobody.
	CheckRole(ctx context.Context, agentID, token string) (hash, role string, err error)
	// Condition is the write that holds, in Claim's or Observe's transaction, only while
	// the token hash is still agentID's current one.
	Condition(agentID, hash string) types.TransactWriteItem
	// Used records the token's last use (`terret token list` only).
	Used(ctx context.Context, agentID, hash string) error
}

// Conns is the part of the connection records the routes use (connections.Store),
// the frame-order turnstile's records aside (OrderRecords).
type Conns interface {
	// Claim makes connID agentID's owner, conditional on tokenCheck and with also in
	// the same transaction, and returns the owner it superseded (zero: none);
	// connections.ErrTokenGone when tokenCheck failed.
	Claim(ctx context.Context, agentID, connID, tokenHash string, tokenCheck *types.ConditionCheck, also ...types.TransactWriteItem) (connections.Owner, error)
	// Observe seats connID as one of agentID's at most max observers, and returns the
	// observer it superseded (zero: none); connections.ErrTokenGone as Claim.
	Observe(ctx context.Context, agentID, connID, tokenHash string, tokenCheck *types.ConditionCheck, max int) (connections.Owner, error)
	// Conn reads connID's record; connections.ErrNotFound when there is none.
	Conn(ctx context.Context, connID string) (connections.Conn, error)
	// Forget deletes connID's record (key: its Conn.Key()).
	Forget(ctx context.Context, connID, key string) error
	// Depart records that connID, which has no record, has gone.
	Depart(ctx context.Context, connID string) error
}

// Records is what New takes: the connection records, which also hold the turnstile's
// order records. connections.Store implements it.
type Records interface {
	Conns
	OrderRecords
}

// SessionLog is the part of the log the routes use (sessionlog.Log).
type SessionLog interface {
	Create(ctx context.Context, agentID string) (bool, error)
}
