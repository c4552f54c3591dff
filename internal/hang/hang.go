// Package hang bounds a test's wait for something the code under test is certain to do
// — a frame, an event, a handler's return — with a hang detector, not a speed
// assertion: the bound is minutes, grown with the machine's load, so a loaded machine
// only makes such a wait longer, and a real hang ends in a failure that names what
// never came, minutes after it began rather than at the end of the test binary's
// deadline (which would cost a whole CI run, and name nothing).
package hang

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// start approximates the test binary's start, from which go test's -timeout runs.
var start = time.Now()

// Margin is how long before the binary's deadline Bound gives up: room for the
// failure to be reported and the cleanups to run.
const Margin = 30 * time.Second

// Limit is the bound of one wait on a machine whose load average is at most its
// number of CPUs. A wait in the suite — for a frame, an event, a child process's
// ready file, a lease to expire — takes seconds on such a machine; Limit is a hang.
const Limit = 3 * time.Minute

// MaxLoadFactor caps how far Bound grows Limit with the load: at most 4 × Limit,
// twelve minutes, well inside a CI run.
const MaxLoadFactor = 4

// Bound is how long a wait started now may last: Limit, times the machine's load
// average per CPU when that is above 1 (at most MaxLoadFactor), and never past Margin
// before the test binary's deadline (go test -timeout), at least a second.
func Bound() time.Duration {
	b := time.Duration(float64(Limit) * loadFactor())
	if left, ok := deadlineLeft(); ok {
		b = min(b, max(left-Margin, time.Second))
	}
	return b
}

// Scaled is d times the machine's load average per CPU when that is above 1 (at most
// MaxLoadFactor): for a test whose code under test runs against a deadline of its own
// (a runner invocation's timeout), so that a loaded machine gives it the same room as
// an idle one would, instead of turning load into a failure.
func Scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * loadFactor())
}

// deadlineLeft is the time to the test binary's deadline; false when it has none
// (-timeout 0) or is not a test binary.
func deadlineLeft() (time.Duration, bool) {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return 0, false
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return 0, false
	}
	d, ok := g.Get().(time.Duration)
	if !ok || d <= 0 {
		return 0, false
	}
	return time.Until(start.Add(d)), true
}

// loadPath is where the load average is read (Linux); elsewhere the factor is 1.
var loadPath = "/proc/loadavg"

// loadFactor is the one-minute load average per CPU, between 1 and MaxLoadFactor.
func loadFactor() float64 {
	b, err := os.ReadFile(loadPath)
	if err != nil {
		return 1
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 1
	}
	load, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return 1
	}
	return min(max(load/float64(runtime.NumCPU()), 1), MaxLoadFactor)
}

// Until returns once cond holds, checking it at once and then after pauses that grow
// from 5 ms to 100 ms: quick for a state that is reached at once, and a light load on
// a shared DynamoDB Local for one that takes seconds. It fails t, naming what, only
// when Bound runs out: the state is one the code under test is certain to reach, so
// only a hang fails it. Call it from the test's goroutine.
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
	bound := Bound()
	deadline := time.Now().Add(bound)
	pause := 5 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				return fmt.Errorf("hang: %s: not reached in %s", what, bound.Round(time.Second))
			}
			return fmt.Errorf("hang: %s: not reached in %s: %w", what, bound.Round(time.Second), err)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// errNotYet is Until's reason for a bool check that does not hold yet.
var errNotYet = errors.New("not yet")
