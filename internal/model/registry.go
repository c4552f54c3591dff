package model

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// SpecScripted is the spec of the built-in scripted model.
const SpecScripted = "scripted"

// maxSpecLen bounds a spec: it is stored on the agent's state item and echoed in errors.
const maxSpecLen = 256

// providerChars are a provider name's characters; ValidProviderName bounds its length
// apart: a bounded repetition ({0,63}) would compile into 64 copies of the class, at
// every cold start of every function that links the package.
var providerChars = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// MaxProviderName bounds a provider name.
const MaxProviderName = 64

// ValidProviderName reports whether name can name a provider: 1–64 of a-z, 0-9, '_'
// and '-', starting with a letter or digit. ("scripted" is one, but it is taken.)
func ValidProviderName(name string) bool {
	return len(name) <= MaxProviderName && providerChars.MatchString(name)
}

// ParseSpec splits a model spec into provider and model name. "scripted" is the
// scripted model (provider "scripted", empty name); anything else must be
// "provider/model" with a lower-case provider name and a non-empty model name without
// spaces or control characters (the name may itself contain "/" or ":"); the
// scripted model takes no name ("scripted/x" is invalid). It returns
// an error wrapping ErrBadSpec otherwise.
func ParseSpec(spec string) (provider, name string, err error) {
	if spec == SpecScripted {
		return SpecScripted, "", nil
	}
	if len(spec) > maxSpecLen {
		return "", "", fmt.Errorf("%w: longer than %d bytes", ErrBadSpec, maxSpecLen)
	}
	provider, name, ok := strings.Cut(spec, "/")
	if !ok || !ValidProviderName(provider) || name == "" || provider == SpecScripted {
		return "", "", fmt.Errorf("%w: %q is not \"scripted\" or \"provider/model\"", ErrBadSpec, spec)
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f {
			return "", "", fmt.Errorf("%w: %q: model name has a space or control character", ErrBadSpec, spec)
		}
	}
	return provider, name, nil
}

// Registry resolves model specs to models through registered providers. The scripted
// model is always there. It is safe for concurrent use.
type Registry struct {
	mu        sync.RWMutex
	providers map[string]Provider
	scripted  Model
}

// NewRegistry returns a registry holding only the scripted model.
func NewRegistry() *Registry {
	return &Registry{providers: map[string]Provider{}, scripted: NewScripted()}
}

// Register makes provider p answer the specs "name/…". A later registration of the
// same name replaces the earlier one. It returns an error wrapping ErrBadSpec if name
// is not a valid provider name or is "scripted".
func (r *Registry) Register(name string, p Provider) error {
	if !ValidProviderName(name) || name == SpecScripted {
		return fmt.Errorf("%w: provider name %q", ErrBadSpec, name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.providers[name] = p
	return nil
}

// Names returns the provider names r resolves, with "scripted", sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	out := []string{SpecScripted}
	for name := range r.providers {
		out = append(out, name)
	}
	r.mu.RUnlock()
	sort.Strings(out)
	return out
}

// Resolve returns the model named by spec. Every error wraps ErrBadSpec; an unknown
// provider also wraps ErrUnknownProvider, and a provider refusing the model name adds
// the provider's error.
func (r *Registry) Resolve(spec string) (Model, error) {
	provider, name, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	if provider == SpecScripted {
		return r.scripted, nil
	}
	r.mu.RLock()
	p, ok := r.providers[provider]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %w: %q", ErrBadSpec, ErrUnknownProvider, provider)
	}
	m, err := p.Model(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadSpec, spec, err)
	}
	return m, nil
}
