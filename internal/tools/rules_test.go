package tools_test

import (
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/tools"
)

func TestProfileRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, json string
		want       []tools.Rule
		problems   []string // every problem, in order; nil when valid
	}{
		{"rules", `{"rules":[{"tool":"fs_*","when":"args.path.startsWith('/etc')","effect":"deny"},{"tool":"*","effect":"ask"}]}`,
			[]tools.Rule{{Tool: "fs_*", When: "args.path.startsWith('/etc')", Effect: tools.EffectDeny}, {Tool: "*", Effect: tools.EffectAsk}}, nil},
		{"null", `{"rules":null}`, nil, nil},
		{"not a list", `{"rules":{}}`, nil, []string{"rules: want an array, got JSON object"}},
		{"not an object", `{"rules":[1]}`, nil, []string{"rules[0]: want an object, got JSON number"}},
		{"no tool, bad effect", `{"rules":[{"effect":"allow"},{"tool":"x","effect":"maybe"}]}`, nil, []string{
			`rules[0].tool: required: a glob over tool names, e.g. "*" or "fs_*"`,
			`rules[1].effect: want "allow", "ask" or "deny", got "maybe"`}},
		{"no effect", `{"rules":[{"tool":"x"}]}`, nil, []string{`rules[0].effect: want "allow", "ask" or "deny", got ""`}},
		{"unknown key", `{"rules":[{"tool":"x","effect":"deny","why":"no"}]}`, nil, []string{"rules[0].why: unknown key (tool, when, effect)"}},
		{"when not a string", `{"rules":[{"tool":"x","when":true,"effect":"deny"}]}`, nil, []string{"rules[0].when: want a string, got JSON bool"}},
		{"default effect", `{"tools":[{"name":"echo","default_effect":"never"}]}`, nil, []string{`tools[0].default_effect: want "allow", "ask" or "deny", got "never"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tools.DecodeProfile([]byte(tc.json))
			if tc.problems == nil {
				if err != nil || len(p.Rules) != len(tc.want) {
					t.Fatalf("DecodeProfile(%s) = %+v, %v; want %+v", tc.json, p.Rules, err, tc.want)
				}
				for i := range tc.want {
					if p.Rules[i] != tc.want[i] {
						t.Errorf("rule %d = %+v, want %+v", i, p.Rules[i], tc.want[i])
					}
				}
				return
			}
			var got []string
			if pe, ok := err.(*tools.ProfileError); ok {
				for _, pr := range pe.Problems {
					got = append(got, pr.String())
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.problems, "\n") {
				t.Fatalf("DecodeProfile(%s) problems:\n%s\nwant:\n%s", tc.json, strings.Join(got, "\n"), strings.Join(tc.problems, "\n"))
			}
		})
	}
	def := tools.Profile{Rules: []tools.Rule{{Tool: "*", Effect: tools.EffectAsk}}}
	if got := def.Merge(tools.Profile{}).Rules; len(got) != 1 {
		t.Errorf("an override without rules gives %+v; want the default's", got)
	}
	if got := def.Merge(tools.Profile{Rules: []tools.Rule{}}).Rules; got == nil || len(got) != 0 {
		t.Errorf("an override with rules [] gives %+v; want none", got)
	}
}

// TestDefaultEffect: every tool a server entry builds, whatever it lists, carries the
// entry's default_effect, named by the entry's path.
func TestDefaultEffect(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	if err := reg.RegisterSetKind("many", func(cfg tools.ToolConfig) ([]tools.Tool, error) {
		return []tools.Tool{fixedTool{def: tools.Definition{Name: "m1"}}, fixedTool{def: tools.Definition{Name: "new_tool"}}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	p, err := tools.DecodeProfile([]byte(`{"tools":[{"name":"echo"},{"name":"srv","kind":"many","default_effect":"ask"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := reg.Build(p)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]tools.Decision{
		"echo":     {},
		"m1":       {Effect: tools.EffectAsk, Rule: "tools[1].default_effect"},
		"new_tool": {Effect: tools.EffectAsk, Rule: "tools[1].default_effect"},
		"absent":   {},
	} {
		if got := set.DefaultEffect(name); got != want {
			t.Errorf("DefaultEffect(%s) = %+v, want %+v", name, got, want)
		}
	}
}
