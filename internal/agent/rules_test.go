package agent_test

import (
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/rules"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
)

// ruleProfile has three rules and a tool entry with a default effect.
func ruleProfile() tools.Profile {
	return tools.Profile{
		Tools: []tools.ToolConfig{{Name: "echo"}, {Name: "guarded_echo"}, {Name: "clock", DefaultEffect: tools.EffectDeny}, {Name: "sleep"}},
		Rules: []tools.Rule{
			{Tool: "echo", When: `args.text.startsWith("rm")`, Effect: tools.EffectDeny},
			{Tool: "ech?", When: `args.text == "ask"`, Effect: tools.EffectAsk},
			{Tool: "guarded_*", When: `args.text == "safe"`, Effect: tools.EffectAllow},
		},
	}
}

// ruleEnv is an env running prof with the rule engine.
func ruleEnv(t *testing.T, prof tools.Profile, approvals bool) *env {
	t.Helper()
	e := newEnv(t, opts{approvals: approvals, profile: &prof})
	e.restart(func(c *agent.Config) { c.Rules = rules.New().Rules })
	return e
}

// TestRuleEffects runs one turn per effect: the scripted model calls one tool, then
// says done; the call's tool/result (and approval/requested) name the deciding rule.
func TestRuleEffects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		call      string
		approvals bool
		approve   bool   // the call parks and is approved
		result    string // the tool/result's result, or
		errText   string // its error
		rule      string // the rule on tool/result ("" none)
	}{
		{name: "deny", call: `{"tool":"echo","args":{"text":"rm -rf /"}}`, errText: "denied by rule rules[0]", rule: "rules[0]"},
		{name: "deny on a missing key", call: `{"tool":"echo","args":{}}`, errText: "denied by rule rules[0]: rules: evaluation failed: no such key: text", rule: "rules[0]"},
		{name: "ask parks", call: `{"tool":"echo","args":{"text":"ask"}}`, approvals: true, approve: true, result: `{"text":"ask"}`, rule: "rules[1]"},
		{name: "ask without approvals", call: `{"tool":"echo","args":{"text":"ask"}}`, errText: "denied by rule rules[1]: " + agent.ErrTextRuleAsk, rule: "rules[1]"},
		{name: "allow skips needs_approval", call: `{"tool":"guarded_echo","args":{"text":"safe"}}`, approvals: true, result: `{"text":"safe"}`, rule: "rules[2]"},
		{name: "no rule matches", call: `{"tool":"echo","args":{"text":"hello"}}`, result: `{"text":"hello"}`},
		{name: "default effect", call: `{"tool":"clock","args":{}}`, errText: "denied by rule tools[2].default_effect", rule: "tools[2].default_effect"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := ruleEnv(t, ruleProfile(), tc.approvals)
			e.inject(script(`{"call":[`+tc.call+`]}`, `{"say":"done"}`), true)
			if tc.approve {
				evs := e.waitFor("approval/requested", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeApprovalRequested) == 1 })
				req := payload(ofType(evs, agent.TypeApprovalRequested)[0])
				if req["rule"] != tc.rule {
					t.Errorf("approval/requested %v, want rule %q", req, tc.rule)
				}
				if count(evs, agent.TypeToolResult) != 0 {
					t.Fatalf("the parked call ran:\n%s", dump(evs))
				}
				if err := e.svc.Approve(e.ctx, e.agentID, str(ofType(evs, agent.TypeToolCall)[0], "id")); err != nil {
					t.Fatal(err)
				}
			}
			evs := e.waitTurnEnds(1)
			e.settle()
			e.noErrors()
			if !tc.approve && count(evs, agent.TypeApprovalRequested) != 0 {
				t.Errorf("approval requested:\n%s", dump(evs))
			}
			res := ofType(evs, agent.TypeToolResult)
			if len(res) != 1 {
				t.Fatalf("tool/results:\n%s", dump(evs))
			}
			p := payload(res[0])
			if got := p["result"]; tc.result != "" && (got == nil || string(mustJSON(got)) != tc.result) || tc.result == "" && got != nil {
				t.Errorf("result %s, want %s", res[0].Payload, tc.result)
			}
			if got, _ := p["error"].(string); got != tc.errText {
				t.Errorf("error %q, want %q", got, tc.errText)
			}
			if got, _ := p["rule"].(string); got != tc.rule {
				t.Errorf("rule %q, want %q", got, tc.rule)
			}
			if lastTurnEnd(t, evs)["status"] != agent.StatusCompleted || chunkText(evs) != "done" {
				t.Errorf("turn:\n%s", dump(evs))
			}
		})
	}
}

// TestRulesAfterAllowList: a call outside the allow list is refused by the policy,
// not decided by a rule that would allow it.
func TestRulesAfterAllowList(t *testing.T) {
	t.Parallel()
	prof := ruleProfile()
	prof.Rules = append([]tools.Rule{{Tool: "*", Effect: tools.EffectAllow}}, prof.Rules...)
	e := ruleEnv(t, prof, false)
	if err := e.svc.SetPolicy(e.ctx, e.agentID, []string{"clock"}); err != nil {
		t.Fatal(err)
	}
	e.inject(script(`{"call":[{"tool":"echo","args":{"text":"hi"}}]}`, `{"say":"done"}`), true)
	evs := e.waitTurnEnds(1)
	e.settle()
	res := payload(ofType(evs, agent.TypeToolResult)[0])
	if res["error"] != agent.ErrTextPolicy || res["rule"] != nil {
		t.Errorf("tool/result %v", res)
	}
}

// TestBadRuleFailsTurn: a profile whose rule does not compile runs no tool; the turn
// fails naming the rule.
func TestBadRuleFailsTurn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		engine bool
		reason string
	}{
		{"does not compile", true, "rules[0].when"},
		{"no engine", false, "no rule engine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prof := tools.Profile{Tools: []tools.ToolConfig{{Name: "echo"}}, Rules: []tools.Rule{{Tool: "*", When: `args.text ==`, Effect: tools.EffectAllow}}}
			if !tc.engine {
				prof.Rules[0].When = `true`
			}
			e := newEnv(t, opts{profile: &prof})
			if tc.engine {
				e.restart(func(c *agent.Config) { c.Rules = rules.New().Rules })
			}
			e.inject(script(`{"call":[{"tool":"echo","args":{"text":"x"}}]}`, `{"say":"never"}`), true)
			evs := e.waitTurnEnds(1)
			e.settle()
			res := payload(ofType(evs, agent.TypeToolResult)[0])
			end := lastTurnEnd(t, evs)
			if res["result"] != nil || end["status"] != agent.StatusFailed || !strings.Contains(end["reason"].(string), tc.reason) {
				t.Errorf("tool/result %v, turn/end %v, want failed naming %q", res, end, tc.reason)
			}
		})
	}
}

// TestRulesPinnedPerTurn: a turn decides its calls by the rules in force when it
// started. The agent's stored profile drops every rule while the turn is parked; the
// turn's next call is still denied by the rule it started with, in a new invocation;
// the next turn runs under the new profile.
func TestRulesPinnedPerTurn(t *testing.T) {
	t.Parallel()
	e := ruleEnv(t, ruleProfile(), true)
	e.inject(script(`{"call":[{"tool":"guarded_echo","args":{"text":"park"}}]}`, `{"call":[{"tool":"echo","args":{"text":"rm one"}}]}`, `{"say":"done"}`), true)
	evs := e.waitFor("approval/requested", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeApprovalRequested) == 1 })
	e.settle()
	if err := agent.PutProfile(e.ctx, e.db, e.names["AgentsTable"], e.agentID, `{"rules":[]}`); err != nil {
		t.Fatal(err)
	}
	e.restart(nil) // the verdict and the rest of the turn run in a new process
	if err := e.svc.Approve(e.ctx, e.agentID, str(ofType(evs, agent.TypeToolCall)[0], "id")); err != nil {
		t.Fatal(err)
	}
	evs = e.waitTurnEnds(1)
	e.settle()
	res := ofType(evs, agent.TypeToolResult)
	if len(res) != 2 || str(res[1], "error") != "denied by rule rules[0]" || payload(res[1])["rule"] != "rules[0]" {
		t.Fatalf("the turn's second call, after the profile dropped its rules: want denied by the rule the turn started with:\n%s", dump(evs))
	}
	e.inject(script(`{"call":[{"tool":"echo","args":{"text":"rm two"}}]}`, `{"say":"done"}`), true)
	evs = e.waitTurnEnds(2)
	e.settle()
	e.noErrors()
	res = ofType(evs, agent.TypeToolResult)
	if len(res) != 3 || string(mustJSON(payload(res[2])["result"])) != `{"text":"rm two"}` {
		t.Errorf("the next turn, under the profile without rules: want the call run:\n%s", dump(evs))
	}
}
