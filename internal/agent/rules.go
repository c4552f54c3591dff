package agent

import (
	"encoding/json"
	"fmt"

	"github.com/terret/terret-ws/internal/tools"
)

// RuleCompiler compiles a profile's rules, each list once; its error names the JSON
// path of each rule that does not compile ("rules[N].when"). Config.Rules.
type RuleCompiler func(rs []tools.Rule) (tools.RuleSet, error)

// errNoRuleEngine: a profile has rules and this process cannot evaluate them.
var errNoRuleEngine = fmt.Errorf("agent: the profile has rules and this process has no rule engine")

// rulesOf compiles prof's rules (nil: it has none).
func (c *core) rulesOf(prof tools.Profile) (tools.RuleSet, error) {
	if len(prof.Rules) == 0 {
		return nil, nil
	}
	if c.cfg.Rules == nil {
		return nil, errNoRuleEngine
	}
	rs, err := c.cfg.Rules(prof.Rules)
	if err != nil {
		return nil, fmt.Errorf("the agent's profile: %w", err)
	}
	return rs, nil
}

// ruleDecision is what decides c beyond the allow list: the first matching rule, or
// else the default_effect of the tool's profile entry (Effect "": neither).
func ruleDecision(rs tools.RuleSet, set *tools.Set, c callInfo) tools.Decision {
	if rs != nil {
		if d := rs.Decide(c.Name, c.Args); d.Effect != "" {
			return d
		}
	}
	return set.DefaultEffect(c.Name)
}

// ruleDeniedText is the error result of a call a rule denies.
func ruleDeniedText(d tools.Decision) string {
	text := ErrTextRuleDenied + " " + d.Rule
	if d.Err != "" {
		text += ": " + d.Err
	}
	return text
}

// Rules pinned per turn. A turn decides its tool calls by the rules in force when it
// started, however the profile changes until it ends (a stored profile put, an edited
// profile file): the claim that records the turn on the state item also records the
// profile's rules (claim.rules, the state item's turn_rules, cleared with the turn), in
// the same write, so pinning costs no request; a turn that parks for an approval and
// resumes in another invocation, or hands over at a deadline, reads them back with the
// state. The next turn pins the rules in force at its own start.

// pinnedRules is prof's rules as the claim records them: JSON, "[]" for none.
func pinnedRules(prof tools.Profile) string {
	if len(prof.Rules) == 0 {
		return "[]"
	}
	b, err := json.Marshal(prof.Rules)
	if err != nil {
		return "" // not pinned: the turn reads the profile's
	}
	return string(b)
}

// turnRules is prof with the open turn's pinned rules in place of its own, when the
// turn pinned them.
func (rn *activeRun) turnRules(prof tools.Profile) tools.Profile {
	if rn.st.TurnRules == "" {
		return prof
	}
	var rs []tools.Rule
	if err := json.Unmarshal([]byte(rn.st.TurnRules), &rs); err != nil {
		return prof
	}
	prof.Rules = rs
	return prof
}
