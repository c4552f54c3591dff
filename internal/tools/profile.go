package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
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

// Profile is what an agent runs with: its system prompt and its tools. A deployment
// has one default profile (AGENT_PROFILE); an agent may carry an override, merged
// over it by Merge. Providers holds provider settings by provider name, opaque here:
// the wiring hands each to its provider (for example bedrock.ParseConfig).
//
//	{"system": "You are …",
//	 "tools": [{"name": "echo"},
//	           {"name": "weather", "kind": "lambda", "description": "…", "schema": {…},
//	            "concurrency": "parallel", "needs_approval": false, "spec": {…}}],
//	 "providers": {"bedrock": {"max_tokens": 4096}}}
type Profile struct {
	System    string                     `json:"system,omitempty"`
	Tools     []ToolConfig               `json:"tools"` // nil in an override: keep the default's
	Providers map[string]json.RawMessage `json:"providers,omitempty"`
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
// error wrapping ErrBadProfile if the JSON does not decode or a tool has no name.
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

// DecodeProfile decodes a profile's JSON, rejecting unknown fields. It returns an
// error wrapping ErrBadProfile if the JSON does not decode or a tool has no name.
func DecodeProfile(raw []byte) (Profile, error) {
	var p Profile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("%w: %v", ErrBadProfile, err)
	}
	for i, t := range p.Tools {
		if t.Name == "" {
			return Profile{}, fmt.Errorf("%w: tool %d has no name", ErrBadProfile, i)
		}
		if t.Concurrency != "" && t.Concurrency != Parallel && t.Concurrency != Serial {
			return Profile{}, fmt.Errorf("%w: tool %s: concurrency %q", ErrBadProfile, t.Name, t.Concurrency)
		}
	}
	return p, nil
}

// Merge returns p with over laid on top: over's System if not empty, over's Tools if
// not nil (the whole list is replaced, so `"tools": []` removes every tool), and
// over's Providers entries replacing p's of the same name.
func (p Profile) Merge(over Profile) Profile {
	out := p
	if over.System != "" {
		out.System = over.System
	}
	if over.Tools != nil {
		out.Tools = over.Tools
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
	mu    sync.RWMutex
	kinds map[string]Builder
	sets  map[string]SetBuilder
}

// NewRegistry returns a registry knowing only KindBuiltin.
func NewRegistry() *Registry {
	demo := map[string]Tool{}
	for _, t := range Demo() {
		demo[t.Definition().Name] = t
	}
	return &Registry{sets: map[string]SetBuilder{}, kinds: map[string]Builder{
		KindBuiltin: func(cfg ToolConfig) (Tool, error) {
			t, ok := demo[cfg.Name]
			if !ok {
				return nil, fmt.Errorf("%w: no builtin tool %q", ErrUnknownTool, cfg.Name)
			}
			return t, nil
		},
	}}
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
	for _, cfg := range p.Tools {
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
		}
	}
	return set, nil
}

// Set is the built tools of one profile, in profile order.
type Set struct {
	list   []Tool
	byName map[string]Tool
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
