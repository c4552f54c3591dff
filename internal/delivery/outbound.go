package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
)

// The routes' outbound path. Everything the WebSocket routes (package socket) make a
// client receive, or make it close, goes through the six methods below, and through
// nothing else of this package: socket declares them as its Outbound interface. So
// hello-first (nothing before hello), the closing protocol (an error frame, then the
// close, after hello) and the hand-over to an asynchronous deliver invocation where a
// route cannot post are decided here alone; a route only says what happened
// (docs/architecture.md, "Hello first").

// SubscribeBudget is how long a subscribe's own invocation sends (SubscribeFrame)
// before it hands the rest of a replay to an asynchronous deliver invocation.
const SubscribeBudget = time.Second

// Welcome is $connect's outbound step once the connection's claim of agentID has
// committed: it closes superseded, the connection the claim replaced (zero ConnID:
// none) — with superseded, hello first if it never had hello (supersede) — and starts
// an asynchronous deliver invocation that sends the new connection its hello once
// $connect has returned (API Gateway delivers nothing during $connect). An error means
// no hello will be sent: the route refuses the handshake. A failed close of superseded
// is logged and not returned: that connection's record already says superseded, so its
// next frame is refused (Refuse) and closes it. Cost: 1 Lambda invocation, plus the
// close of superseded (a post and a DeleteConnection, or a second invocation before its
// hello).
func (d *Deliverer) Welcome(ctx context.Context, agentID string, superseded connections.Owner) error {
	if err := d.supersede(ctx, superseded); err != nil {
		d.logger.WarnContext(ctx, "close superseded connection", "agent_id", agentID, "connection_id", superseded.ConnID, "error", err)
	}
	if err := d.kick(ctx, Kick{Kind: KickPump, AgentID: agentID}); err != nil {
		return fmt.Errorf("delivery: welcome %s: %w", agentID, err)
	}
	return nil
}

// TurnAway is $connect's outbound step for a connection refused as unauthorized: the
// handshake is accepted all the same (no frame can reach a client during $connect)
// and an asynchronous deliver invocation sends it error{unauthorized} and closes it
// (KickDrop). An error means nothing will: the route refuses the handshake instead.
// Cost: 1 Lambda invocation, 1 post (posted again while the connection is still
// finishing $connect, within Config.HelloGrace, each Gone with 1 read unit of its
// departure record, which ends the posts once the client has left), 1
// DeleteConnection; no record is written here ($disconnect writes the departure
// record: 1 write unit).
func (d *Deliverer) TurnAway(ctx context.Context, connID string) error {
	if err := d.kick(ctx, Kick{Kind: KickDrop, ConnectionID: connID, Code: protocol.CodeUnauthorized}); err != nil {
		return fmt.Errorf("delivery: turn away %s: %w", connID, err)
	}
	return nil
}

// SubscribeFrame serves a subscribe frame of c: it records the subscription
// (Subscribe), calls recorded (the frame has taken effect: the connection's next
// numbered frame may go), then sends what is owed for up to SubscribeBudget and hands
// the rest of a replay to an asynchronous deliver invocation, where Lambda retries it
// should it die. Errors are Subscribe's (connections.ErrNotOwner: c no longer owns its
// agent) or the pump's.
func (d *Deliverer) SubscribeFrame(ctx context.Context, c connections.Conn, f protocol.Subscribe, recorded func()) error {
	if err := d.Subscribe(ctx, c.Key(), c.ID, f.FromSeq, f.Batch); err != nil {
		return err
	}
	if recorded != nil {
		recorded()
	}
	return d.PumpFor(ctx, c.Key(), nil, SubscribeBudget)
}

// Reply answers a frame of c with f, an error frame that leaves the connection open,
// after hello (reply). A connection already gone is not an error.
func (d *Deliverer) Reply(ctx context.Context, c connections.Conn, f protocol.Error) error {
	if err := d.reply(ctx, c, protocol.Marshal(f)); err != nil && !errors.Is(err, ErrGone) {
		return err
	}
	return nil
}

// Refuse answers a frame from connID, a connection that may send none, with code's
// refusal frame and closes it: superseded for a superseded connection — hello first if
// it never had hello (refuseSuperseded) — and any other code (unauthorized: never
// authorized, revoked, dropped as lagged, or unknown) at once (drop).
func (d *Deliverer) Refuse(ctx context.Context, connID string, code protocol.Code) error {
	if code == protocol.CodeSuperseded {
		return d.refuseSuperseded(ctx, connID)
	}
	return d.drop(ctx, connID, code, message(code))
}

// Fail answers an unexpected error serving a frame of connID: error{internal}, then
// the close, after hello (fail). Should that fail, an asynchronous deliver invocation,
// which Lambda retries, answers in its place (KickFail); the first failure is logged.
// An error means neither could be started.
func (d *Deliverer) Fail(ctx context.Context, connID string) error {
	err := d.fail(ctx, connID)
	if err == nil {
		return nil
	}
	d.logger.WarnContext(ctx, "answer internal error: handing it to a fresh invocation", "connection_id", connID, "error", err)
	if kerr := d.kick(context.WithoutCancel(ctx), Kick{Kind: KickFail, ConnectionID: connID}); kerr != nil {
		return fmt.Errorf("delivery: fail %s: %w", connID, errors.Join(err, kerr))
	}
	return nil
}
