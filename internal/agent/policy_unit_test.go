package agent

import (
	"fmt"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/sessionlog"
)

// TestPolicyIn: the policy in force is the fold of the log's policy/updated in seq
// order, each taking over unless stamped below the one in force; stale says the newest
// policy/updated is not it.
func TestPolicyIn(t *testing.T) {
	t.Parallel()
	pol := func(stamp string, patterns ...string) sessionlog.Event {
		e := ev(TypePolicyUpdated, policyUpdated{Patterns: patterns})
		e.Stamp = stamp
		return e
	}
	other := ev(TypeToolCall, toolCall{ID: "c"})
	for _, tc := range []struct {
		name      string
		evs       []sessionlog.Event
		want      string // patterns in force, joined; "-" for none
		wantStale bool
	}{
		{"none", []sessionlog.Event{other}, "-", false},
		{"in send order", []sessionlog.Event{pol("1", "a"), other, pol("2", "b")}, "b", false},
		{"logged out of send order", []sessionlog.Event{pol("2", "b"), pol("1", "a")}, "b", true},
		{"repeated after the stale one", []sessionlog.Event{pol("2", "b"), pol("1", "a"), pol("2", "b")}, "b", false},
		{"same stamp: the later one", []sessionlog.Event{pol("1", "a"), pol("1", "b")}, "b", false},
		{"unstamped takes over", []sessionlog.Event{pol("2", "b"), pol("", "a")}, "a", false},
		{"stamped after unstamped", []sessionlog.Event{pol("", "a"), pol("1", "b")}, "b", false},
		{"the highest of several", []sessionlog.Event{pol("1", "a"), pol("3", "c"), pol("2", "b"), other}, "c", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, stale := policyIn(tc.evs)
			got := "-"
			if in != nil {
				got = strings.Join(decode[policyUpdated](*in).Patterns, ",")
			}
			if got != tc.want || stale != tc.wantStale {
				t.Errorf("policyIn = %s, stale %v; want %s, stale %v", got, stale, tc.want, tc.wantStale)
			}
			if p := policyOf(tc.evs); fmt.Sprint(p.Set) != fmt.Sprint(tc.want != "-") {
				t.Errorf("policyOf set = %v, want %v", p.Set, tc.want != "-")
			}
		})
	}
}
