package mcpspec_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/tools/mcpspec"
)

func TestConfigFieldErrors(t *testing.T) {
	for _, c := range []struct{ spec, field string }{
		{`{}`, "url"},
		{`{"url": "ftp://x"}`, "url"},
		{`{"url": "http://x/mcp", "command": ["s"]}`, "command"},
		{`{"command": [""]}`, "command"},
		{`{"command": ["s"], "headers": {"A": "b"}}`, "headers"},
		{`{"url": "http://x/mcp", "dir": "/tmp"}`, "dir"},
		{`{"url": "http://x/mcp", "cmd": ["s"]}`, "cmd"},
		{`{"url": "http://x/mcp", "timeout_ms": "soon"}`, "timeout_ms"},
		{`{"url": "http://x/mcp", "overrides": {"a": {"concurrency": "x"}}}`, "overrides.a.concurrency"},
		{`{"url": "http://x/mcp", "headers": {"Authorization": "Bearer sk-x"}}`, "headers.Authorization"},
		{`{"url": "http://x/mcp", "headers": {"X-Api-Key": "k"}}`, "headers.X-Api-Key"},
		{`{"url": "http://x/mcp", "headers": {"Cookie": "s=1"}}`, "headers.Cookie"},
		{`{"command": ["s"], "headers_env": {"Authorization": "TOKEN"}}`, "headers"},
		{`{"url": "http://x/mcp", "headers_env": {"Authorization": "not a name"}}`, "headers_env.Authorization"},
		{`{"url": "http://x/mcp", "headers_secret": {"Authorization": " "}}`, "headers_secret.Authorization"},
		{`{"url": "http://x/mcp", "headers_env": {"authorization": "A"}, "headers_secret": {"Authorization": "s"}}`, "headers_secret.Authorization"},
	} {
		_, err := mcpspec.ParseConfig(json.RawMessage(c.spec))
		var fe *mcpspec.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, mcpspec.ErrBadConfig) {
			t.Errorf("ParseConfig(%s) = %v, want a FieldError on %s", c.spec, err, c.field)
		}
	}
	if _, err := mcpspec.ParseConfig(json.RawMessage(`{"command": ["server", "--flag"], "dir": "/srv"}`)); err != nil {
		t.Errorf("ParseConfig(command) = %v", err)
	}
}

type secretMap map[string]string

func (m secretMap) Get(_ context.Context, ref string) (string, error) {
	if v, ok := m[ref]; ok {
		return v, nil
	}
	return "", fmt.Errorf("secret: not found: %s", ref)
}

// TestCheckHeaders: header references resolve through the environment and the secret
// store; an unset variable, a missing secret or no store is a FieldError naming the
// reference, never a value. Literal non-credential headers are kept.
func TestCheckHeaders(t *testing.T) {
	cfg, err := mcpspec.ParseConfig(json.RawMessage(`{"url": "http://x/mcp", "headers": {"X-Tenant": "acme"},
		"headers_env": {"Authorization": "MCP_TOKEN"}, "headers_secret": {"X-Extra-Token": "acme/mcp"}}`))
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(n string) (string, bool) { return "Bearer v", n == "MCP_TOKEN" }
	for _, c := range []struct {
		name  string
		o     mcpspec.Lookup
		field string // "" for no error
	}{
		{"resolved", mcpspec.Lookup{LookupEnv: lookup, Secrets: secretMap{"acme/mcp": "t0k"}}, ""},
		{"no environment", mcpspec.Lookup{Secrets: secretMap{"acme/mcp": "t0k"}}, "headers_env.Authorization"},
		{"variable unset", mcpspec.Lookup{LookupEnv: func(string) (string, bool) { return "", false }, Secrets: secretMap{}}, "headers_env.Authorization"},
		{"no store", mcpspec.Lookup{LookupEnv: lookup}, "headers_secret.X-Extra-Token"},
		{"secret missing", mcpspec.Lookup{LookupEnv: lookup, Secrets: secretMap{}}, "headers_secret.X-Extra-Token"},
	} {
		err := mcpspec.CheckHeaders(context.Background(), cfg, c.o)
		var fe *mcpspec.FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%s: %v, want a FieldError on %s", c.name, err, c.field)
		case err != nil && (strings.Contains(err.Error(), "Bearer v") || strings.Contains(err.Error(), "t0k")):
			t.Errorf("%s: error %v carries a value", c.name, err)
		}
	}
}
