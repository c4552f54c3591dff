package tools

import (
	"encoding/json"
	"fmt"
)

// Rule is one entry of a profile's "rules": calls of tools matching the glob Tool
// (Fnmatch) whose arguments make the CEL expression When true (empty: always) get
// Effect. Rules are checked in order after the allow list; the first that matches
// decides. Package rules compiles and evaluates them; here they are only decoded.
type Rule struct {
	Tool   string `json:"tool"`
	When   string `json:"when,omitempty"`
	Effect Effect `json:"effect"`
}

// Effect is what a rule (or a tool entry's default_effect) does to a call.
type Effect string

// Effects.
const (
	EffectAllow Effect = "allow" // the call runs without asking
	EffectAsk   Effect = "ask"   // the call waits for a verdict, as a tool that needs approval does
	EffectDeny  Effect = "deny"  // the call is answered with an error result and does not run
)

func (e Effect) valid() bool {
	return e == EffectAllow || e == EffectAsk || e == EffectDeny
}

// Decision is what the rules decide for one call. Effect "" is no decision: no rule
// matched. Rule names the deciding rule by its JSON path ("rules[2]"). Err is set
// when the deciding rule could not be evaluated (Effect is then EffectDeny).
type Decision struct {
	Effect Effect
	Rule   string
	Err    string
}

// RuleSet is a profile's compiled rules (package rules compiles them).
type RuleSet interface {
	// Decide returns the decision of the first rule matching a call of tool with
	// args (a JSON object); Effect "" when none matches.
	Decide(tool string, args json.RawMessage) Decision
}

// RulePath is the JSON path of a profile's i-th rule.
func RulePath(i int) string { return fmt.Sprintf("rules[%d]", i) }

var ruleKeys = map[string]bool{"tool": true, "when": true, "effect": true}

func decodeRule(pe *ProfileError, path string, raw json.RawMessage) (Rule, bool) {
	var obj map[string]json.RawMessage
	if !decodeInto(pe, path, raw, &obj) {
		return Rule{}, false
	}
	if obj == nil {
		pe.Add(path, "want an object")
		return Rule{}, false
	}
	n := len(pe.Problems)
	for _, k := range sortedKeys(obj) {
		if !ruleKeys[k] {
			pe.Add(path+"."+k, "unknown key (tool, when, effect)")
		}
	}
	var r Rule
	decodeInto(pe, path+".tool", obj["tool"], &r.Tool)
	decodeInto(pe, path+".when", obj["when"], &r.When)
	decodeInto(pe, path+".effect", obj["effect"], &r.Effect)
	if r.Tool == "" {
		pe.Add(path+".tool", "required: a glob over tool names, e.g. \"*\" or \"fs_*\"")
	}
	if !r.Effect.valid() {
		pe.Add(path+".effect", "want \"allow\", \"ask\" or \"deny\", got %q", r.Effect)
	}
	return r, len(pe.Problems) == n
}

func checkDefaultEffect(pe *ProfileError, path string, e Effect) {
	if e != "" && !e.valid() {
		pe.Add(path, "want \"allow\", \"ask\" or \"deny\", got %q", e)
	}
}
