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
