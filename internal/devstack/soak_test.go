package devstack_test

import (
	"os"
	"strconv"
	"testing"
)

// soakRounds is how many rounds a test that repeats rounds to meet rare interleavings
// plays: fast in make test, where every round still plays every case once the first
// round has; soak under make soak (SOAK=1), which runs the same tests many times over.
// A positive integer in the env variable named override (e.g. ORDER_ROUNDS) wins over
// both. go test -short plays one round.
func soakRounds(t *testing.T, override string, fast, soak int) int {
	t.Helper()
	if v := os.Getenv(override); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number of rounds", override, v)
		}
		return n
	}
	switch {
	case os.Getenv("SOAK") == "1":
		return soak
	case testing.Short():
		return 1
	}
	return fast
}
