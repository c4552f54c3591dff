package rules

import (
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/tools"
)

func TestDecide(t *testing.T) {
	e := New()
	cases := []struct {
		name  string
		rules []tools.Rule
		tool  string
		args  string
		want  tools.Decision
		err   string // substring of Decision.Err
	}{
		{"no rules", nil, "echo", `{}`, tools.Decision{}, ""},
		{"glob misses", []tools.Rule{{Tool: "fs_*", Effect: tools.EffectDeny}}, "echo", `{}`, tools.Decision{}, ""},
		{"no when matches", []tools.Rule{{Tool: "ec*", Effect: tools.EffectDeny}}, "echo", `{}`, tools.Decision{Effect: tools.EffectDeny, Rule: "rules[0]"}, ""},
		{"string", []tools.Rule{{Tool: "echo", When: `args.text.startsWith("rm ")`, Effect: tools.EffectAsk}}, "echo", `{"text":"rm -rf /"}`, tools.Decision{Effect: tools.EffectAsk, Rule: "rules[0]"}, ""},
		{"string false", []tools.Rule{{Tool: "echo", When: `args.text.startsWith("rm ")`, Effect: tools.EffectAsk}}, "echo", `{"text":"ls"}`, tools.Decision{}, ""},
		{"number is double", []tools.Rule{{Tool: "*", When: `args.n > 10.0`, Effect: tools.EffectDeny}}, "add", `{"n":11}`, tools.Decision{Effect: tools.EffectDeny, Rule: "rules[0]"}, ""},
		{"number against int literal", []tools.Rule{{Tool: "*", When: `args.n > 10`, Effect: tools.EffectDeny}}, "add", `{"n":11}`, tools.Decision{Effect: tools.EffectDeny, Rule: "rules[0]"}, ""},
		{"bool", []tools.Rule{{Tool: "*", When: `args.force`, Effect: tools.EffectDeny}}, "x", `{"force":true}`, tools.Decision{Effect: tools.EffectDeny, Rule: "rules[0]"}, ""},
		{"list", []tools.Rule{{Tool: "*", When: `"prod" in args.envs`, Effect: tools.EffectAsk}}, "x", `{"envs":["dev","prod"]}`, tools.Decision{Effect: tools.EffectAsk, Rule: "rules[0]"}, ""},
		{"nested object", []tools.Rule{{Tool: "*", When: `args.opts.mode == "w"`, Effect: tools.EffectDeny}}, "x", `{"opts":{"mode":"w"}}`, tools.Decision{Effect: tools.EffectDeny, Rule: "rules[0]"}, ""},
		{"first match wins", []tools.Rule{
			{Tool: "echo", When: `args.text == "ok"`, Effect: tools.EffectAllow},
			{Tool: "*", Effect: tools.EffectDeny},
		}, "echo", `{"text":"ok"}`, tools.Decision{Effect: tools.EffectAllow, Rule: "rules[0]"}, ""},
		{"falls through to second", []tools.Rule{
			{Tool: "echo", When: `args.text == "ok"`, Effect: tools.EffectAllow},
			{Tool: "*", Effect: tools.EffectDeny},
		}, "echo", `{"text":"no"}`, tools.Decision{Effect: tools.EffectDeny, Rule: "rules[1]"}, ""},
		{"has on missing key", []tools.Rule{{Tool: "*", When: `has(args.path) && args.path.startsWith("/etc")`, Effect: tools.EffectDeny}}, "x", `{}`, tools.Decision{}, ""},
		{"missing key denies", []tools.Rule{{Tool: "*", When: `args.path.startsWith("/etc")`, Effect: tools.EffectAllow}}, "x", `{}`, tools.Decision{Effect: tools.EffectDeny, Rule: "rules[0]"}, "no such key"},
		{"type mismatch denies", []tools.Rule{{Tool: "*", When: `args.n > 1`, Effect: tools.EffectAllow}}, "x", `{"n":"many"}`, tools.Decision{Effect: tools.EffectDeny, Rule: "rules[0]"}, "evaluation failed"},
		{"non-boolean result denies", []tools.Rule{{Tool: "*", When: `args.text`, Effect: tools.EffectAllow}}, "x", `{"text":"a"}`, tools.Decision{Effect: tools.EffectDeny, Rule: "rules[0]"}, "not a boolean"},
		{"args not an object", []tools.Rule{{Tool: "*", When: `size(args) == 0`, Effect: tools.EffectAsk}}, "x", `[1]`, tools.Decision{Effect: tools.EffectAsk, Rule: "rules[0]"}, ""},
		{"cost limit denies", []tools.Rule{{Tool: "*", When: `args.xs.all(a, args.xs.all(b, args.xs.all(c, a + b + c >= 0)))`, Effect: tools.EffectAllow}}, "x", `{"xs":` + numbers(100) + `}`, tools.Decision{Effect: tools.EffectDeny, Rule: "rules[0]"}, "cost limit"},
		{"cost within limit", []tools.Rule{{Tool: "*", When: `args.xs.all(a, a >= 0)`, Effect: tools.EffectAllow}}, "x", `{"xs":` + numbers(100) + `}`, tools.Decision{Effect: tools.EffectAllow, Rule: "rules[0]"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := e.Compile(tc.rules)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			got := s.Decide(tc.tool, []byte(tc.args))
			if tc.err == "" && got != tc.want {
				t.Fatalf("Decide = %+v, want %+v", got, tc.want)
			}
			if tc.err != "" {
				if got.Effect != tc.want.Effect || got.Rule != tc.want.Rule || !strings.Contains(got.Err, tc.err) {
					t.Fatalf("Decide = %+v, want %+v with an error containing %q", got, tc.want, tc.err)
				}
			}
		})
	}
}

func numbers(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = "1"
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func TestCompileRefuses(t *testing.T) {
	e := New()
	cases := []struct {
		name  string
		rules []tools.Rule
		want  []string // problem paths, each with a message containing the substring after " "
	}{
		{"parse error", []tools.Rule{{Tool: "*", When: `args.x ==`, Effect: tools.EffectDeny}}, []string{"rules[0].when Syntax error"}},
		{"second rule", []tools.Rule{{Tool: "*", Effect: tools.EffectDeny}, {Tool: "*", When: `nope == 1`, Effect: tools.EffectDeny}}, []string{"rules[1].when undeclared reference to 'nope'"}},
		{"not boolean", []tools.Rule{{Tool: "*", When: `"text"`, Effect: tools.EffectDeny}}, []string{"rules[0].when must be a boolean expression"}},
		{"too long", []tools.Rule{{Tool: "*", When: strings.Repeat("true && ", MaxExprBytes/8+1) + "true", Effect: tools.EffectDeny}}, []string{"rules[0].when longer than"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			probs := e.Check(tc.rules)
			if len(probs) != len(tc.want) {
				t.Fatalf("problems = %v, want %d", probs, len(tc.want))
			}
			for i, w := range tc.want {
				path, msg, _ := strings.Cut(w, " ")
				if probs[i].Path != path || !strings.Contains(probs[i].Message, msg) {
					t.Errorf("problem %d = %q, want at %s containing %q", i, probs[i], path, msg)
				}
				if strings.Contains(probs[i].Message, "\n") {
					t.Errorf("problem %d spans lines: %q", i, probs[i].Message)
				}
			}
		})
	}
}

func TestCompileOnce(t *testing.T) {
	e := New()
	rs := []tools.Rule{{Tool: "*", When: `args.a == 1`, Effect: tools.EffectDeny}}
	a, err := e.Compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Compile([]tools.Rule{{Tool: "*", When: `args.a == 1`, Effect: tools.EffectDeny}})
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("the same rules compiled twice")
	}
}
