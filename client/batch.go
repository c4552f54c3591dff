package client

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// batch handles a message of the batching extension (docs/protocol.md, "Extension: batched event frames"): consecutive
// events, each envelope exactly as in a one-event message, separated by "\n". Each
// event goes through the same checks as one sent alone, so a batch that overlaps what
// the caller already has (a resend after a reconnect or a server crash) yields only the
// events it lacks. Protocol frames are never batched: a part that is not an event is a
// protocol violation.
func (c *Client) batch(data []byte) error {
	for part := range bytes.SplitSeq(data, []byte{'\n'}) {
		var f wireFrame
		if err := json.Unmarshal(part, &f); err != nil {
			return fmt.Errorf("%w: undecodable event in a batch: %v", ErrProtocol, err)
		}
		if f.Seq == nil {
			return fmt.Errorf("%w: %q frame in a batch", ErrProtocol, f.Type)
		}
		if err := c.event(part); err != nil {
			return err
		}
	}
	return nil
}
