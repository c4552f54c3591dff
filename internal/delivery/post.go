package delivery

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	gwtypes "github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
)

// post sends one frame. It returns ErrGone if the connection no longer exists.
func (d *Deliverer) post(ctx context.Context, connID string, data []byte) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		_, err = d.posts.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(connID), Data: data})
		if err == nil {
			return nil
		}
		var gone *gwtypes.GoneException
		if errors.As(err, &gone) {
			return fmt.Errorf("%w: %s", ErrGone, connID)
		}
		if ctx.Err() != nil {
			break
		}
		// Throttled (LimitExceeded) or a passing failure: back off and try again; the
		// frame order is kept because nothing else is posted meanwhile.
		time.Sleep(time.Duration(25<<attempt)*time.Millisecond + mrand.N(25*time.Millisecond))
	}
	return fmt.Errorf("%w: %s: %v", ErrPost, connID, err)
}

// postHello posts hello, allowing a freshly accepted connection a grace period: on AWS
// a post can race the end of $connect and answer Gone until the socket is open.
func (d *Deliverer) postHello(ctx context.Context, connID string, data []byte) error {
	deadline := time.Now().Add(d.cfg.HelloGrace)
	for {
		err := d.post(ctx, connID, data)
		if !errors.Is(err, ErrGone) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close tells the owner connection why it is being dropped and drops it: an error
// frame, then DeleteConnection; the records go with it.
func (d *Deliverer) Close(ctx context.Context, o connections.Owner, code protocol.Code, msg string) error {
	d.logger.Info("closing connection", "agent_id", o.AgentID, "connection_id", o.ConnID, "code", string(code))
	d.dropped(code)
	if err := d.store.SetState(ctx, o.ConnID, stateFor(code)); err != nil {
		return err
	}
	if err := d.store.Disown(ctx, o.AgentID, o.ConnID); err != nil {
		return err
	}
	return d.Drop(ctx, o.ConnID, code, msg)
}

// Supersede drops prev, the ownership record a connect has just replaced (see
// connections.Store.Claim), with superseded — hello first if the connection was never
// sent it, since hello comes before anything else (docs/protocol.md):
//
//   - hello went out (the common case): Drop — one post and one DeleteConnection, as
//     for any drop;
//   - no hello yet, and a sender holds a live lease on the record: that sender is
//     posting hello or about to. It finds its lease lost when it records hello, and
//     then sends superseded and closes (unwelcomed). Nothing is posted here, so the two
//     never race on the socket;
//   - no hello yet and no live lease: nobody else can post to the connection any more
//     (a sender acquires only the record, which now names the new owner). An
//     asynchronous deliver invocation sends hello, superseded and closes, allowing the
//     hello grace of a connection still finishing $connect (KickDrop with Hello).
func (d *Deliverer) Supersede(ctx context.Context, prev connections.Owner) error {
	if prev.ConnID != "" {
		d.dropped(protocol.CodeSuperseded) // here, once, whichever way it goes
	}
	switch {
	case prev.ConnID == "":
		return nil
	case prev.HelloSent:
		return d.Drop(ctx, prev.ConnID, protocol.CodeSuperseded, message(protocol.CodeSuperseded))
	case prev.Lease != "" && prev.LeaseUntil.After(time.Now()):
		d.logger.Info("superseded before hello: its sender closes it", "agent_id", prev.AgentID, "connection_id", prev.ConnID)
		return nil
	default:
		return d.Kick(ctx, Kick{Kind: KickDrop, AgentID: prev.AgentID, ConnectionID: prev.ConnID, Code: protocol.CodeSuperseded, Hello: true})
	}
}

// unwelcomed finishes a sender that lost its lease (cause) while hello was owed to
// o.ConnID: if the connection was superseded meanwhile, Supersede left it to this
// sender, which sends hello (unless helloPosted), superseded, and closes it. Any other
// loss (the connection gone, the lease expired and taken) returns cause. It costs one
// read, on this path only.
func (d *Deliverer) unwelcomed(ctx context.Context, o connections.Owner, cause error, helloPosted bool) error {
	if !errors.Is(cause, connections.ErrLeaseLost) {
		return cause
	}
	c, err := d.store.Conn(ctx, o.ConnID)
	if errors.Is(err, connections.ErrNotFound) {
		return cause
	}
	if err != nil {
		return err
	}
	if c.State != connections.StateSuperseded {
		return cause
	}
	if !helloPosted {
		tip, err := d.log.Tip(ctx, o.AgentID)
		if err != nil {
			return err
		}
		if err := d.postHello(ctx, o.ConnID, protocol.Marshal(protocol.NewHello(o.AgentID, tip))); err != nil {
			if errors.Is(err, ErrGone) {
				return nil
			}
			return err
		}
	}
	return d.Drop(ctx, o.ConnID, protocol.CodeSuperseded, message(protocol.CodeSuperseded))
}

// Drop posts an error frame with code to connID and closes it. A connection already
// gone is not an error.
func (d *Deliverer) Drop(ctx context.Context, connID string, code protocol.Code, msg string) error {
	err := d.post(ctx, connID, protocol.Marshal(protocol.NewError(code, msg)))
	if err != nil && !errors.Is(err, ErrGone) {
		d.logger.Warn("post error frame", "connection_id", connID, "code", string(code), "error", err)
	}
	return d.deleteConn(ctx, connID)
}

func (d *Deliverer) deleteConn(ctx context.Context, connID string) error {
	_, err := d.posts.DeleteConnection(ctx, &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(connID)})
	var gone *gwtypes.GoneException
	if err != nil && !errors.As(err, &gone) {
		return fmt.Errorf("delivery: delete connection %s: %w", connID, err)
	}
	return nil
}

func message(code protocol.Code) string { return protocol.Refusal(code).Message }

// Send posts one protocol frame to connID outside the event stream (an error reply).
// It returns ErrGone if the connection no longer exists.
func (d *Deliverer) Send(ctx context.Context, connID string, frame []byte) error {
	return d.post(ctx, connID, frame)
}
