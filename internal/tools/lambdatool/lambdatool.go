// Package lambdatool makes a Lambda function a tool: a call invokes the function
// synchronously (RequestResponse) with the call's args as the payload, and the
// function's JSON output is the result.
//
// A tool is declared in the agent profile:
//
//	{
//	  "kind": "lambda",
//	  "name": "lookup",
//	  "description": "Looks up an item by id.",
//	  "function_arn": "arn:aws:lambda:us-east-1:123456789012:function:lookup",
//	  "schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
//	  "concurrency": "parallel",
//	  "needs_approval": false,
//	  "timeout_ms": 30000,
//	  "max_result_bytes": 65536
//	}
//
// kind, schema, concurrency (default "serial"), needs_approval (default false),
// timeout_ms (default: the caller's context only) and max_result_bytes (default 64 KiB)
// are optional. function_arn may carry a version or alias qualifier.
//
// Wiring, either from that flat spec or as a kind of the profile's tool registry
// (see Builder for the ToolConfig shape):
//
//	ts, err := lambdatool.Build(spec, invoke.NewFromConfig(awsCfg))
//	err := registry.RegisterKind(lambdatool.Kind, lambdatool.Builder(invoke.NewFromConfig(awsCfg)))
package lambdatool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/terret/terret-ws/internal/invoke"
	"github.com/terret/terret-ws/internal/tools"
)

// Kind is the "kind" of a lambda tool spec.
const Kind = "lambda"

// DefaultMaxResultBytes bounds a result when the config sets no bound: results go into
// the durable log, whose events are bounded.
const DefaultMaxResultBytes = 64 << 10

// Errors returned by Build, New and Call.
var (
	ErrBadConfig      = errors.New("lambdatool: invalid config")
	ErrFunction       = errors.New("lambdatool: function error")
	ErrInvoke         = errors.New("lambdatool: invoke failed")
	ErrBadOutput      = errors.New("lambdatool: function output is not JSON")
	ErrResultTooLarge = errors.New("lambdatool: result too large")
)

// API is the Lambda Invoke API a tool calls.
type API interface {
	Invoke(ctx context.Context, in *invoke.Input) (*invoke.Output, error)
}

var _ API = (*invoke.Client)(nil)

// Config declares one Lambda tool.
type Config struct {
	Kind           string            `json:"kind,omitempty"`
	Name           string            `json:"name"`
	Description    string            `json:"description"`
	FunctionARN    string            `json:"function_arn"`
	Schema         json.RawMessage   `json:"schema,omitempty"`
	Concurrency    tools.Concurrency `json:"concurrency,omitempty"`
	NeedsApproval  bool              `json:"needs_approval"`
	TimeoutMS      int               `json:"timeout_ms,omitempty"`
	MaxResultBytes int               `json:"max_result_bytes,omitempty"`
}

// toolChars and maxToolName are what model providers accept as a tool name: 1–64 of
// these (the length checked apart: a bounded repetition would compile into 64 copies
// of the class at every cold start).
var toolChars = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

const maxToolName = 64

// ParseConfig parses a tool spec. It returns an error wrapping ErrBadConfig if the JSON
// is malformed, has unknown fields, or does not declare a valid tool.
func ParseConfig(spec json.RawMessage) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	if err := c.validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func (c Config) validate() error {
	switch {
	case c.Kind != "" && c.Kind != Kind:
		return fmt.Errorf("%w: kind %q is not %q", ErrBadConfig, c.Kind, Kind)
	case len(c.Name) > maxToolName || !toolChars.MatchString(c.Name):
		return fmt.Errorf("%w: name %q must be 1-64 letters, digits, _ or -", ErrBadConfig, c.Name)
	case strings.TrimSpace(c.FunctionARN) == "":
		return fmt.Errorf("%w: tool %s: function_arn is required", ErrBadConfig, c.Name)
	case c.Concurrency != "" && c.Concurrency != tools.Serial && c.Concurrency != tools.Parallel:
		return fmt.Errorf("%w: tool %s: concurrency %q is not serial or parallel", ErrBadConfig, c.Name, c.Concurrency)
	case c.TimeoutMS < 0 || c.MaxResultBytes < 0:
		return fmt.Errorf("%w: tool %s: timeout_ms and max_result_bytes must not be negative", ErrBadConfig, c.Name)
	}
	if len(bytes.TrimSpace(c.Schema)) > 0 {
		var obj map[string]any
		if err := json.Unmarshal(c.Schema, &obj); err != nil || obj == nil {
			return fmt.Errorf("%w: tool %s: schema must be a JSON object", ErrBadConfig, c.Name)
		}
	}
	return nil
}

// Build parses spec and returns the one tool it declares, invoking through api. It
// returns an error wrapping ErrBadConfig if the spec is invalid.
func Build(spec json.RawMessage, api API) ([]tools.Tool, error) {
	c, err := ParseConfig(spec)
	if err != nil {
		return nil, err
	}
	t, err := New(c, api)
	if err != nil {
		return nil, err
	}
	return []tools.Tool{t}, nil
}

// Tool is a Lambda function as a tool; it implements tools.Tool and is safe for
// concurrent use.
type Tool struct {
	api API
	cfg Config
	def tools.Definition
}

var _ tools.Tool = (*Tool)(nil)

// New returns the tool cfg declares, invoking through api. It returns an error wrapping
// ErrBadConfig if cfg is invalid or api is nil.
func New(cfg Config, api API) (*Tool, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if api == nil {
		return nil, fmt.Errorf("%w: tool %s: no Lambda client", ErrBadConfig, cfg.Name)
	}
	if cfg.MaxResultBytes == 0 {
		cfg.MaxResultBytes = DefaultMaxResultBytes
	}
	def := tools.Definition{
		Name:          cfg.Name,
		Description:   cfg.Description,
		Schema:        cfg.Schema,
		Concurrency:   cfg.Concurrency,
		NeedsApproval: cfg.NeedsApproval,
	}
	if def.Concurrency == "" {
		def.Concurrency = tools.Serial
	}
	return &Tool{api: api, cfg: cfg, def: def}, nil
}

// Definition returns the tool's definition as configured.
func (t *Tool) Definition() tools.Definition { return t.def }

// Call invokes the function with args (a JSON object; empty means {}) and returns its
// output. It returns an error wrapping tools.ErrBadArgs if args is not a JSON object;
// ErrFunction, carrying the function's errorMessage, if the function failed;
// ErrBadOutput if the output is not JSON; ErrResultTooLarge if it exceeds
// max_result_bytes; ErrInvoke if Lambda refused or failed the invocation (the context's
// error is wrapped too when it ended the call).
func (t *Tool) Call(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	payload := bytes.TrimSpace(args)
	if len(payload) == 0 {
		payload = []byte(`{}`)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%w: %s: args must be a JSON object", tools.ErrBadArgs, t.cfg.Name)
	}
	if t.cfg.TimeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t.cfg.TimeoutMS)*time.Millisecond)
		defer cancel()
	}
	out, err := t.api.Invoke(ctx, &invoke.Input{
		FunctionName:   t.cfg.FunctionARN,
		InvocationType: invoke.RequestResponse,
		Payload:        payload,
	})
	if err != nil {
		return nil, t.invokeError(ctx, err)
	}
	if out.FunctionError != "" {
		return nil, t.functionError(out.FunctionError, out.Payload)
	}
	result := bytes.TrimSpace(out.Payload)
	if len(result) == 0 {
		return json.RawMessage(`null`), nil
	}
	if !json.Valid(result) {
		return nil, fmt.Errorf("%w: %s", ErrBadOutput, t.cfg.Name)
	}
	if len(result) > t.cfg.MaxResultBytes {
		return nil, fmt.Errorf("%w: %s: %d bytes, limit %d", ErrResultTooLarge, t.cfg.Name, len(result), t.cfg.MaxResultBytes)
	}
	return json.RawMessage(result), nil
}

// maxErrorText bounds error text: it is logged durably and shown to the model.
const maxErrorText = 2048

func (t *Tool) functionError(kind string, payload []byte) error {
	var fe struct {
		ErrorMessage string `json:"errorMessage"`
		ErrorType    string `json:"errorType"`
	}
	msg := ""
	if json.Unmarshal(payload, &fe) == nil {
		msg = fe.ErrorMessage
	}
	if msg == "" {
		msg = "function failed (" + kind + ")"
	}
	msg = bound(msg)
	if fe.ErrorType != "" {
		return fmt.Errorf("%w: %s: %s: %s", ErrFunction, t.cfg.Name, bound(fe.ErrorType), msg)
	}
	return fmt.Errorf("%w: %s: %s", ErrFunction, t.cfg.Name, msg)
}

// invokeError translates an invoke error. Of Lambda's refusal only the error type and
// message survive.
func (t *Tool) invokeError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvoke, t.cfg.Name, ctxErr)
	}
	var ie *invoke.Error
	if errors.As(err, &ie) {
		return fmt.Errorf("%w: %s: %s: %s", ErrInvoke, t.cfg.Name, ie.Code, scrub(ie.Message))
	}
	return fmt.Errorf("%w: %s: %s", ErrInvoke, t.cfg.Name, scrub(strings.TrimPrefix(err.Error(), "invoke: ")))
}

var (
	// urlPattern matches a URL in error text: a transport error quotes the request's
	// URL, whose path may carry a secret (terret dev's internal endpoint puts its
	// per-instance secret there) and which then reaches tool/result in the log. Package
	// invoke withholds the path already; this is the second guard.
	urlPattern        = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)
	keyIDPattern      = regexp.MustCompile(`\b(AKIA|ASIA)[A-Z0-9]{12,}\b`)
	credentialPattern = regexp.MustCompile(`(?i)(credential|signature|x-amz-security-token)\s*[=:]\s*[^\s,'"]+`)
)

// scrub removes credential-looking material from service error text and bounds it:
// every URL keeps its scheme and host only.
func scrub(s string) string {
	s = urlPattern.ReplaceAllStringFunc(s, func(raw string) string {
		if u, err := url.Parse(raw); err == nil && u.Host != "" {
			return u.Scheme + "://" + u.Host + "/[redacted]"
		}
		return "[redacted URL]"
	})
	s = credentialPattern.ReplaceAllString(s, "$1=[redacted]")
	return bound(keyIDPattern.ReplaceAllString(s, "[redacted]"))
}

func bound(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > maxErrorText {
		s = s[:maxErrorText] + "…"
	}
	return s
}
