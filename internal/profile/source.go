package profile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/tools"
)

// Source gives the runtime its profiles (it implements agent.Profiles): the default
// profile, either fixed or read from a file that is read again whenever it changes,
// and the model registry of each profile, built once per distinct set of providers.
// It is safe for concurrent use.
type Source struct {
	env    Env
	file   string
	logger *slog.Logger

	mu      sync.Mutex
	current tools.Profile
	raw     []byte // the file's content current was read from, or last rejected
	models  map[string]*model.Registry
}

// checkTimeout bounds the secret fetches of one check.
const checkTimeout = 30 * time.Second

// NewSource returns a Source serving def as the default profile. It returns the
// *tools.ProfileError of Check if def does not pass (a deployment with a broken
// default profile does not start).
func NewSource(ctx context.Context, def tools.Profile, env Env, logger *slog.Logger) (*Source, error) {
	if err := Check(ctx, def, env); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Source{env: env, current: def, logger: logger, models: map[string]*model.Registry{}}, nil
}

// NewFileSource returns a Source whose default profile is the file at path, read now
// and again whenever Default finds its content changed. A change that does not decode
// or pass Check is logged at error level with every problem, and the last good
// profile stays in use. It returns an error naming path if the file cannot be read or
// its first content does not pass.
func NewFileSource(ctx context.Context, path string, env Env, logger *slog.Logger) (*Source, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	p, err := tools.DecodeProfile(raw)
	if err == nil {
		err = Check(ctx, p, env)
	}
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", path, err)
	}
	s, err := NewSource(ctx, p, env, logger)
	if err != nil {
		return nil, err
	}
	s.file, s.raw = path, raw
	return s, nil
}

// Default returns the default profile. For a file source it reads the file (a small
// read per call, made once per model step) and switches to its content if that
// changed and passes.
func (s *Source) Default() tools.Profile {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file == "" {
		return s.current
	}
	raw, err := os.ReadFile(s.file)
	if err != nil {
		if s.raw != nil {
			s.logger.Error("profile file unreadable: keeping the last good profile", "file", s.file, "error", err.Error())
			s.raw = nil
		}
		return s.current
	}
	if bytes.Equal(raw, s.raw) {
		return s.current
	}
	s.raw = raw
	p, err := tools.DecodeProfile(raw)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		err = Check(ctx, p, s.env)
		cancel()
	}
	if err != nil {
		problems := err.Error()
		if pe := (*tools.ProfileError)(nil); errors.As(err, &pe) {
			problems = pe.Detail() // "providers.acme.base_url: …", not "tools: invalid agent profile: …"
		}
		s.logger.Error("profile file rejected: keeping the last good profile", "file", s.file, "problems", problems)
		return s.current
	}
	s.current = p
	s.logger.Info("profile file reloaded", "file", s.file)
	return s.current
}

// Check checks p where this source runs (see Check).
func (s *Source) Check(ctx context.Context, p tools.Profile) error { return Check(ctx, p, s.env) }

// Models returns the registry of p's providers, built on first use of that set of
// providers and kept (keys are resolved once per process).
func (s *Source) Models(p tools.Profile) (*model.Registry, error) {
	key, err := json.Marshal(p.Providers)
	if err != nil {
		return nil, fmt.Errorf("profile: providers: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if reg, ok := s.models[string(key)]; ok {
		return reg, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	reg, err := Models(ctx, p, s.env)
	if err != nil {
		return nil, err
	}
	if len(s.models) > 256 {
		clear(s.models)
	}
	s.models[string(key)] = reg
	return reg, nil
}
