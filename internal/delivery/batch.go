package delivery

import (
	"fmt"

	"github.com/terret/terret-ws/internal/sessionlog"
)

// Batched event frames (docs/protocol.md, "Extension: batched event frames"): a client that subscribes with "batch": true
// may get several consecutive events in one WebSocket message, each event's envelope
// exactly as in a v1 frame, separated by one "\n" (an envelope is compact JSON, so it
// never holds a raw newline). One post then carries many events: on AWS a post is a
// round trip of tens of milliseconds and a billed message per 32 KB, so a replay costs
// a few dozen posts per thousand events instead of a thousand.
const (
	// BatchBytes is the most a batch of several events holds: API Gateway bills a
	// message per 32 KB. An event larger than this goes alone.
	BatchBytes = 32 << 10
	// MaxBatchBytes is what a message never exceeds because of batching (API
	// Gateway's frame limit is 32 KB per frame, 128 KB per message).
	MaxBatchBytes = 128 << 10
)

// EncodeFrame is frame, for measuring a floor that posts what delivery posts.
func EncodeFrame(evs []sessionlog.Event, batch bool, room int) ([]byte, int, error) {
	return frame(evs, batch, room)
}

// frame encodes the next message of evs (non-empty, consecutive, in seq order): the
// first event alone, or — with batch set — as many of the following as fit within
// BatchBytes and room events (room ≥ 1). It returns the message and how many events it
// carries. room keeps a checkpoint's promise: a sender that dies re-sends at most
// CheckpointEvery events, batched or not.
func frame(evs []sessionlog.Event, batch bool, room int) ([]byte, int, error) {
	var out []byte
	n := 0
	for _, ev := range evs {
		if n >= max(room, 1) {
			break
		}
		b, err := ev.MarshalJSON() // not json.Marshal, which would escape "<" again
		if err != nil {
			return nil, 0, fmt.Errorf("delivery: encode %s seq %d: %w", ev.SessionID, ev.Seq, err)
		}
		if n == 0 {
			out, n = b, 1
			if !batch || len(b) >= BatchBytes {
				break
			}
			continue
		}
		if len(out)+1+len(b) > BatchBytes {
			break
		}
		out = append(append(out, '\n'), b...)
		n++
	}
	return out, n, nil
}
