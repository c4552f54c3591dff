package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/lease"
	"github.com/terret/terret-ws/internal/protocol"
)

// Hello first (docs/architecture.md, "Hello first"): hello is the first frame a
// connection receives. Delivery owns that order; nobody outside it waits for hello.
//
//   - An error reply to a connection's frame (Reply) that may precede hello is recorded
//     on the ownership record, conditional on hello not being recorded; the sender that
//     posts hello finds it in the record its hello write returns and posts it next
//     (sender.postReplies). A reply whose condition fails because hello is recorded is
//     posted at once.
//   - A connection superseded before its hello went out is closed by one closer, the
//     holder of a closing lease on its conn# record (connections.Store.TakeClose): the
//     claim that superseded it carries the replaced record's sender lease over, so the
//     sender that may be posting hello at that moment finishes (hello, superseded, the
//     delete), and a closer kicked by the connect takes over should that sender die, once
//     its lease has run out (runClose).

// Gate points of the closing of a connection superseded before its hello (see Gate):
// GateCloseHello under the closing lease before hello is posted, GateCloseSuperseded
// after hello was posted and recorded, before the superseded frame.
const (
	GateCloseHello      = "close_hello"
	GateCloseSuperseded = "close_superseded"
)

// replyBudget bounds how long a Reply's own wake-up sends (hello, the reply, anything
// else owed) before it hands the rest over, as a subscribe's does.
const replyBudget = time.Second

// reply posts frame, an error reply to a frame c sent, after hello. The common case,
// hello recorded, costs what a reply always did: one strongly consistent read of the
// ownership record, then the post. Before hello, the reply is recorded for the sender
// that posts hello, which posts it right after (1 write unit), and a wake-up sends
// hello here if no sender is at work. A connection that no longer owns its agent is
// being closed (superseded, lagged or gone) and gets no reply; nor does one with
// connections.MaxReplies replies already owed. Nothing here waits for hello.
func (d *Deliverer) reply(ctx context.Context, c connections.Conn, frame []byte) error {
	return d.afterHello(ctx, c.Key(), c.ID, connections.Reply{Frame: frame}, func() error { return d.post(ctx, c.ID, frame) })
}

// afterHello delivers r to connID, which owns agentID, after its hello: at once by now
// when hello is recorded (also when it is recorded while the frame is being owed), else
// owed on the ownership record (OweReply), with the close code it ends the connection
// with if any, and sent by the sender that posts hello, woken here. A connection that no longer owns the agent, or that already owes
// MaxReplies frames, gets nothing (logged).
func (d *Deliverer) afterHello(ctx context.Context, agentID, connID string, r connections.Reply, now func() error) error {
	o, err := d.store.Owner(ctx, agentID)
	switch {
	case errors.Is(err, connections.ErrNotFound) || err == nil && o.ConnID != connID:
		err = fmt.Errorf("%w: %s by %s", connections.ErrNotOwner, agentID, connID)
	case err != nil:
		return err
	case o.HelloSent:
		return now()
	default:
		err = d.store.OweReply(ctx, agentID, connID, r)
	}
	switch {
	case err == nil:
		_, err = d.pump(ctx, agentID, nil, wake{stopAt: time.Now().Add(replyBudget)})
		return err
	case errors.Is(err, connections.ErrHelloSent):
		return now() // recorded meanwhile: it went out before
	case errors.Is(err, connections.ErrNotOwner), errors.Is(err, connections.ErrRepliesFull):
		d.logger.InfoContext(ctx, "frame owed after hello not sent", "agent_id", agentID, "connection_id", connID, "reason", err.Error())
		return nil
	default:
		return err
	}
}

// fail answers an unexpected error serving a frame of connID: error{internal}, then
// the close — after hello, like any frame the connection receives (docs/protocol.md,
// "Errors before hello"). hello recorded (the common case), it posts the frame and
// deletes the connection at once: 1 read of conn#, 1 of agent#, as a reply costs.
// Before hello, the frame is owed on the ownership record like a reply (OweReply, 1
// write unit): the sender that posts hello posts it right after hello and any reply
// owed before it, then closes the connection (sender.postReplies); a wake-up sends
// hello here if no sender is at work. A connection with no record was never accepted
// or is gone, and hello can never reach it: it is closed without an error frame. One
// that no longer owns its agent, or may send nothing more, is being closed by whoever
// took it over (superseded, lagged, revoked) and gets nothing from here. An error
// means nothing was owed or sent: the caller (Fail) hands it to an asynchronous invocation
// (KickFail), which Lambda retries.
func (d *Deliverer) fail(ctx context.Context, connID string) error {
	c, err := d.store.Conn(ctx, connID)
	switch {
	case errors.Is(err, connections.ErrNotFound):
		d.logger.InfoContext(ctx, "closing a connection with no record, without an error frame", "connection_id", connID)
		return d.deleteConn(ctx, connID)
	case err != nil:
		return err
	case c.State != connections.StateAuthorized:
		return nil
	}
	r := connections.Reply{Frame: protocol.Marshal(protocol.Refusal(protocol.CodeInternal)), Close: string(protocol.CodeInternal)}
	return d.afterHello(ctx, c.Key(), connID, r, func() error {
		return d.drop(ctx, connID, protocol.CodeInternal, message(protocol.CodeInternal))
	})
}

// postReplies posts the error replies recorded for the connection before its hello
// (Reply, Fail), right after hello. Taking them is one atomic write, so a reply is
// posted once at most: a sender that dies between taking and posting loses it, as a
// message function that dies before posting its reply would. A reply stored with a
// close code (Fail's internal) is the last: the sender closes the connection after it
// with that code and reports closed.
func (s *sender) postReplies() (closed bool, err error) {
	replies, err := s.d.store.TakeReplies(s.ctx, s.o.Key(), s.o.ConnID)
	s.o.Replies = nil
	if err != nil {
		return false, err
	}
	for _, r := range replies {
		if err := s.post(r.Frame); err != nil {
			return false, err
		}
		if r.Close != "" {
			if err := s.join(); err != nil {
				return false, err
			}
			if err := s.fire(evClose); err != nil {
				return false, err
			}
			return true, s.d.shut(s.ctx, s.o, protocol.Code(r.Close))
		}
	}
	return false, nil
}

// unwelcomed finishes a sender that lost its lease (cause) while hello was owed: if the
// connection was superseded meanwhile, the claim handed this sender's lease over as
// the connection's closing lease, and the sender closes it — hello unless helloPosted,
// superseded, the delete (closeUnwelcomed). It returns cause, which ends the sender,
// unless the closing failed.
func (s *sender) unwelcomed(cause error, helloPosted bool) error {
	if !errors.Is(cause, connections.ErrLeaseLost) {
		return cause
	}
	if _, err := s.d.closeUnwelcomed(s.ctx, s.o.ConnID, s.holder, helloPosted); err != nil {
		return err
	}
	return cause
}

// closeUnwelcomed closes connID, superseded before its hello went out, as holder, if
// holder can take its closing lease (connections.Store.TakeClose): hello unless it was
// posted (by holder itself, helloPosted, or by an earlier closer), then superseded,
// then the delete. It returns the live closing lease of another closer (nothing was
// done: that closer finishes, or dies and its lease runs out), and zero when nothing is
// left owed to connID. Cost: 3 write units and the posts; 1 write unit when another
// closer holds the lease or nothing is owed.
func (d *Deliverer) closeUnwelcomed(ctx context.Context, connID, holder string, helloPosted bool) (busyUntil time.Time, err error) {
	c, taken, err := d.store.TakeClose(ctx, connID, holder, d.cfg.Lease, helloPosted)
	switch {
	case errors.Is(err, connections.ErrNotFound):
		return time.Time{}, nil // gone with the connection
	case err != nil:
		return time.Time{}, err
	case !c.Unwelcomed:
		return time.Time{}, nil
	case !taken:
		return c.CloserUntil, nil
	}
	lg := d.logger.With("agent_id", c.AgentID, "connection_id", connID)
	if !c.HelloPosted {
		d.gate(GateCloseHello, c.AgentID)
		hello, err := d.helloFrame(ctx, c.AgentID, connections.RoleOf(c.Role))
		if err != nil {
			return time.Time{}, err
		}
		// The connection may still be finishing $connect: postHello allows for it.
		err = d.postHello(ctx, connID, hello, true)
		if errors.Is(err, ErrGone) {
			return time.Time{}, d.clearOwed(ctx, connID, holder)
		}
		if err != nil {
			return time.Time{}, err
		}
		// Recorded, so that a closer after this one sends superseded only.
		c, taken, err = d.store.TakeClose(ctx, connID, holder, d.cfg.Lease, true)
		switch {
		case errors.Is(err, connections.ErrNotFound):
			return time.Time{}, nil
		case err != nil:
			return time.Time{}, err
		case !taken:
			return c.CloserUntil, nil // out of time: the closer after this one finishes
		}
	}
	d.gate(GateCloseSuperseded, c.AgentID)
	lg.InfoContext(ctx, "closing a connection superseded before its hello")
	if err := d.drop(ctx, connID, protocol.CodeSuperseded, message(protocol.CodeSuperseded)); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, d.clearOwed(ctx, connID, holder)
}

// clearOwed records that nothing more is owed to connID; a closer that lost the lease
// meanwhile leaves it to the next one.
func (d *Deliverer) clearOwed(ctx context.Context, connID, holder string) error {
	if err := d.store.ClearOwed(ctx, connID, holder); err != nil && !errors.Is(err, connections.ErrLeaseLost) {
		return err
	}
	return nil
}

// runClose serves a KickDrop with Hello, which a connect sends for a connection it
// superseded before its hello went out (supersede): it closes the connection
// (closeUnwelcomed) as soon as it can take the closing lease. While another closer
// holds it — the sender that was posting hello when the connection was superseded —
// it looks at the record (1 read unit) with a growing pause, at most until that lease
// runs out: a live closer is done within a look or two, a dead one's lease runs out and
// this invocation finishes in its place. Near its invocation's deadline it hands over to
// a fresh one. Lambda retries it should it die; the retry takes over from it likewise.
func (d *Deliverer) runClose(ctx context.Context, k Kick) error {
	holder := connections.NewHolder(connections.HolderRetried).ID
	pause := watchSlack
	for {
		busyUntil, err := d.closeUnwelcomed(ctx, k.ConnectionID, holder, false)
		if err != nil || busyUntil.IsZero() {
			return err
		}
		for {
			wake := busyUntil.Add(watchSlack)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < time.Until(wake)+d.cfg.HandoverMargin {
				return d.kick(ctx, k)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(pause, time.Until(wake))):
			}
			pause = min(2*pause, 8*time.Second)
			c, err := d.store.Conn(ctx, k.ConnectionID)
			if errors.Is(err, connections.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if !c.Unwelcomed {
				return nil
			}
			if !lease.Live(c.CloserUntil, d.store.Now()) || c.Closer == "" {
				break // free, or run out: try to take it
			}
			busyUntil = c.CloserUntil
		}
	}
}

// refuseSuperseded answers a frame from connID, a connection that was superseded:
// superseded and the close — after hello, for a connection superseded before its hello
// went out. Its closer sends those; this tries once to be that closer (should the
// kicked one be lost) and otherwise leaves it to the closer at work. Cost: 1 read unit,
// and for such a connection 1 write unit.
func (d *Deliverer) refuseSuperseded(ctx context.Context, connID string) error {
	c, err := d.store.Conn(ctx, connID)
	if err == nil && c.Unwelcomed {
		_, err = d.closeUnwelcomed(ctx, connID, connections.NewHolder(connections.HolderOnce).ID, false)
		return err
	}
	if err != nil && !errors.Is(err, connections.ErrNotFound) {
		return err
	}
	return d.drop(ctx, connID, protocol.CodeSuperseded, message(protocol.CodeSuperseded))
}
