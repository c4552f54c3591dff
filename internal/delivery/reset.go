package delivery

import (
	"context"
	"errors"

	"github.com/aws/aws-lambda-go/events"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
)

// resetAttr is the token item attribute a session reset writes (sessiondata.ResetAttr;
// repeated here so that delivery does not depend on the operator's package).
const resetAttr = "reset"

// ResetMessage is the message of the error{internal} frame a connection gets when its
// session is reset: the log it was reading is gone, and its client finds a new epoch in
// the next hello.
const ResetMessage = "session reset: reconnect and start over from seq 0"

// wasReset reports whether a token item's stream record carries a new reset marker.
func wasReset(r events.DynamoDBEventRecord) bool {
	nv, ok := r.Change.NewImage[resetAttr]
	if !ok || nv.DataType() != events.DataTypeString {
		return false
	}
	ov, ok := r.Change.OldImage[resetAttr]
	return !ok || ov.DataType() != events.DataTypeString || ov.String() != nv.String()
}

// closeReset closes agentID's owner connection after a reset of its session, with
// error{internal}: the code of the v1 set that closes and tells the client to
// reconnect. Cost: 1 read unit (the ownership record) and the close's writes; nothing
// when nobody is connected.
func (d *Deliverer) closeReset(ctx context.Context, agentID string) error {
	o, err := d.store.Owner(ctx, agentID)
	if errors.Is(err, connections.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return d.Close(ctx, o, protocol.CodeInternal, ResetMessage)
}
