// Package rules compiles and evaluates a profile's rules over tool arguments: each a
// glob over tool names, a CEL expression (https://cel.dev) over the call's arguments,
// bound to the variable args, and an effect. Only the processes that check profiles or
// run turns (the runner, `terret dev`, `terret agent put`) link it; the runtime reaches
// it through the narrow interfaces of packages agent and profile.
package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"

	"github.com/terret/terret-ws/internal/tools"
)

// CostLimit bounds the work one evaluation of one rule may do, in CEL's cost units
// (roughly one per operation, per list element visited, per byte compared): past it
// the evaluation stops and the call is denied, so a rule cannot stall a turn.
const CostLimit = 100_000

// MaxExprBytes bounds the text of one when expression.
const MaxExprBytes = 4 << 10

// ErrEval: a rule's expression could not be evaluated on a call's arguments.
var ErrEval = errors.New("rules: evaluation failed")

// Engine compiles rule lists, each once: compiled lists are kept by their text, so a
// runner that sees the same profile version again does not compile it again. It is
// safe for concurrent use.
type Engine struct {
	env *cel.Env

	mu    sync.Mutex
	cache map[string]*Set
}

// New returns an Engine.
func New() *Engine {
	env, err := cel.NewEnv(cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		panic(fmt.Sprintf("rules: CEL environment: %v", err)) // static: cannot happen
	}
	return &Engine{env: env, cache: map[string]*Set{}}
}

// Set is a compiled rule list.
type Set struct {
	rules []compiled
}

type compiled struct {
	glob string
	prg  cel.Program // nil: no when, always true
	eff  tools.Effect
}

// Check reports every rule of rs that does not compile, as problems at
// "rules[N].when" naming the parse or type error.
func (e *Engine) Check(rs []tools.Rule) []tools.Problem {
	_, err := e.Compile(rs)
	var pe *tools.ProfileError
	if errors.As(err, &pe) {
		return pe.Problems
	}
	return nil
}

// Compile compiles rs; an error is a *tools.ProfileError naming "rules[N].when" of
// each rule that does not compile.
func (e *Engine) Compile(rs []tools.Rule) (*Set, error) {
	key, err := json.Marshal(rs)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	s, ok := e.cache[string(key)]
	e.mu.Unlock()
	if ok {
		return s, nil
	}
	pe := &tools.ProfileError{}
	s = &Set{rules: make([]compiled, len(rs))}
	for i, r := range rs {
		s.rules[i] = compiled{glob: r.Tool, eff: r.Effect}
		if strings.TrimSpace(r.When) == "" {
			continue
		}
		path := tools.RulePath(i) + ".when"
		if len(r.When) > MaxExprBytes {
			pe.Add(path, "longer than %d bytes", MaxExprBytes)
			continue
		}
		ast, iss := e.env.Compile(r.When)
		if iss.Err() != nil {
			pe.Add(path, "%s", issues(iss))
			continue
		}
		if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
			pe.Add(path, "must be a boolean expression, is of type %s", t)
			continue
		}
		prg, err := e.env.Program(ast, cel.CostLimit(CostLimit), cel.EvalOptions(cel.OptTrackCost))
		if err != nil {
			pe.Add(path, "%s", oneLine(err.Error()))
			continue
		}
		s.rules[i].prg = prg
	}
	if err := pe.Err(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	if len(e.cache) > 1000 {
		clear(e.cache)
	}
	e.cache[string(key)] = s
	e.mu.Unlock()
	return s, nil
}

// Rules is Compile as the runtime takes it (agent.Config.Rules).
func (e *Engine) Rules(rs []tools.Rule) (tools.RuleSet, error) {
	s, err := e.Compile(rs)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Decide returns the decision of the first rule that matches a call of tool with args
// (a JSON object), or a Decision with no effect. A rule whose expression fails on args
// (a missing key, a type mismatch, the cost limit) decides the call: it is denied, Err
// saying why. Test for optional keys with has(args.key).
func (s *Set) Decide(tool string, args json.RawMessage) tools.Decision {
	if s == nil || len(s.rules) == 0 {
		return tools.Decision{}
	}
	var vars map[string]any
	parsed := false
	for i, r := range s.rules {
		if !tools.Fnmatch(r.glob, tool) {
			continue
		}
		d := tools.Decision{Effect: r.eff, Rule: tools.RulePath(i)}
		if r.prg == nil {
			return d
		}
		if !parsed {
			parsed = true
			if err := json.Unmarshal(args, &vars); err != nil || vars == nil {
				vars = map[string]any{}
			}
		}
		ok, err := eval(r.prg, vars)
		if err != nil {
			return tools.Decision{Effect: tools.EffectDeny, Rule: d.Rule, Err: err.Error()}
		}
		if ok {
			return d
		}
	}
	return tools.Decision{}
}

func eval(prg cel.Program, vars map[string]any) (bool, error) {
	out, _, err := prg.Eval(map[string]any{"args": vars})
	if err != nil {
		return false, fmt.Errorf("%w: %s", ErrEval, oneLine(err.Error()))
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("%w: the expression gave %s, not a boolean", ErrEval, out.Type().TypeName())
	}
	return b, nil
}

// issues describes CEL's compile errors on one line, each at its position in the
// expression ("column 13: Syntax error: …"), without the excerpt of it CEL adds.
func issues(iss *cel.Issues) string {
	var parts []string
	for _, e := range iss.Errors() {
		pos := fmt.Sprintf("column %d", e.Location.Column()+1)
		if l := e.Location.Line(); l > 1 {
			pos = fmt.Sprintf("line %d, %s", l, pos)
		}
		parts = append(parts, pos+": "+oneLine(e.Message))
	}
	if len(parts) == 0 {
		return oneLine(iss.Err().Error())
	}
	return strings.Join(parts, "; ")
}

// oneLine folds CEL's multi-line messages (source excerpt, caret) into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " | ")), " ")
}
