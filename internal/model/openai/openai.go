// Package openai is a model provider for OpenAI-compatible chat-completions servers
// (OpenAI, vLLM, Ollama, LiteLLM, …): one model call is one streaming
// POST {base_url}/chat/completions whose server-sent events are turned into text
// deltas, tool calls, usage and a finish reason. It uses net/http and encoding/json only.
//
// The provider is configured by the agent profile; the model name is the part of an
// "openai/MODEL" spec after the provider:
//
//	{"base_url": "https://api.openai.com/v1", "api_key": "sk-…", "max_tokens": 4096, "temperature": 0.2}
//	{"base_url": "http://localhost:11434/v1"}          (Ollama, no key)
//
// api_key is optional: without it no Authorization header is sent. The key is sent
// only as "Authorization: Bearer KEY"; it is never logged, and Config's String, GoString
// and LogValue redact it.
//
// Wiring:
//
//	cfg, err := openai.ParseConfig(raw)
//	p, err := openai.NewProvider(nil, cfg)      // nil: a default *http.Client
//	m, err := p.Model("gpt-4o-mini")
//	resp, err := m.Stream(ctx, req, onDelta)
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/secret"
)

// Errors returned by the provider's models. Every error a model returns wraps exactly
// one of them (or the context's error when the call was cancelled); the message names
// the model and, for HTTP errors, the status and the server's error text with the API
// key and anything that looks like a credential removed.
var (
	ErrThrottled      = errors.New("openai: throttled")
	ErrAuth           = errors.New("openai: unauthorized")
	ErrInvalidRequest = errors.New("openai: invalid request")
	ErrUnavailable    = errors.New("openai: model unavailable")
	ErrBadResponse    = errors.New("openai: malformed response")
)

// Doer sends HTTP requests; *http.Client is one.
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

var _ Doer = (*http.Client)(nil)

// Config configures a provider.
type Config struct {
	// BaseURL is the API root that "/chat/completions" is appended to.
	BaseURL     string   `json:"base_url"`
	APIKey      string   `json:"api_key,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
}

// String redacts the API key, so the config can be printed.
func (c Config) String() string {
	return fmt.Sprintf("openai.Config{BaseURL:%q APIKey:%s MaxTokens:%d}", c.BaseURL, redacted(c.APIKey), c.MaxTokens)
}

// GoString redacts the API key, like String.
func (c Config) GoString() string { return c.String() }

// LogValue redacts the API key, so the config can be logged.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("base_url", c.BaseURL),
		slog.String("api_key", redacted(c.APIKey)),
		slog.Int("max_tokens", c.MaxTokens),
	)
}

func redacted(key string) string {
	if key == "" {
		return "none"
	}
	return "[redacted]"
}

// ParseConfig parses and validates the provider's JSON config. It returns an error
// wrapping ErrInvalidRequest if the JSON is malformed, carries unknown fields, or
// base_url is not an absolute http(s) URL.
func ParseConfig(raw json.RawMessage) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		// The decoder's message never quotes field values, so the key cannot leak.
		return Config{}, fmt.Errorf("%w: config: %v", ErrInvalidRequest, err)
	}
	if err := c.validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func (c Config) validate() error {
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: config: base_url must be an absolute http(s) URL", ErrInvalidRequest)
	}
	if c.MaxTokens < 0 {
		return fmt.Errorf("%w: config: max_tokens must not be negative", ErrInvalidRequest)
	}
	return nil
}

// Provider builds models served by one OpenAI-compatible endpoint; it implements
// model.Provider.
type Provider struct {
	http     Doer
	cfg      Config
	endpoint string
	secrets  *secret.Scrubber // the key in every form a server may echo it
}

var _ model.Provider = (*Provider)(nil)

// NewProvider returns a provider for cfg's endpoint that sends requests with client
// (a default *http.Client if nil; streaming calls are bounded by their context, so the
// client should have no overall timeout). It returns an error wrapping
// ErrInvalidRequest if cfg is invalid.
func NewProvider(client Doer, cfg Config) (*Provider, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if client == nil {
		client = &http.Client{}
	}
	return &Provider{http: client, cfg: cfg, endpoint: strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions",
		secrets: secret.NewScrubber(cfg.APIKey)}, nil
}

// Model returns the named model. It returns an error wrapping model.ErrBadSpec if name
// is empty.
func (p *Provider) Model(name string) (model.Model, error) {
	if strings.TrimSpace(name) == "" {
		return nil, fmt.Errorf("%w: openai: empty model name", model.ErrBadSpec)
	}
	return &Model{p: p, name: name}, nil
}

// Model is one model of a provider; it implements model.Model and is safe for
// concurrent use.
type Model struct {
	p    *Provider
	name string
}

var _ model.Model = (*Model)(nil)

// maxErrorBody bounds how much of an HTTP error body is read.
const maxErrorBody = 16 << 10

// Stream sends req as one streaming chat completion and reads the event stream to its
// end ("data: [DONE]", or the body's end after a finish_reason): content deltas go to
// onDelta as they arrive, tool-call fragments are assembled by their index, the usage
// chunk becomes the usage, and the finish_reason becomes the stop reason in the
// runtime's terms ("stop" → model.StopEndTurn, "tool_calls" → model.StopToolUse,
// "content_filter" → model.StopRefusal, "length" → "max_tokens", others as sent). It returns an error wrapping ErrThrottled (HTTP 429),
// ErrAuth (401, 403), ErrInvalidRequest (other 4xx, or a request that cannot be
// encoded; a context-length refusal also wraps model.ErrContextLength), ErrUnavailable (5xx, transport failure, an error event in the stream) or
// ErrBadResponse (a chunk that is not JSON, a stream cut before its finish_reason, tool
// arguments that are not a JSON object); an error from onDelta ends the call with that
// error.
func (m *Model) Stream(ctx context.Context, req model.Request, onDelta func(model.Delta) error) (model.Response, error) {
	body, err := m.body(req)
	if err != nil {
		return model.Response{}, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, m.p.endpoint, bytes.NewReader(body))
	if err != nil {
		return model.Response{}, fmt.Errorf("%w: model %s: %v", ErrInvalidRequest, m.name, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	if m.p.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+m.p.cfg.APIKey)
	}
	resp, err := m.p.http.Do(hreq)
	if err != nil {
		return model.Response{}, m.transportError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return model.Response{}, m.statusError(resp)
	}
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
		// Some servers answer a streaming request with a plain JSON error.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if msg := errorText(b); msg != "" {
			return model.Response{}, fmt.Errorf("%w: model %s: %s", ErrUnavailable, m.name, m.scrub(msg))
		}
		return model.Response{}, fmt.Errorf("%w: model %s: expected an event stream, got %s", ErrBadResponse, m.name, ct)
	}

	var a assembler
	err = readEvents(resp.Body, func(data []byte) (bool, error) {
		if string(bytes.TrimSpace(data)) == "[DONE]" {
			return true, nil
		}
		return false, a.add(data, onDelta)
	})
	if err != nil {
		var od onDeltaError
		var se streamError
		var bad badResponse
		switch {
		case errors.As(err, &od):
			return model.Response{}, od.err
		case ctx.Err() != nil:
			return model.Response{}, fmt.Errorf("openai: model %s: %w", m.name, ctx.Err())
		case errors.As(err, &se):
			return model.Response{}, fmt.Errorf("%w: model %s: %s", ErrUnavailable, m.name, m.scrub(se.msg))
		case errors.As(err, &bad):
			return model.Response{}, fmt.Errorf("%w: model %s: %s", ErrBadResponse, m.name, m.scrub(bad.msg))
		case errors.Is(err, errEventTooLarge):
			return model.Response{}, fmt.Errorf("%w: model %s: %v", ErrBadResponse, m.name, err)
		default:
			return model.Response{}, m.transportError(ctx, err)
		}
	}
	out, err := a.response()
	if err != nil {
		return model.Response{}, fmt.Errorf("%w: model %s: %s", ErrBadResponse, m.name, m.scrub(err.Error()))
	}
	return out, nil
}

func (m *Model) transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("openai: model %s: %w", m.name, ctx.Err())
	}
	return fmt.Errorf("%w: model %s: %s", ErrUnavailable, m.name, m.scrub(err.Error()))
}

func (m *Model) statusError(resp *http.Response) error {
	// Only the message of a recognised error shape is kept, never the body itself:
	// a body is the server's to fill, and may echo the request, key included.
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	msg := errorText(b)
	var sentinel error
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		sentinel = ErrThrottled
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		sentinel = ErrAuth
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		sentinel = ErrInvalidRequest
	default:
		sentinel = ErrUnavailable
	}
	if sentinel == ErrInvalidRequest && isContextLength(b, msg) {
		// Also a context-length refusal: the runtime compacts and retries once.
		return fmt.Errorf("%w: %w: model %s: HTTP %d: %s", sentinel, model.ErrContextLength, m.name, resp.StatusCode, m.scrub(msg))
	}
	if msg == "" {
		return fmt.Errorf("%w: model %s: HTTP %d", sentinel, m.name, resp.StatusCode)
	}
	return fmt.Errorf("%w: model %s: HTTP %d: %s", sentinel, m.name, resp.StatusCode, m.scrub(msg))
}

// isContextLength recognises a 4xx body refusing the request as too long for the
// model's window: OpenAI's error code "context_length_exceeded", or the message
// servers send with it or instead ("maximum context length", as OpenAI and vLLM word
// it).
func isContextLength(body []byte, msg string) bool {
	var env struct {
		Error struct {
			Code any `json:"code"`
		} `json:"error"`
		Code any `json:"code"`
	}
	if json.Unmarshal(body, &env) == nil {
		for _, c := range []any{env.Error.Code, env.Code} {
			if c == "context_length_exceeded" {
				return true
			}
		}
	}
	return strings.Contains(strings.ToLower(msg), "maximum context length")
}

// errorText extracts the message of an error body in the shapes servers use:
// {"error":{"message":…}}, {"error":"…"}, {"message":…} (vLLM).
func errorText(b []byte) string {
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(b, &env) != nil {
		return ""
	}
	if len(env.Error) > 0 {
		var obj struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(env.Error, &obj) == nil && obj.Message != "" {
			return obj.Message
		}
		var s string
		if json.Unmarshal(env.Error, &s) == nil && s != "" {
			return s
		}
	}
	return env.Message
}

var secretPattern = regexp.MustCompile(`(?i)(bearer\s+\S+|\bsk-[A-Za-z0-9_\-*.]{6,}|api[_-]?key\s*[=:]\s*\S+)`)

// maxErrorText bounds provider error text: it is logged durably (turn/end's reason)
// and printed on the console.
const maxErrorText = 256

// scrub removes the API key (as written, base64, hex, split by white space: see
// secret.Scrubber) and key-looking material from server text and bounds it.
func (m *Model) scrub(s string) string {
	s = m.p.secrets.Scrub(s)
	s = secretPattern.ReplaceAllString(s, secret.Redacted)
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxErrorText {
		s = s[:maxErrorText] + "…"
	}
	return s
}
