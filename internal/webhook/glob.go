package webhook

import (
	"fmt"
	"strings"
)

// Globs over event types: '*' stands for any run of characters ('/' included, so
// "*" is every type and "turn/*" every turn event), '?' for one character; any other
// character stands for itself. A glob holds the characters of event types only
// (a-z 0-9 / _ - .) besides the two wildcards.

// CheckGlob says why g is not a glob over event types, or nil.
func CheckGlob(g string) error {
	if g == "" {
		return fmt.Errorf("%w: empty", ErrBadGlob)
	}
	if len(g) > 128 {
		return fmt.Errorf("%w: longer than 128 characters", ErrBadGlob)
	}
	for _, c := range g {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', strings.ContainsRune("/_-.*?", c):
		default:
			return fmt.Errorf("%w: %q is not a character of event types (a-z 0-9 / _ - .) or a wildcard (* ?)", ErrBadGlob, c)
		}
	}
	return nil
}

// Match reports whether glob g matches the event type typ.
func Match(g, typ string) bool {
	// Iterative wildcard match with one backtrack point: linear in practice.
	gi, ti := 0, 0
	star, mark := -1, 0
	for ti < len(typ) {
		switch {
		case gi < len(g) && (g[gi] == '?' || g[gi] == typ[ti]):
			gi++
			ti++
		case gi < len(g) && g[gi] == '*':
			star, mark = gi, ti
			gi++
		case star >= 0:
			gi = star + 1
			mark++
			ti = mark
		default:
			return false
		}
	}
	for gi < len(g) && g[gi] == '*' {
		gi++
	}
	return gi == len(g)
}
