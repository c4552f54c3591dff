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
// refusal marked makes the pass read again; so does a read that missed an inject
// reserved but not yet put (fewer items of their own than reserved).
func TestPreReadCurrent(t *testing.T) {
	t.Parallel()
	refused := int64(3)
	pre := state{Stimuli: 4, InboxItems: 1, Ck: &checkpoint{Seq: 7}, Counters: Counters{Turns: 2, QuotaDay: "2026-12-06"}}
	own := []inboxItem{{ID: "1600000000000-ab"}}
	for _, tc := range []struct {
		name string
		edit func(st *state)
		want bool
		own  []inboxItem // planClaim's items of their own; nil: own
	}{
		{"an inject reserved and not yet put when read", func(*state) {}, false, []inboxItem{}},
		{"the claim's own changes", func(st *state) {
			st.Runner, st.LeaseUntil, st.TurnID, st.TurnSeq, st.TurnKey = "run_x", 99, "turn_x", 7, "100"
			st.TurnWake, st.Inbox = &inboxItem{ID: "100-ab"}, nil
		}, true, nil},
		{"a stimulus", func(st *state) { st.Stimuli++ }, false, nil},
		{"an inject of its own reserved", func(st *state) { st.InboxItems++ }, false, nil},
		{"a turn metered", func(st *state) { st.Turns++ }, false, nil},
		{"a checkpoint moved", func(st *state) { st.Ck = &checkpoint{Seq: 9} }, false, nil},
		{"a quota refusal marked", func(st *state) { st.QuotaRefused = &refused }, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := pre
			st.Ck = &checkpoint{Seq: 7}
			tc.edit(&st)
			p := &preRead{own: own, st: pre}
			if tc.own != nil {
				p.own = tc.own
			}
			if got := p.current(st); got != tc.want {
				t.Errorf("current: %v, want %v", got, tc.want)
			}
		})
	}
}
