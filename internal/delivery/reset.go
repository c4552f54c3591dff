package delivery

import (
	"context"
	"errors"

	"github.com/aws/aws-lambda-go/events"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
)

// resetAttr and resetConnAttr are the token item attributes a session reset writes
// (sessiondata.ResetAttr, ResetConnAttr; repeated here so that delivery does not depend
// on the operator's package).
const (
	resetAttr     = "reset"
	resetConnAttr = "reset_conn"
)

// ResetMessage is the message of the error{internal} frame a connection gets when its
// session is reset: the log it was reading is gone, and its client finds a new epoch in
// the next hello.
const ResetMessage = "session reset: reconnect and start over from seq 0"

// resetMarker is what a token item's stream record says of a session reset.
type resetMarker struct {
	// conn is the connection that owned the agent when the reset wrote its marker, the
	// only one that can have been sent the old log's hello; "" when none did. any: a
	// marker without it (written before it was recorded), which closes any owner: the
	// safe side.
	conn string
	any  bool
}

// wasReset reports whether a token item's stream record carries a new reset marker,
// and the marker.
func wasReset(r events.DynamoDBEventRecord) (resetMarker, bool) {
	nv, ok := r.Change.NewImage[resetAttr]
	if !ok || nv.DataType() != events.DataTypeString {
		return resetMarker{}, false
	}
	if ov, ok := r.Change.OldImage[resetAttr]; ok && ov.DataType() == events.DataTypeString && ov.String() == nv.String() {
		return resetMarker{}, false
	}
	c, ok := r.Change.NewImage[resetConnAttr]
	if !ok || c.DataType() != events.DataTypeString {
		return resetMarker{any: true}, true
	}
	return resetMarker{conn: c.String()}, true
}

// closeReset closes agentID's owner connection after a reset of its session, with
// error{internal} — the code of the v1 set that closes and tells the client to
// reconnect — if it is the connection the marker names: one that connected after the
// reset's new seq 0 read the new epoch for its hello and is left open. Cost: 1 read
// unit (the ownership record) and the close's writes; nothing when nobody is connected.
func (d *Deliverer) closeReset(ctx context.Context, agentID string, m resetMarker) error {
	// Observers: every one is closed (an observer that connected after the reset
	// reconnects, and reads the new epoch).
	if err := d.closeObservers(ctx, agentID, nil, protocol.CodeInternal, ResetMessage); err != nil {
		return err
	}
	o, err := d.store.Owner(ctx, agentID)
	if errors.Is(err, connections.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !m.any && o.ConnID != m.conn {
		d.logger.InfoContext(ctx, "session reset: the owner connected after it, left open", "agent_id", agentID, "connection_id", o.ConnID)
		return nil
	}
	return d.Close(ctx, o, protocol.CodeInternal, ResetMessage)
}
