package devstack_test

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"
)

// hangMargin is how long before the test binary's binaryDeadline a wait bounded by hang
// gives up: long enough for the failure to name what it waited for, and for the
// cleanups to run, before go test's timeout panics.
const hangMargin = 30 * time.Second

// binaryDeadline is the test binary's (go test -timeout, from its start; none with -timeout 0).
var binaryDeadline time.Time

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, ok := f.Value.(flag.Getter).Get().(time.Duration); ok && d > 0 {
			binaryDeadline = time.Now().Add(d)
		}
	}
	os.Exit(m.Run())
}

// hang bounds a wait for something the stack is certain to do — a frame, an event, a
// handler's return, a lease to expire: until hangMargin before the test binary's
// binaryDeadline (10 minutes without one). It is no claim about how fast the stack is: a
// loaded machine only makes the wait longer, never fails it. It turns a hang into a
// failure that says what never came.
func hang() time.Duration {
	if binaryDeadline.IsZero() {
		return 10 * time.Minute
	}
	return max(time.Until(binaryDeadline)-hangMargin, time.Second)
}

// hangContext is hang as a context, cancelled when t ends.
func hangContext(t testing.TB) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), hang())
}
