package profile_test

import (
	"context"
	"testing"

	"github.com/terret/terret-ws/internal/profile"
	"github.com/terret/terret-ws/internal/rules"
)

// TestCheckRules: with a rule engine, Check names each rule that does not compile;
// without one (a process that runs no turn), it leaves the expressions alone.
func TestCheckRules(t *testing.T) {
	ctx := context.Background()
	p := decode(t, `{"tools": [{"name": "echo"}], "rules": [
	  {"tool": "*", "when": "has(args.text)", "effect": "allow"},
	  {"tool": "*", "when": "args.text ==", "effect": "deny"},
	  {"tool": "*", "when": "1 + 1", "effect": "deny"}]}`)
	e := env()
	if err := profile.Check(ctx, p, e); err != nil {
		t.Fatalf("Check without a rule engine = %v, want nil", err)
	}
	e.Rules = rules.New().Rules
	err := profile.Check(ctx, p, e)
	want := `tools: invalid agent profile: rules[1].when: column 13: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}; rules[2].when: must be a boolean expression, is of type int`
	if err == nil || err.Error() != want {
		t.Fatalf("Check = %v\nwant %s", err, want)
	}
	p.Rules = p.Rules[:1]
	if err := profile.Check(ctx, p, e); err != nil {
		t.Fatalf("Check(good rules) = %v", err)
	}
}
