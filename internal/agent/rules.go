package agent

import (
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
