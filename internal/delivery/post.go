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
	"github.com/terret/terret-ws/internal/lease"
	"github.com/terret/terret-ws/internal/protocol"
)

// post sends one frame. It returns ErrGone if the connection no longer exists, and
// ErrPost once five attempts failed — with ErrFull when the last was refused with
// LimitExceededException (throttled, or the client's buffer full: API Gateway does not
// say which).
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
	var full *gwtypes.LimitExceededException
	if errors.As(err, &full) {
		return fmt.Errorf("%w: %w: %s: %v", ErrPost, ErrFull, connID, err)
	}
	return fmt.Errorf("%w: %s: %v", ErrPost, connID, err)
}

// DefaultHelloGrace is how long the first frame of a fresh connection is retried while
// posts answer Gone (Config.HelloGrace). It covers the longest a $connect can run —
// API Gateway's 29 s integration timeout, which is also the connect function's
// Timeout in template.yaml — because a post before $connect has completed answers Gone
// too: a shorter grace lets a slow $connect (a cold start, DynamoDB retries) lose its
// hello, and the sender that gave up forgets a connection that then opens and waits
// for a hello that never comes. Past it, $connect has completed or failed, and Gone
// means the client left.
const DefaultHelloGrace = 30 * time.Second

// Backoff of the hello loop (postHello): the first retry after 50 ms, each next one
// twice as late, at most 4 s apart, each wait drawn from its upper half. A $connect
// that completes in the usual tens of milliseconds is met by the first retries; over
// the default 30 s grace a connection that never opens costs about 16 posts, at most
// 22 (it was about 600 at a fixed 50 ms).
const (
	helloFirstBackoff = 50 * time.Millisecond
	helloMaxBackoff   = 4 * time.Second
)

// postHello posts data, the first frame of a freshly accepted connection (hello, or the
// error frame of a refused one), allowing it a grace period: on AWS a post can race the
// end of $connect and answer Gone until the socket is open — and Gone is also the answer
// once the client has left, which no post can tell apart. So a Gone is retried with a
// bounded exponential backoff until d.cfg.HelloGrace has passed, and the loop ends as
// soon as $disconnect has said the client left — $disconnect runs only after $connect
// has completed, so what it wrote means the client left, not that the socket is still
// opening:
//
//   - a connection with a conn# record (recorded): the record is gone ($disconnect
//     deletes it, connections.Store.Forget);
//   - a refused one (no record): its departure record is there ($disconnect writes it,
//     connections.Store.Depart). Without it, a client that completes the handshake
//     without a token and hangs up at once would hold this invocation for the whole
//     grace.
//
// Cost per Gone answer: one post and one strongly consistent GetItem (1 RRU) of the
// conn# record or of the departure record. A client that hangs up at once costs those
// until $disconnect has run and at most one more; one that never opens, or whose
// $disconnect is lost, costs at most 22 posts over the grace (docs/security.md,
// "What a vanished connection costs").
func (d *Deliverer) postHello(ctx context.Context, connID string, data []byte, recorded bool) error {
	deadline := time.Now().Add(d.cfg.HelloGrace)
	wait := helloFirstBackoff
	posts := 0
	for {
		err := d.post(ctx, connID, data)
		posts++
		if err == nil {
			d.helloEnded(connID, HelloPosted, posts)
			return nil
		}
		if !errors.Is(err, ErrGone) {
			d.helloEnded(connID, HelloFailed, posts)
			return err
		}
		if time.Now().After(deadline) {
			d.helloEnded(connID, HelloGraceOver, posts)
			return err
		}
		if d.left(ctx, connID, recorded) {
			d.logger.InfoContext(ctx, "connection left before its first frame", "connection_id", connID, "posts", posts)
			d.helloEnded(connID, HelloLeft, posts)
			return err
		}
		t := time.NewTimer(wait/2 + mrand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			d.helloEnded(connID, HelloFailed, posts)
			return err
		case <-t.C:
		}
		wait = min(2*wait, helloMaxBackoff)
	}
}

// left reports whether $disconnect has recorded that connID left: its conn# record is
// gone (recorded), or its departure record is there (a refused connection). A read that
// fails answers false: the loop keeps to the grace and its backoff.
func (d *Deliverer) left(ctx context.Context, connID string, recorded bool) bool {
	if recorded {
		_, err := d.store.Conn(ctx, connID)
		return errors.Is(err, connections.ErrNotFound)
	}
	departed, err := d.store.Departed(ctx, connID)
	if err != nil {
		d.logger.WarnContext(ctx, "read departure", "connection_id", connID, "error", err)
	}
	return departed
}

// Close tells the owner connection why it is being dropped and drops it: an error
// frame, then DeleteConnection; the records go with it.
func (d *Deliverer) Close(ctx context.Context, o connections.Owner, code protocol.Code, msg string) error {
	if err := d.disown(ctx, o, code); err != nil {
		return err
	}
	return d.drop(ctx, o.ConnID, code, msg)
}

// shut is Close for a connection that was already sent its error frame with code (a
// reply owed before hello, welcome.go): the records, then the delete.
func (d *Deliverer) shut(ctx context.Context, o connections.Owner, code protocol.Code) error {
	if err := d.disown(ctx, o, code); err != nil {
		return err
	}
	return d.deleteConn(ctx, o.ConnID)
}

// disown records that the owner connection is closed with code: it may send nothing
// more, and no longer owns its agent.
func (d *Deliverer) disown(ctx context.Context, o connections.Owner, code protocol.Code) error {
	d.logger.InfoContext(ctx, "closing connection", "agent_id", o.AgentID, "connection_id", o.ConnID, "code", string(code))
	d.dropped(code)
	if err := d.store.SetState(ctx, o.ConnID, stateFor(code)); err != nil {
		return err
	}
	return d.store.Disown(ctx, o.Key(), o.ConnID)
}

// supersede drops prev, the ownership record a connect has just replaced (see
// connections.Store.Claim), with superseded — hello first if the connection was never
// sent it, since hello comes before anything else (docs/protocol.md):
//
//   - hello went out (the common case): drop — one post and one DeleteConnection, as
//     for any drop;
//   - no hello yet: the claim marked the connection's record unwelcomed and carried the
//     replaced record's sender lease over as its closing lease. An asynchronous deliver
//     invocation (KickDrop with Hello, runClose) closes it — hello, superseded, the
//     delete — once it can take that lease: at once when no sender held it, or, when a
//     sender was posting hello, after that sender has closed the connection itself
//     (sender.unwelcomed) or died and its lease run out. One closer at a time posts, so
//     two never race on the socket (welcome.go).
func (d *Deliverer) supersede(ctx context.Context, prev connections.Owner) error {
	if prev.ConnID != "" {
		d.dropped(protocol.CodeSuperseded) // here, once, whichever way it goes
	}
	switch {
	case prev.ConnID == "":
		return nil
	case prev.HelloSent:
		return d.drop(ctx, prev.ConnID, protocol.CodeSuperseded, message(protocol.CodeSuperseded))
	default:
		if prev.Lease != "" && lease.Live(prev.LeaseUntil, d.store.Now()) {
			d.logger.InfoContext(ctx, "superseded before hello with its sender at work: it or the closer closes it", "agent_id", prev.AgentID, "connection_id", prev.ConnID)
		}
		return d.kick(ctx, Kick{Kind: KickDrop, AgentID: prev.AgentID, ConnectionID: prev.ConnID, Code: protocol.CodeSuperseded, Hello: true})
	}
}

// drop posts an error frame with code to connID and closes it. A connection already
// gone is not an error.
func (d *Deliverer) drop(ctx context.Context, connID string, code protocol.Code, msg string) error {
	err := d.post(ctx, connID, protocol.Marshal(protocol.NewError(code, msg)))
	if err != nil && !errors.Is(err, ErrGone) {
		d.logger.WarnContext(ctx, "post error frame", "connection_id", connID, "code", string(code), "error", err)
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
