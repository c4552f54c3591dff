package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/tools/mcpspec"
)

// DefaultBuildTimeout bounds connecting and listing in a Builder when the spec sets no
// timeout_ms: a registry builds tools without a context.
const DefaultBuildTimeout = 30 * time.Second

// toolSpec is the spec of one MCP tool in a profile: the server settings of Config
// plus the server's name for the tool.
type toolSpec struct {
	Config
	Tool string `json:"tool,omitempty"`
}

// Builder returns the tools.Builder of the "mcp" kind for a profile's tool registry,
// where each ToolConfig is one tool of a server:
//
//	{"name": "search", "kind": "mcp", "concurrency": "parallel",
//	 "spec": {"url": "http://localhost:8080/mcp", "tool": "search", "headers": {…}}}
//
// spec.tool is the server's name for the tool (default: the ToolConfig's name); the
// other spec fields are Config's server settings (url, headers, timeout_ms,
// max_result_bytes, protocol_version), while prefix, tools and overrides, which select
// among many tools, are rejected. Description and schema come from the server;
// concurrency and needs_approval from the ToolConfig (default serial / false). Tools
// whose specs name the same server settings share one Server and session. client sends
// the HTTP requests (a default client if nil). The builder connects and lists within
// timeout_ms or DefaultBuildTimeout and returns an error wrapping ErrBadConfig or
// ErrConnect.
func Builder(client *http.Client) tools.Builder {
	var mu sync.Mutex // held while connecting: registries build one tool at a time
	servers := map[string]*Server{}
	return func(tc tools.ToolConfig) (tools.Tool, error) {
		var spec toolSpec
		dec := json.NewDecoder(bytes.NewReader(tc.Spec))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			return nil, fmt.Errorf("%w: tool %s: spec: %v", ErrBadConfig, tc.Name, err)
		}
		if spec.Prefix != "" || len(spec.Tools) > 0 || len(spec.Overrides) > 0 {
			return nil, fmt.Errorf("%w: tool %s: prefix, tools and overrides select among a server's tools; a profile tool is one tool", ErrBadConfig, tc.Name)
		}
		remote := spec.Tool
		if remote == "" {
			remote = tc.Name
		}
		// The server settings alone: they identify the shared session.
		cfg := Config{
			Kind:            spec.Kind,
			URL:             spec.URL,
			Command:         spec.Command,
			Dir:             spec.Dir,
			Headers:         spec.Headers,
			TimeoutMS:       spec.TimeoutMS,
			MaxResultBytes:  spec.MaxResultBytes,
			ProtocolVersion: spec.ProtocolVersion,
		}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		key, err := json.Marshal(cfg)
		if err != nil {
			return nil, fmt.Errorf("%w: tool %s: %v", ErrBadConfig, tc.Name, err)
		}
		timeout := DefaultBuildTimeout
		if cfg.TimeoutMS > 0 {
			timeout = time.Duration(cfg.TimeoutMS) * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()

		mu.Lock()
		srv := servers[string(key)]
		if srv == nil {
			srv, err = Connect(ctx, cfg, client)
			if err != nil {
				mu.Unlock()
				return nil, err
			}
			servers[string(key)] = srv
		}
		mu.Unlock()

		listed, err := srv.list(ctx)
		if err != nil {
			return nil, err
		}
		for _, t := range listed {
			if t.Name != remote {
				continue
			}
			approval := false
			if tc.NeedsApproval != nil {
				approval = *tc.NeedsApproval
			}
			return srv.tool(tc.Name, t, tc.Concurrency, approval)
		}
		return nil, fmt.Errorf("%w: %s: server has no tool %q", ErrBadConfig, mcpspec.RedactURL(cfg.URL), remote)
	}
}

// ErrCommandRefused is returned for a command server where the wiring runs none (in
// Lambda, which has no such program to start).
var ErrCommandRefused = errors.New("mcptool: command servers are not run here")

// Sets returns the tools.SetBuilder of the "mcp" kind: one profile entry whose spec is
// a Config (see the package doc) stands for all the server's tools it selects. Entries
// with the same spec share one Server for the life of the builder, so a profile built
// again (an edited profile file, another agent) reuses the running server and its
// session. Connecting and listing are bounded by timeout_ms or DefaultBuildTimeout.
// With allowCommand false a command server is refused with ErrCommandRefused.
func Sets(o Options, allowCommand bool) tools.SetBuilder {
	var mu sync.Mutex
	servers := map[string]*Server{}
	return func(tc tools.ToolConfig) ([]tools.Tool, error) {
		cfg, err := mcpspec.ParseConfig(tc.Spec)
		if err != nil {
			return nil, err
		}
		if len(cfg.Command) > 0 && !allowCommand {
			return nil, ErrCommandRefused
		}
		key, err := json.Marshal(cfg)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
		}
		timeout := DefaultBuildTimeout
		if cfg.TimeoutMS > 0 {
			timeout = time.Duration(cfg.TimeoutMS) * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		mu.Lock()
		srv := servers[string(key)]
		if srv == nil {
			so := o
			if o.Stderr != nil { // the server's stderr lines carry the profile entry's name
				so.Stderr = &namedLines{w: o.Stderr, prefix: "mcp " + tc.Name + ": "}
			}
			if srv, err = ConnectWith(ctx, cfg, so); err != nil {
				mu.Unlock()
				return nil, err
			}
			servers[string(key)] = srv
		}
		mu.Unlock()
		return srv.Tools(ctx)
	}
}

// CheckSpec validates a server spec without connecting. It returns a *FieldError
// (wrapping ErrBadConfig) naming the field, or an error wrapping ErrBadConfig for
// JSON that does not decode.
func CheckSpec(spec json.RawMessage) error {
	_, err := mcpspec.ParseConfig(spec)
	return err
}
