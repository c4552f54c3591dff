package devstack_test

import (
	"context"
	"testing"
	"time"

	hangbound "github.com/terret/terret-ws/internal/hang"
)

// hang bounds a wait for something the stack is certain to do — a frame, an event, a
// handler's return, a lease to expire — with internal/hang's bound: minutes, grown
// with the machine's load. It is no claim about how fast the stack is; it turns a hang
// into a failure that says what never came, long before the test binary's deadline.
func hang() time.Duration { return hangbound.Bound() }

// hangContext is hang as a context, cancelled when t ends.
func hangContext(t testing.TB) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), hang())
}
