// Package mcpspec is the spec of an MCP server in an agent profile (a tool entry of
// kind "mcp"): its parsing, its checks, and the headers it names. Package mcptool
// connects to the server it declares; this package links no MCP client, so the
// functions that check profiles but run no tool (message, http, schedule, webhook)
// do not carry one. The spec's fields are documented in package mcptool.
package mcpspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/terret/terret-ws/internal/tools"
)

// ErrBadConfig: a spec that does not parse or does not declare a valid server.
var ErrBadConfig = errors.New("mcpspec: invalid config")

// Kind is the "kind" of an MCP tool spec.
const Kind = "mcp"

// DefaultMaxResultBytes bounds a result when the config sets no bound: results go into
// the durable log, whose events are bounded.
const DefaultMaxResultBytes = 64 << 10

// Errors returned by Build, Connect, Tools and Call.
var (
	ErrConnect        = errors.New("mcptool: cannot connect to server")
	ErrCall           = errors.New("mcptool: call failed")
	ErrTool           = errors.New("mcptool: tool error")
	ErrResultTooLarge = errors.New("mcptool: result too large")
)

// Override changes the concurrency or approval of one tool.
type Override struct {
	Concurrency   tools.Concurrency `json:"concurrency,omitempty"`
	NeedsApproval *bool             `json:"needs_approval,omitempty"`
}

// Config declares one MCP server's tools.
type Config struct {
	Kind            string              `json:"kind,omitempty"`
	URL             string              `json:"url,omitempty"`
	Command         []string            `json:"command,omitempty"`
	Dir             string              `json:"dir,omitempty"`
	Prefix          string              `json:"prefix,omitempty"`
	Tools           []string            `json:"tools,omitempty"`
	Concurrency     tools.Concurrency   `json:"concurrency,omitempty"`
	NeedsApproval   bool                `json:"needs_approval"`
	Overrides       map[string]Override `json:"overrides,omitempty"`
	Headers         map[string]string   `json:"headers,omitempty"`
	HeadersEnv      map[string]string   `json:"headers_env,omitempty"`    // header → environment variable holding its value
	HeadersSecret   map[string]string   `json:"headers_secret,omitempty"` // header → Secrets Manager / SSM reference
	TimeoutMS       int                 `json:"timeout_ms,omitempty"`
	MaxResultBytes  int                 `json:"max_result_bytes,omitempty"`
	ProtocolVersion string              `json:"protocol_version,omitempty"`
}

// String leaves header values out, so the config can be printed.
func (c Config) String() string {
	return fmt.Sprintf("mcpspec.Config{URL:%q Command:%q Prefix:%q Tools:%q Concurrency:%q NeedsApproval:%t Headers:%s(values redacted)}",
		RedactURL(c.URL), c.Command, c.Prefix, c.Tools, c.Concurrency, c.NeedsApproval, c.describeHeaders())
}

// GoString is String.
func (c Config) GoString() string { return c.String() }

// ParseConfig parses a server spec. It returns an error wrapping ErrBadConfig if the
// JSON is malformed, has unknown fields, or does not declare a valid server.
func ParseConfig(spec json.RawMessage) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return Config{}, fieldErr(strings.Trim(name, `"`), "unknown key")
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return Config{}, fieldErr(te.Field, "wrong type: got JSON %s", te.Value)
		}
		return Config{}, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

var namePart = regexp.MustCompile(`^[A-Za-z0-9_-]*$`)

func validConcurrency(c tools.Concurrency) bool {
	return c == "" || c == tools.Serial || c == tools.Parallel
}

// FieldError is an invalid config field: Field is its JSON path inside the spec
// ("command", "overrides.fetch.concurrency"). It wraps ErrBadConfig.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string {
	return ErrBadConfig.Error() + ": " + e.Field + ": " + e.Message
}

// Unwrap returns ErrBadConfig.
func (e *FieldError) Unwrap() error { return ErrBadConfig }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

func (c Config) Validate() error {
	if c.Kind != "" && c.Kind != Kind {
		return fieldErr("kind", "%q is not %q", c.Kind, Kind)
	}
	switch {
	case c.URL != "" && len(c.Command) > 0:
		return fieldErr("command", "give url (streamable HTTP) or command (stdio), not both")
	case len(c.Command) > 0:
		if strings.TrimSpace(c.Command[0]) == "" {
			return fieldErr("command", "the program (first element) is empty")
		}
		if len(c.Headers)+len(c.HeadersEnv)+len(c.HeadersSecret) > 0 {
			return fieldErr("headers", "headers apply to url servers only")
		}
	case c.URL == "":
		return fieldErr("url", "required: url (streamable HTTP) or command (stdio)")
	default:
		u, err := url.Parse(c.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fieldErr("url", "must be an absolute http(s) URL")
		}
		if c.Dir != "" {
			return fieldErr("dir", "dir applies to command servers only")
		}
		if err := c.validateHeaders(); err != nil {
			return err
		}
	}
	switch {
	case !namePart.MatchString(c.Prefix):
		return fieldErr("prefix", "%q must be letters, digits, _ or -", c.Prefix)
	case !validConcurrency(c.Concurrency):
		return fieldErr("concurrency", "%q is not serial or parallel", c.Concurrency)
	case c.TimeoutMS < 0:
		return fieldErr("timeout_ms", "must not be negative")
	case c.MaxResultBytes < 0:
		return fieldErr("max_result_bytes", "must not be negative")
	}
	for name, o := range c.Overrides {
		if !validConcurrency(o.Concurrency) {
			return fieldErr("overrides."+name+".concurrency", "%q is not serial or parallel", o.Concurrency)
		}
	}
	return nil
}

// Label names the server in errors: its URL without secrets, or its program.
func (c Config) Label() string {
	if len(c.Command) > 0 {
		return "command " + c.Command[0]
	}
	return RedactURL(c.URL)
}

// RedactURL drops the query and password of a URL, which may carry secrets.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "[invalid url]"
	}
	if u.RawQuery != "" {
		u.RawQuery = "redacted"
	}
	return u.Redacted()
}
