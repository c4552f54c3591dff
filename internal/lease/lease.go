// Package lease is the one liveness rule of every lease the stores write: the sender
// lease on an agent's ownership record and the claims beside it (a watcher's, a
// closer's, a replay slot's) in the connections table, and the runner's lease on an
// agent's state item. A lease that runs until a unix millisecond is live through that
// millisecond and has run out from the next one on.
//
// The rule is written here twice, side by side, and nowhere else: as the DynamoDB
// condition that writes test (LiveCond, ExpiredCond) and as the Go predicate that code
// reading a record tests (Live, LiveMs). lease_test.go runs one table of cases — before,
// at and after the last millisecond — against both, the condition on DynamoDB Local.
package lease

import "time"

// LiveCond is the condition that the lease whose end (unix ms) the expression
// attribute name until holds is live at the value placeholder now (unix ms).
func LiveCond(until, now string) string { return until + " >= " + now }

// ExpiredCond is LiveCond's negation for an attribute that exists: the lease has run
// out. A caller that also takes a missing lease joins it with attribute_not_exists.
func ExpiredCond(until, now string) string { return until + " < " + now }

// Live reports whether a lease that runs until until is live at now. Both are compared
// to the millisecond, as the stores keep them and the conditions test them; the zero
// time is never live.
func Live(until, now time.Time) bool {
	return !until.IsZero() && LiveMs(until.UnixMilli(), now.UnixMilli())
}

// LiveMs is Live over unix milliseconds.
func LiveMs(until, now int64) bool { return until >= now }
