package protocol

import (
	"context"
	"fmt"
)

// Stamp places a client frame in its connection's sequence: At is when the gateway
// received it (API Gateway's requestTimeEpoch, in Unix milliseconds, never decreasing
// on one connection) and Order is the frame's order field (0 when it has none).
//
// Handlers that must apply frames in the order the client sent them compare stamps
// (Key): a later stamp wins over an earlier one whatever order the handlers ran in.
// Two frames of one connection with different At, or with equal At and both an
// order, compare in send order; two plain frames received in the same millisecond
// compare equal.
type Stamp struct {
	At    int64 // receive time, Unix ms
	Order int64 // the frame's order field; 0: none
	// InOrder reports that every earlier frame of the connection has taken effect
	// (the order turnstile saw frame Order-1 done): nothing sent before this frame is
	// still in flight. Not part of Key.
	InOrder bool
}

// maxKeyOrder is the largest order a Key holds; a connection that sends more frames
// than that (over 300 a second for API Gateway's two hours) stops ordering within a
// millisecond.
const maxKeyOrder = 9_999_999_999

// Key is the stamp as a fixed-width string ("<13-digit ms>-<10-digit order>") that
// sorts, as bytes, in stamp order: a DynamoDB sort key or a string attribute compared
// with < in a condition expression.
func (s Stamp) Key() string {
	return fmt.Sprintf("%013d-%010d", max(s.At, 0), min(max(s.Order, 0), maxKeyOrder))
}

type stampKey struct{}

// WithStamp returns ctx carrying the stamp of the frame being served.
func WithStamp(ctx context.Context, s Stamp) context.Context {
	return context.WithValue(ctx, stampKey{}, s)
}

// StampFrom returns the stamp ctx carries, and false if it carries none (a call that
// does not serve a client frame).
func StampFrom(ctx context.Context) (Stamp, bool) {
	s, ok := ctx.Value(stampKey{}).(Stamp)
	return s, ok
}
