package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/terret/terret-ws/internal/invoke"
	"github.com/terret/terret-ws/internal/protocol"
)

// KickKind is what a deliver invocation started asynchronously should do; it travels as
// the payload's "kind" string.
type KickKind string

// Kick kinds.
const (
	KickPump KickKind = "pump" // send what the owner is owed (hello after connect, handover)
	KickDrop KickKind = "drop" // tell a connection Code and close it (unauthorized at connect)
	// KickWatch outlives a lease holder that was left a Pending mark: see watch.
	KickWatch KickKind = "watch"
	// KickFail answers an internal error on ConnectionID (Fail) where the message
	// function could not: Lambda retries it.
	KickFail KickKind = "fail"
)

// Kick is the payload of an asynchronous deliver invocation.
type Kick struct {
	Kind         KickKind      `json:"kind"`
	AgentID      string        `json:"agent_id,omitempty"`
	ConnectionID string        `json:"connection_id,omitempty"`
	Code         protocol.Code `json:"code,omitempty"`
	Watcher      string        `json:"watcher,omitempty"` // KickWatch: the claim to act under
	// ClaimedUntil (KickWatch, ms): when the claim runs out as written, so that the
	// watcher extends it only once the lease it watches outlasts it.
	ClaimedUntil int64 `json:"claimed_until,omitempty"`
	// Hello (KickDrop): the connection was superseded before its hello went out; close
	// it hello first, as its closer (runClose).
	Hello bool `json:"hello,omitempty"`
}

// kick invokes the deliver function asynchronously with k.
func (d *Deliverer) kick(ctx context.Context, k Kick) error {
	if d.invoke == nil {
		return errors.New("delivery: no invoker configured")
	}
	payload, _ := json.Marshal(k)
	_, err := d.invoke.Invoke(ctx, &invoke.Input{
		FunctionName:   d.cfg.DeliverFunction,
		InvocationType: invoke.Event,
		Payload:        payload,
	})
	if err != nil {
		return fmt.Errorf("delivery: kick %s %s: %w", k.Kind, k.AgentID, err)
	}
	return nil
}

// HandleKick serves an asynchronous invocation.
func (d *Deliverer) HandleKick(ctx context.Context, k Kick) error {
	switch k.Kind {
	case KickPump:
		d.gate(GateKickPump, k.AgentID)
		_, err := d.pump(ctx, k.AgentID, nil, wake{backstop: true, retried: true})
		return err
	case KickWatch:
		return d.runWatch(ctx, k)
	case KickFail:
		return d.fail(ctx, k.ConnectionID)
	case KickDrop:
		if k.Hello {
			return d.runClose(ctx, k) // superseded before hello (welcome.go)
		}
		if k.Code != protocol.CodeSuperseded {
			d.dropped(k.Code) // supersede counted its own
		}
		// The connection may still be finishing $connect: allow it the hello grace. A
		// refused connection has no conn# record (recorded false): its departure record,
		// which $disconnect writes, ends the loop early (postHello).
		err := d.postHello(ctx, k.ConnectionID, protocol.Marshal(protocol.NewError(k.Code, message(k.Code))), false)
		if errors.Is(err, ErrGone) {
			return nil
		}
		if err != nil {
			return err
		}
		return d.deleteConn(ctx, k.ConnectionID)
	default:
		return fmt.Errorf("delivery: unknown kick kind %q", k.Kind)
	}
}
