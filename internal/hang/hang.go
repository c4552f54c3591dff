// Package hang bounds a test's wait for something the code under test is certain to do
// — a frame, an event, a handler's return — by the test binary's own deadline rather
// than by a guess at how fast the machine is: a loaded machine only makes such a wait
// longer, never fails it, and a real hang still ends in a failure that names what
// never came, before go test's timeout panics.
package hang

import (
	"flag"
	"time"
)

// start approximates the test binary's start, from which go test's -timeout runs.
var start = time.Now()

// Margin is how long before the binary's deadline Bound gives up: room for the
// failure to be reported and the cleanups to run.
const Margin = 30 * time.Second

// Bound is how long a wait started now may last: until Margin before the test
// binary's deadline (go test -timeout), at least a second; 10 minutes when the binary
// has no deadline (-timeout 0) or is not a test binary.
func Bound() time.Duration {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return 10 * time.Minute
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return 10 * time.Minute
	}
	d, ok := g.Get().(time.Duration)
	if !ok || d <= 0 {
		return 10 * time.Minute
	}
	return max(time.Until(start.Add(d))-Margin, time.Second)
}
