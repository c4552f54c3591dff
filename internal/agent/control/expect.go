package control

import (
	"context"
	"errors"
	"fmt"
)

// ErrStale: a frame's expect_seq precondition failed (see StaleError).
var ErrStale = errors.New("agent: expect_seq precondition failed")

// StaleError refuses a frame whose expect_seq precondition failed: the event at Seq,
// of type Type, was logged after Expect and changes what the frame acts on. Nothing
// was appended or queued.
type StaleError struct {
	Frame  string // the frame type: inject, cancel, set_policy, approve, deny
	Expect int64  // the frame's expect_seq
	Seq    int64  // the conflicting event's seq
	Type   string // the conflicting event's type
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("%s: expect_seq %d: %s at seq %d", e.Frame, e.Expect, e.Type, e.Seq)
}

// Is makes errors.Is(err, ErrStale) hold.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Message is the text the client is answered with (error code stale).
func (e *StaleError) Message() string {
	return fmt.Sprintf("%s: expect_seq %d is stale: %s at seq %d came after it; nothing was applied", e.Frame, e.Expect, e.Type, e.Seq)
}

// ErrAheadOfLog: a frame's expect_seq is above the log's tip (see AheadError).
var ErrAheadOfLog = errors.New("agent: expect_seq above the log's tip")

// AheadError refuses a frame whose expect_seq is above the log's tip (bad_frame).
type AheadError struct {
	Frame       string
	Expect, Tip int64
}

func (e *AheadError) Error() string {
	return fmt.Sprintf("%s: expect_seq %d is above the log's tip %d", e.Frame, e.Expect, e.Tip)
}

// Is makes errors.Is(err, ErrAheadOfLog) hold.
func (e *AheadError) Is(target error) bool { return target == ErrAheadOfLog }

type expectKey struct{}

// WithExpect returns ctx carrying a frame's expect_seq precondition (nil: none, ctx as
// it is). Every path that hands a client frame to the agent's frame methods — the
// socket's message route, the HTTP frames path — sets it from the frame, and the
// methods read it (ExpectOf), so their signatures stay those of a frame without it.
func WithExpect(ctx context.Context, expect *int64) context.Context {
	if expect == nil {
		return ctx
	}
	v := *expect
	return context.WithValue(ctx, expectKey{}, v)
}

// ExpectOf is the expect_seq ctx carries, and whether it carries one.
func ExpectOf(ctx context.Context) (int64, bool) {
	v, ok := ctx.Value(expectKey{}).(int64)
	return v, ok
}
