package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// Errors of profiles and the kinds registry.
var (
	ErrBadProfile  = errors.New("tools: invalid agent profile")
	ErrUnknownKind = errors.New("tools: unknown tool kind")
)

// KindBuiltin is the kind of the demo tools, chosen by name. A ToolConfig without a
// kind is builtin.
const KindBuiltin = "builtin"

// DefaultSystem is the system prompt of DefaultProfile.
const DefaultSystem = "You are a helpful agent. Use the tools you are given when they help."

// Profile is what an agent runs with: its system prompt, its model roles, its model
// providers and its tools. A deployment has one default profile (AGENT_PROFILE, or
// `terret dev --profile`); an agent may carry an override, merged over it by Merge.
// Providers holds provider settings by provider name, opaque here: package profile
// checks them and hands each to its provider. docs/agents.md describes the format.
//
//	{"system": "You are …",
//	 "models": {"main": "acme/gpt-4o-mini", "titler": "scripted"},
//	 "providers": {"acme": {"kind": "openai", "base_url": "…", "api_key_env": "ACME_KEY"}},
//	 "tools": [{"name": "echo"},
//	           {"name": "weather", "kind": "lambda", "description": "…", "schema": {…},
//	            "concurrency": "parallel", "needs_approval": false, "spec": {…}}]}
type Profile struct {
	System    string                     `json:"system,omitempty"`
	Models    Models                     `json:"models,omitzero"`
	Providers map[string]json.RawMessage `json:"providers,omitempty"`
	Tools     []ToolConfig               `json:"tools"` // nil in an override: keep the default's
	Quotas    Quotas                     `json:"quotas,omitzero"`

	// AllowedModels bounds set_model: globs over "provider/model" specs and
	// "scripted" (nil: package profile's default, see profile.AllowsModel).
	AllowedModels []string `json:"allowed_models,omitempty"`
	Context       Context  `json:"context,omitzero"`
	// RetentionDays expires the agent's log events that many days after they were
	// appended, once the runner no longer needs them (docs/architecture.md,
	// "Retention"); 0: the deployment's RETENTION_DAYS (0 there: keep forever).
	RetentionDays int64 `json:"retention_days,omitempty"`
	// Rules decide tool calls over their arguments, after the allow list (nil in an
	// override: keep the default's). See Rule.
	Rules []Rule `json:"rules,omitempty"`
	// Webhooks POST the agent's matching log events to other systems (nil in an
	// override: keep the default's). See Webhook.
	Webhooks []Webhook `json:"webhooks,omitempty"`
}

// MaxRetentionDays bounds retention_days (ten years).
const MaxRetentionDays = 3650

// Context bounds the history sent to the main model (docs/agents.md, "Long-lived
// agents"): BudgetTokens is the most history tokens one model call sends; over it the
// runtime compacts the history into a summary first. 0: the model family's default.
type Context struct {
	BudgetTokens int64 `json:"budget_tokens,omitempty"`
}

// MinBudgetTokens is the smallest context budget a profile may set: below it a
// summary and one step could not fit.
const MinBudgetTokens = 256

// Quotas cap what one agent may use; 0 is no cap. A turn that would start over a cap
// ends rejected (see docs/agents.md, "Quotas"). Days and months are UTC.
type Quotas struct {
	TurnsPerDay    int64 `json:"turns_per_day,omitempty"`
	TokensPerMonth int64 `json:"tokens_per_month,omitempty"` // input plus output tokens
	// TurnTokens and TurnModelCalls bound one turn: the model tokens (input plus
	// output, its compactor calls included) and the model calls it may use. They are
	// checked before every model call of the turn; a turn that would pass one ends
	// rejected.
	TurnTokens     int64 `json:"turn_tokens,omitempty"`
	TurnModelCalls int64 `json:"turn_model_calls,omitempty"`
	// Schedules bounds the agent's schedules (internal/schedule; 0: the default, 20).
	Schedules int64 `json:"schedules,omitempty"`
}

// Models names the model spec of each role ("scripted" or "provider/model"); an empty
// role keeps the default's (and, below every profile, the deployment's MAIN_MODEL or
// TITLER_MODEL).
type Models struct {
	Main   string `json:"main,omitempty"`
	Titler string `json:"titler,omitempty"`
	// Compactor writes the summaries of compacted history; empty: the main model.
	Compactor string `json:"compactor,omitempty"`
}

// ToolConfig is one tool of a profile. Kind selects the Builder (default builtin);
// Spec is the kind's own settings (a Lambda function, an MCP server, …). Description,
// Schema, Concurrency and NeedsApproval, when set, override what the built tool
// declares.
type ToolConfig struct {
	Name          string          `json:"name"`
	Kind          string          `json:"kind,omitempty"`
	Description   string          `json:"description,omitempty"`
	Schema        json.RawMessage `json:"schema,omitempty"`
	Concurrency   Concurrency     `json:"concurrency,omitempty"`
	NeedsApproval *bool           `json:"needs_approval,omitempty"`
	Spec          json.RawMessage `json:"spec,omitempty"`
	// DefaultEffect applies to the calls of this entry's tools that no rule decides:
	// on an MCP server, every tool the server lists, including tools it adds later.
	DefaultEffect Effect `json:"default_effect,omitempty"`
	// Approval bounds how long an approval request for this entry's tools waits:
	// {"expires_in": "30m"} resolves one with no verdict by then as denied, reason
	// "expired" (nil: it waits for a verdict).
	Approval *Approval `json:"approval,omitempty"`
}

// Approval is a tool entry's approval settings.
type Approval struct {
	ExpiresIn string `json:"expires_in"` // a Go duration: "90s", "30m", "24h"
}

// MaxApprovalExpiry bounds a tool entry's approval.expires_in.
const MaxApprovalExpiry = 30 * 24 * time.Hour

// ExpiresAfter is a's expires_in as a duration (0: none or invalid).
func (a *Approval) ExpiresAfter() time.Duration {
	if a == nil {
		return 0
	}
	d, err := time.ParseDuration(a.ExpiresIn)
	if err != nil || d <= 0 {
		return 0
	}
	return d
}

// Problem is one thing wrong with a profile: Path is the JSON path of the offending
// value ("providers.acme.base_url", "tools[2].spec.command"; "" for the document).
type Problem struct {
	Path    string
	Message string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// ProfileError lists every problem found in a profile. It wraps ErrBadProfile. Its
// text quotes paths and names, never the values of keys (a profile holds none).
type ProfileError struct {
	Problems []Problem
}

func (e *ProfileError) Error() string {
	return ErrBadProfile.Error() + ": " + e.Detail()
}

// Detail is the problems alone, "PATH: PROBLEM; …", for a reader of the profile: no
// package prefix that could be read as one of the profile's sections.
func (e *ProfileError) Detail() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return strings.Join(parts, "; ")
}

// Unwrap returns ErrBadProfile.
func (e *ProfileError) Unwrap() error { return ErrBadProfile }

// Add records a problem at path.
func (e *ProfileError) Add(path, format string, args ...any) {
	e.Problems = append(e.Problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Err returns e if it holds a problem, else nil.
func (e *ProfileError) Err() error {
	if len(e.Problems) == 0 {
		return nil
	}
	return e
}

// DefaultProfile is the profile of a deployment without AGENT_PROFILE: DefaultSystem
// and the four demo tools.
func DefaultProfile() Profile {
	p := Profile{System: DefaultSystem}
	for _, t := range Demo() {
		p.Tools = append(p.Tools, ToolConfig{Name: t.Definition().Name})
	}
	return p
}

// ParseProfile reads a profile from s: "" is DefaultProfile, text starting with "{"
// is the profile's JSON, anything else is the path of a JSON file. It returns an
// error wrapping ErrBadProfile as DecodeProfile does.
func ParseProfile(s string) (Profile, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return DefaultProfile(), nil
	}
	raw := []byte(s)
	if !strings.HasPrefix(s, "{") {
		b, err := os.ReadFile(s)
		if err != nil {
			return Profile{}, fmt.Errorf("%w: read %s: %v", ErrBadProfile, s, err)
		}
		raw = b
	}
	return DecodeProfile(raw)
}

// DecodeProfile decodes a profile's JSON strictly: an unknown key, a value of the
// wrong type, a tool without a name or with an invalid concurrency is a problem. It
// returns a *ProfileError (wrapping ErrBadProfile) naming the JSON path of each.
// What the fields refer to (tool kinds, providers, keys) is checked by package
// profile, which knows them.
func DecodeProfile(raw []byte) (Profile, error) {
	var p Profile
	pe := &ProfileError{}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil || top == nil {
		msg := "not a JSON object"
		if err != nil {
			msg = "not a JSON object: " + jsonText(err)
		}
		pe.Add("", "%s", msg)
		return Profile{}, pe
	}
	for _, k := range sortedKeys(top) {
		v := top[k]
		switch k {
		case "system":
			decodeInto(pe, k, v, &p.System)
		case "models":
			var m map[string]json.RawMessage
			if !decodeInto(pe, k, v, &m) {
				continue
			}
			for _, role := range sortedKeys(m) {
				switch role {
				case "main":
					decodeInto(pe, "models.main", m[role], &p.Models.Main)
				case "titler":
					decodeInto(pe, "models.titler", m[role], &p.Models.Titler)
				case "compactor":
					decodeInto(pe, "models.compactor", m[role], &p.Models.Compactor)
				default:
					pe.Add("models."+role, "unknown model role (main, titler, compactor)")
				}
			}
		case "allowed_models":
			var list []json.RawMessage
			if !decodeInto(pe, k, v, &list) || list == nil {
				continue // null: as if absent
			}
			p.AllowedModels = make([]string, len(list))
			for i, item := range list {
				decodeInto(pe, fmt.Sprintf("allowed_models[%d]", i), item, &p.AllowedModels[i])
			}
		case "providers":
			var m map[string]json.RawMessage
			if !decodeInto(pe, k, v, &m) {
				continue
			}
			for _, name := range sortedKeys(m) {
				var obj map[string]json.RawMessage
				if decodeInto(pe, "providers."+name, m[name], &obj) {
					if p.Providers == nil {
						p.Providers = map[string]json.RawMessage{}
					}
					p.Providers[name] = m[name]
				}
			}
		case "tools":
			var list []json.RawMessage
			if !decodeInto(pe, k, v, &list) {
				continue
			}
			if list == nil && string(bytes.TrimSpace(v)) == "null" {
				continue
			}
			p.Tools = make([]ToolConfig, 0, len(list))
			for i, item := range list {
				if t, ok := decodeTool(pe, fmt.Sprintf("tools[%d]", i), item); ok {
					p.Tools = append(p.Tools, t)
				}
			}
		case "context":
			var m map[string]json.RawMessage
			if !decodeInto(pe, k, v, &m) {
				continue
			}
			for _, name := range sortedKeys(m) {
				switch name {
				case "budget_tokens":
					if decodeInto(pe, "context.budget_tokens", m[name], &p.Context.BudgetTokens) && p.Context.BudgetTokens < MinBudgetTokens {
						pe.Add("context.budget_tokens", "must be at least %d", MinBudgetTokens)
					}
				default:
					pe.Add("context."+name, "unknown key (budget_tokens)")
				}
			}
		case "quotas":
			var m map[string]json.RawMessage
			if !decodeInto(pe, k, v, &m) {
				continue
			}
			for _, name := range sortedKeys(m) {
				var dst *int64
				switch name {
				case "turns_per_day":
					dst = &p.Quotas.TurnsPerDay
				case "tokens_per_month":
					dst = &p.Quotas.TokensPerMonth
				case "turn_tokens":
					dst = &p.Quotas.TurnTokens
				case "turn_model_calls":
					dst = &p.Quotas.TurnModelCalls
				case "schedules":
					dst = &p.Quotas.Schedules
				default:
					pe.Add("quotas."+name, "unknown quota (turns_per_day, tokens_per_month, turn_tokens, turn_model_calls, schedules)")
					continue
				}
				if decodeInto(pe, "quotas."+name, m[name], dst) && *dst < 0 {
					pe.Add("quotas."+name, "must be 0 (no cap) or more, got %d", *dst)
				}
			}
		case "rules":
			var list []json.RawMessage
			if !decodeInto(pe, k, v, &list) || list == nil {
				continue // null: as if absent
			}
			p.Rules = make([]Rule, 0, len(list))
			for i, item := range list {
				if r, ok := decodeRule(pe, RulePath(i), item); ok {
					p.Rules = append(p.Rules, r)
				}
			}
		case "webhooks":
			p.Webhooks = decodeWebhooks(pe, k, v)
		case "retention_days":
			if decodeInto(pe, k, v, &p.RetentionDays) && (p.RetentionDays < 1 || p.RetentionDays > MaxRetentionDays) {
				pe.Add(k, "must be a whole number of days from 1 to %d, got %d", MaxRetentionDays, p.RetentionDays)
			}
		default:
			pe.Add(k, "unknown key (system, models, allowed_models, providers, tools, rules, quotas, context, retention_days, webhooks)")
		}
	}
	if err := pe.Err(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

var toolKeys = map[string]bool{"name": true, "kind": true, "description": true, "schema": true,
	"concurrency": true, "needs_approval": true, "spec": true, "default_effect": true, "approval": true}

func decodeTool(pe *ProfileError, path string, raw json.RawMessage) (ToolConfig, bool) {
	var obj map[string]json.RawMessage
	if !decodeInto(pe, path, raw, &obj) {
		return ToolConfig{}, false
	}
	n := len(pe.Problems)
	for _, k := range sortedKeys(obj) {
		if !toolKeys[k] {
			pe.Add(path+"."+k, "unknown key (name, kind, description, schema, concurrency, needs_approval, default_effect, approval, spec)")
		}
	}
	var t ToolConfig
	decodeInto(pe, path+".name", obj["name"], &t.Name)
	decodeInto(pe, path+".kind", obj["kind"], &t.Kind)
	decodeInto(pe, path+".description", obj["description"], &t.Description)
	decodeInto(pe, path+".concurrency", obj["concurrency"], &t.Concurrency)
	if decodeInto(pe, path+".default_effect", obj["default_effect"], &t.DefaultEffect) {
		checkDefaultEffect(pe, path+".default_effect", t.DefaultEffect)
	}
	if v, ok := obj["approval"]; ok {
		var a Approval
		if decodeInto(pe, path+".approval", v, &a) {
			d, err := time.ParseDuration(a.ExpiresIn)
			switch {
			case err != nil:
				pe.Add(path+".approval.expires_in", "%q is not a duration (\"90s\", \"30m\", \"24h\")", a.ExpiresIn)
			case d < time.Second || d > MaxApprovalExpiry:
				pe.Add(path+".approval.expires_in", "%s: must be between 1s and %s", a.ExpiresIn, MaxApprovalExpiry)
			default:
				t.Approval = &a
			}
		}
	}
	if v, ok := obj["needs_approval"]; ok {
		var b bool
		if decodeInto(pe, path+".needs_approval", v, &b) {
			t.NeedsApproval = &b
		}
	}
	if v, ok := obj["schema"]; ok {
		var m map[string]json.RawMessage
		if decodeInto(pe, path+".schema", v, &m) {
			t.Schema = v
		}
	}
	if v, ok := obj["spec"]; ok {
		var m map[string]json.RawMessage
		if decodeInto(pe, path+".spec", v, &m) {
			t.Spec = v
		}
	}
	if t.Name == "" {
		pe.Add(path+".name", "required")
	}
	if t.Concurrency != "" && t.Concurrency != Parallel && t.Concurrency != Serial {
		pe.Add(path+".concurrency", "%q is not parallel or serial", t.Concurrency)
	}
	return t, len(pe.Problems) == n
}

// decodeInto decodes raw (absent: nothing) into v, recording a problem at path if it
// does not fit.
func decodeInto(pe *ProfileError, path string, raw json.RawMessage, v any) bool {
	if raw == nil {
		return true
	}
	if err := json.Unmarshal(raw, v); err != nil {
		pe.Add(path, "%s", jsonText(err))
		return false
	}
	return true
}

// jsonText describes a decoding error without quoting the document.
func jsonText(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("want %s, got JSON %s", kindName(te.Type.Kind().String()), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err)
	}
	return err.Error()
}

func kindName(k string) string {
	switch k {
	case "map", "struct":
		return "an object"
	case "slice":
		return "an array"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	}
	return k
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Merge returns p with over laid on top: over's System if not empty, over's model
// roles that are set, over's Tools if not nil (the whole list is replaced, so
// `"tools": []` removes every tool), over's Rules if not nil (likewise), over's quotas that are set, and over's Providers entries replacing p's of
// the same name.
func (p Profile) Merge(over Profile) Profile {
	out := p
	if over.System != "" {
		out.System = over.System
	}
	if over.Models.Main != "" {
		out.Models.Main = over.Models.Main
	}
	if over.Models.Titler != "" {
		out.Models.Titler = over.Models.Titler
	}
	if over.Tools != nil {
		out.Tools = over.Tools
	}
	if over.Rules != nil {
		out.Rules = over.Rules
	}
	if over.AllowedModels != nil {
		out.AllowedModels = over.AllowedModels
	}
	if over.Webhooks != nil {
		out.Webhooks = over.Webhooks
	}
	if over.Models.Compactor != "" {
		out.Models.Compactor = over.Models.Compactor
	}
	if over.Context.BudgetTokens != 0 {
		out.Context.BudgetTokens = over.Context.BudgetTokens
	}
	if over.RetentionDays != 0 {
		out.RetentionDays = over.RetentionDays
	}
	if over.Quotas.TurnsPerDay != 0 {
		out.Quotas.TurnsPerDay = over.Quotas.TurnsPerDay
	}
	if over.Quotas.TokensPerMonth != 0 {
		out.Quotas.TokensPerMonth = over.Quotas.TokensPerMonth
	}
	if over.Quotas.TurnTokens != 0 {
		out.Quotas.TurnTokens = over.Quotas.TurnTokens
	}
	if over.Quotas.TurnModelCalls != 0 {
		out.Quotas.TurnModelCalls = over.Quotas.TurnModelCalls
	}
	if over.Quotas.Schedules != 0 {
		out.Quotas.Schedules = over.Quotas.Schedules
	}
	if len(over.Providers) > 0 {
		out.Providers = map[string]json.RawMessage{}
		for k, v := range p.Providers {
			out.Providers[k] = v
		}
		for k, v := range over.Providers {
			out.Providers[k] = v
		}
	}
	return out
}

// Kinds returns the tool kinds r can build, sorted.
func (r *Registry) Kinds() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.kinds)+len(r.sets))
	for k := range r.kinds {
		out = append(out, k)
	}
	for k := range r.sets {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// BuiltinNames returns the names of the builtin (demo) tools.
func BuiltinNames() []string {
	var out []string
	for _, t := range Demo() {
		out = append(out, t.Definition().Name)
	}
	return append(out, ToolSchedule)
}

// Builder builds the tool one ToolConfig of its kind describes. The lambda and mcp
// kinds are registered by the wiring with RegisterKind, closing over their clients.
type Builder func(cfg ToolConfig) (Tool, error)

// SetBuilder builds every tool one ToolConfig of its kind stands for — an MCP server
// is one profile entry and many tools. The tools keep their own names and
// definitions; the entry's Name only labels it in errors.
type SetBuilder func(cfg ToolConfig) ([]Tool, error)

// Registry maps tool kinds to Builders. KindBuiltin (the demo tools) is always there.
// It is safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	kinds    map[string]Builder
	sets     map[string]SetBuilder
	builtins map[string]Tool // KindBuiltin's tools by name: the demo tools and RegisterBuiltin's
}

// NewRegistry returns a registry knowing only KindBuiltin.
func NewRegistry() *Registry {
	r := &Registry{sets: map[string]SetBuilder{}, builtins: map[string]Tool{}}
	for _, t := range Demo() {
		r.builtins[t.Definition().Name] = t
	}
	r.kinds = map[string]Builder{
		KindBuiltin: func(cfg ToolConfig) (Tool, error) {
			r.mu.RLock()
			t, ok := r.builtins[cfg.Name]
			r.mu.RUnlock()
			if !ok {
				if cfg.Name == ToolSchedule {
					return nil, fmt.Errorf("%w: the builtin tool %q is not available here", ErrUnknownTool, cfg.Name)
				}
				return nil, fmt.Errorf("%w: no builtin tool %q", ErrUnknownTool, cfg.Name)
			}
			return t, nil
		},
	}
	return r
}

// RegisterKind makes b build the tools of kind. Registering a kind again replaces
// its Builder.
func (r *Registry) RegisterKind(kind string, b Builder) error {
	if kind == "" || b == nil {
		return fmt.Errorf("%w: empty kind or nil builder", ErrBadProfile)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.sets, kind)
	r.kinds[kind] = b
	return nil
}

// RegisterSetKind makes b build the tools of kind, several per profile entry.
// Registering a kind again replaces its builder.
func (r *Registry) RegisterSetKind(kind string, b SetBuilder) error {
	if kind == "" || b == nil {
		return fmt.Errorf("%w: empty kind or nil builder", ErrBadProfile)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.kinds, kind)
	r.sets[kind] = b
	return nil
}

// Build builds the tools of p. It returns an error wrapping ErrUnknownKind for a kind
// nobody registered, ErrBadProfile for two tools of one name, and the Builder's error
// for a tool that cannot be built.
func (r *Registry) Build(p Profile) (*Set, error) {
	set := &Set{byName: map[string]Tool{}}
	for i, cfg := range p.Tools {
		kind := cfg.Kind
		if kind == "" {
			kind = KindBuiltin
		}
		r.mu.RLock()
		b, ok := r.kinds[kind]
		sb, isSet := r.sets[kind]
		r.mu.RUnlock()
		var built []Tool
		switch {
		case ok:
			t, err := b(cfg)
			if err != nil {
				return nil, fmt.Errorf("tools: build %s (%s): %w", cfg.Name, kind, err)
			}
			built = []Tool{configured(t, cfg)}
		case isSet:
			ts, err := sb(cfg)
			if err != nil {
				return nil, fmt.Errorf("tools: build %s (%s): %w", cfg.Name, kind, err)
			}
			built = ts
		default:
			return nil, fmt.Errorf("%w: %q (tool %s)", ErrUnknownKind, kind, cfg.Name)
		}
		for _, t := range built {
			name := t.Definition().Name
			if _, dup := set.byName[name]; dup || name == "" {
				return nil, fmt.Errorf("%w: two tools named %q", ErrBadProfile, name)
			}
			set.byName[name] = t
			set.list = append(set.list, t)
			if d := cfg.Approval.ExpiresAfter(); d > 0 {
				if set.expiry == nil {
					set.expiry = map[string]time.Duration{}
				}
				set.expiry[name] = d
			}
			if cfg.DefaultEffect != "" {
				if set.defaults == nil {
					set.defaults = map[string]defaultEffect{}
				}
				set.defaults[name] = defaultEffect{effect: cfg.DefaultEffect, entry: i}
			}
		}
	}
	return set, nil
}

// Set is the built tools of one profile, in profile order.
type Set struct {
	list     []Tool
	byName   map[string]Tool
	defaults map[string]defaultEffect
	expiry   map[string]time.Duration
}

// ApprovalExpiry is how long an approval request for the tool called name waits for a
// verdict (its entry's approval.expires_in); 0: until one comes.
func (s *Set) ApprovalExpiry(name string) time.Duration { return s.expiry[name] }

type defaultEffect struct {
	effect Effect
	entry  int // index of the profile's tool entry
}

// DefaultEffect is the default_effect of the profile entry that built the tool called
// name, as a Decision naming that entry ("tools[1].default_effect"); Effect "" if the
// entry sets none.
func (s *Set) DefaultEffect(name string) Decision {
	d, ok := s.defaults[name]
	if !ok {
		return Decision{}
	}
	return Decision{Effect: d.effect, Rule: fmt.Sprintf("tools[%d].default_effect", d.entry)}
}

// Lookup returns the tool called name.
func (s *Set) Lookup(name string) (Tool, bool) {
	t, ok := s.byName[name]
	return t, ok
}

// Definitions returns the definitions of the tools, in profile order.
func (s *Set) Definitions() []Definition {
	out := make([]Definition, 0, len(s.list))
	for _, t := range s.list {
		out = append(out, t.Definition())
	}
	return out
}

// configured applies a ToolConfig's overrides to t's definition. The name is always
// the configured one, so the profile decides what the model calls.
func configured(t Tool, cfg ToolConfig) Tool {
	def := t.Definition()
	def.Name = cfg.Name
	if cfg.Description != "" {
		def.Description = cfg.Description
	}
	if len(cfg.Schema) > 0 {
		def.Schema = cfg.Schema
	}
	if cfg.Concurrency != "" {
		def.Concurrency = cfg.Concurrency
	}
	if def.Concurrency == "" {
		def.Concurrency = Serial
	}
	if cfg.NeedsApproval != nil {
		def.NeedsApproval = *cfg.NeedsApproval
	}
	return withDefinition{Tool: t, def: def}
}

type withDefinition struct {
	Tool
	def Definition
}

func (w withDefinition) Definition() Definition { return w.def }
