// Package hang bounds a test's wait for something the code under test is certain to do
// — a frame, an event, a handler's return — by the test binary's own deadline rather
// than by a guess at how fast the machine is: a loaded machine only makes such a wait
// longer, never fails it, and a real hang still ends in a failure that names what
// never came, before go test's timeout panics.
package hang

import (
	"errors"
	"flag"
	"fmt"
	"testing"
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

// Until returns once cond holds, checking it at once and then after pauses that grow
// from 5 ms to 100 ms: quick for a state that is reached at once, and a light load on
// a shared DynamoDB Local for one that takes seconds. It fails t, naming what, only
// when Bound runs out: the state is one the code under test is certain to reach, so
// only a hang, never a slow machine, fails it. Call it from the test's goroutine.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	UntilNil(t, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// UntilNil is Until for a check that says why it does not hold yet: cond returns nil
// once the state is reached, and the last error it returned is in the failure.
func UntilNil(t testing.TB, what string, cond func() error) {
	t.Helper()
	if err := Wait(what, cond); err != nil {
		t.Fatal(err)
	}
}

// Wait is UntilNil for a goroutine that fails its own way: it returns nil once cond
// does, or an error naming what and cond's last answer when Bound runs out.
func Wait(what string, cond func() error) error {
	deadline := time.Now().Add(Bound())
	pause := 5 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				return fmt.Errorf("hang: %s: not reached before the test binary's deadline", what)
			}
			return fmt.Errorf("hang: %s: not reached before the test binary's deadline: %w", what, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// errNotYet is Until's reason for a bool check that does not hold yet.
var errNotYet = errors.New("not yet")
