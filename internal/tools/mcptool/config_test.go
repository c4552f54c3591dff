package mcptool_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/tools/mcptool"
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
	} {
		_, err := mcptool.ParseConfig(json.RawMessage(c.spec))
		var fe *mcptool.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, mcptool.ErrBadConfig) {
			t.Errorf("ParseConfig(%s) = %v, want a FieldError on %s", c.spec, err, c.field)
		}
	}
	if _, err := mcptool.ParseConfig(json.RawMessage(`{"command": ["server", "--flag"], "dir": "/srv"}`)); err != nil {
		t.Errorf("ParseConfig(command) = %v", err)
	}
}

// TestSetsRefusesCommand: where no command may run (Lambda), a command server is
// refused before anything is started.
func TestSetsRefusesCommand(t *testing.T) {
	build := mcptool.Sets(mcptool.Options{}, false)
	_, err := build(tools.ToolConfig{Name: "l", Kind: mcptool.Kind, Spec: json.RawMessage(`{"command": ["/nonexistent/server"]}`)})
	if !errors.Is(err, mcptool.ErrCommandRefused) {
		t.Errorf("Sets(no command)(command spec) = %v, want ErrCommandRefused", err)
	}
}
