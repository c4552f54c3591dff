package agent

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestStateAttrsNamed: every attribute of the state item (state's and Counters'
// dynamodbav tags) has its constant in stateAttrs, and stateAttrs names no attribute
// twice, so an expression never spells one as a literal.
func TestStateAttrsNamed(t *testing.T) {
	var tags []string
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for f := range typ.Fields() {
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("dynamodbav"), ",")
			if name != "" && name != "-" {
				tags = append(tags, name)
			}
		}
	}
	walk(reflect.TypeFor[state]())
	if len(tags) < 30 {
		t.Fatalf("found %d tags on state, want every attribute", len(tags))
	}
	for _, tag := range tags {
		if !slices.Contains(stateAttrs, tag) {
			t.Errorf("state attribute %q has no constant in stateAttrs", tag)
		}
	}
	seen := map[string]bool{}
	for _, a := range stateAttrs {
		if seen[a] {
			t.Errorf("stateAttrs names %q twice", a)
		}
		seen[a] = true
	}
}

// TestPreReadCurrent: planClaim's read stands for the first pass only while the lease
// write that claimed the turn shows nothing queued or done since: any stimulus, an
// inject reserved as an item of its own, a turn metered, a checkpoint moved or a quota
// refusal marked makes the pass read again.
func TestPreReadCurrent(t *testing.T) {
	t.Parallel()
	refused := int64(3)
	pre := state{Stimuli: 4, InboxItems: 1, Ck: &checkpoint{Seq: 7}, Counters: Counters{Turns: 2, QuotaDay: "2026-12-06"}}
	for _, tc := range []struct {
		name string
		edit func(st *state)
		want bool
	}{
		{"the claim's own changes", func(st *state) {
			st.Runner, st.LeaseUntil, st.TurnID, st.TurnSeq, st.TurnKey = "run_x", 99, "turn_x", 7, "100"
			st.TurnWake, st.Inbox = &inboxItem{ID: "100-ab"}, nil
		}, true},
		{"a stimulus", func(st *state) { st.Stimuli++ }, false},
		{"an inject of its own reserved", func(st *state) { st.InboxItems++ }, false},
		{"a turn metered", func(st *state) { st.Turns++ }, false},
		{"a checkpoint moved", func(st *state) { st.Ck = &checkpoint{Seq: 9} }, false},
		{"a quota refusal marked", func(st *state) { st.QuotaRefused = &refused }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := pre
			st.Ck = &checkpoint{Seq: 7}
			tc.edit(&st)
			if got := (&preRead{st: pre}).current(st); got != tc.want {
				t.Errorf("current: %v, want %v", got, tc.want)
			}
		})
	}
}
