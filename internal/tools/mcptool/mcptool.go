// Package mcptool makes the tools of an MCP server tools of the agent. It connects to
// the server over streamable HTTP (spec "url") or starts it as a local process and
// talks to it over stdio (spec "command"), with the official MCP Go SDK, lists the server's
// tools (one tools.Tool each: name, description, input schema), and turns a call into
// tools/call on one session shared by all tools of that server. A session that fails
// is dropped and the next call opens a new one; a call the server rejected because it
// no longer knows the session is retried once on a new session (the server did not
// run it).
//
// A server is declared in the agent profile:
//
//	{
//	  "kind": "mcp",
//	  "url": "http://localhost:8080/mcp",
//	  "prefix": "docs_",
//	  "tools": ["search", "fetch"],
//	  "concurrency": "parallel",
//	  "needs_approval": false,
//	  "overrides": {"fetch": {"concurrency": "serial", "needs_approval": true}},
//	  "headers": {"X-Tenant": "acme"},
//	  "headers_env": {"Authorization": "MCP_TOKEN"},
//	  "timeout_ms": 30000,
//	  "max_result_bytes": 65536
//	}
//
// or, for a local server run over stdio:
//
//	{"kind": "mcp", "command": ["python3", "server.py"], "dir": "/path/to/server"}
//
// Exactly one of url and command is required. command is the program and its
// arguments; the process is started on first use, shared by every call, and started
// again when it has exited (a call finding it gone runs on the new one). Its stderr
// goes to the wiring's Stderr (the console of `terret dev`), each line after "mcp NAME: "
// (NAME: the profile entry's name) when the server is built by Sets. prefix is prepended to every tool name the model sees;
// characters model providers do not accept in tool names become "_". tools limits the
// server's tools to those named (default: all). concurrency (default "serial") and
// needs_approval (default false) apply to every tool unless overrides, keyed by the
// server's tool name, says otherwise. headers are sent with every request and never
// logged or put in errors; a credential header (IsCredentialHeader: Authorization,
// Cookie, *-Api-Key, *Token*, …) is never written in the spec but named, as provider
// keys are: headers_env (header → environment variable) or headers_secret (header →
// Secrets Manager / SSM reference), resolved when the server is connected (Options). timeout_ms bounds each call (and the connect it may need)
// on top of the caller's context. max_result_bytes (default 64 KiB) bounds a result.
// protocol_version pins the MCP protocol version offered (default: the SDK's latest,
// which falls back to older servers' versions by itself).
//
// Wiring, either from that spec (all the server's tools) or as a kind of the profile's
// tool registry, one tool per ToolConfig (see Builder):
//
//	ts, err := mcptool.Build(ctx, spec, nil)   // nil: a default *http.Client
//	err := registry.RegisterKind(mcptool.Kind, mcptool.Builder(nil))
//
// The tools of one server share its session; each also implements io.Closer, closing
// that session (idempotent; a later call reconnects).
package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/terret/terret-ws/internal/secret"
	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/tools/mcpspec"
)

// Errors returned by Build, Connect, Tools and Call. ErrBadConfig is the spec's
// (package mcpspec): a Build error for an invalid spec, or for a selected tool the
// server does not have, wraps it.
var (
	ErrBadConfig      = mcpspec.ErrBadConfig
	ErrConnect        = errors.New("mcptool: cannot connect to server")
	ErrCall           = errors.New("mcptool: call failed")
	ErrTool           = errors.New("mcptool: tool error")
	ErrResultTooLarge = errors.New("mcptool: result too large")
)

// Kind is the "kind" of an MCP tool spec (mcpspec.Kind).
const Kind = mcpspec.Kind

// Config declares one MCP server's tools (package mcpspec parses and checks it).
type Config = mcpspec.Config

// Build parses spec, connects to the server and returns one tool per server tool the
// spec selects. client sends the HTTP requests (a default client if nil). It returns an
// error wrapping ErrBadConfig if the spec is invalid (including a selected tool the
// server does not have), or ErrConnect if the server cannot be reached or listed
// within ctx.
func Build(ctx context.Context, spec json.RawMessage, client *http.Client) ([]tools.Tool, error) {
	cfg, err := mcpspec.ParseConfig(spec)
	if err != nil {
		return nil, err
	}
	srv, err := Connect(ctx, cfg, client)
	if err != nil {
		return nil, err
	}
	ts, err := srv.Tools(ctx)
	if err != nil {
		_ = srv.Close()
		return nil, err
	}
	return ts, nil
}

// Server is one MCP server and the session its tools share; it is safe for concurrent
// use.
type Server struct {
	cfg    Config
	client *mcp.Client
	http   *http.Client
	stderr io.Writer // a command server's stderr
	// secrets removes header values (every form, see secret.Scrubber) from error text.
	secrets *secret.Scrubber

	// connecting serializes session opening (one connect serves all waiters) while
	// letting a waiter give up when its context ends.
	connecting chan struct{}
	mu         sync.Mutex // guards sess
	sess       *mcp.ClientSession
}

// Connect validates cfg and opens a session with the server. It returns an error
// wrapping ErrBadConfig or ErrConnect.
func Connect(ctx context.Context, cfg Config, client *http.Client) (*Server, error) {
	return ConnectWith(ctx, cfg, Options{HTTP: client})
}

// Options are the wiring's settings of servers.
type Options struct {
	HTTP   *http.Client // sends a url server's requests; nil: a client of its own
	Stderr io.Writer    // receives a command server's stderr; nil: discarded
	// LookupEnv finds the variables headers_env names (nil: none is read).
	LookupEnv func(name string) (string, bool)
	// Secrets fetches headers_secret references (nil: they are refused).
	Secrets mcpspec.Secrets
}

// Lookup is where o resolves a spec's header references.
func (o Options) Lookup() mcpspec.Lookup {
	return mcpspec.Lookup{LookupEnv: o.LookupEnv, Secrets: o.Secrets}
}

// ConnectWith is Connect with the wiring's options.
func ConnectWith(ctx context.Context, cfg Config, o Options) (*Server, error) {
	client := o.HTTP
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxResultBytes == 0 {
		cfg.MaxResultBytes = mcpspec.DefaultMaxResultBytes
	}
	if client == nil {
		// A transport of its own: the shared default one can have its idle connections
		// closed by anyone in the process (httptest.Server.Close does), which would break
		// this session's streams.
		client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	headers, secrets, err := cfg.ResolveHeaders(ctx, o.Lookup())
	if err != nil {
		return nil, err
	}
	if len(headers) > 0 {
		c := *client
		base := c.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		c.Transport = headerTransport{base: base, headers: headers}
		client = &c
	}
	s := &Server{
		cfg:        cfg,
		client:     mcp.NewClient(&mcp.Implementation{Name: "terret-ws", Version: "v1"}, nil),
		http:       client,
		stderr:     o.Stderr,
		secrets:    secret.NewScrubber(secrets...),
		connecting: make(chan struct{}, 1),
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.session(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Close closes the current session, if any. A later call opens a new one.
func (s *Server) Close() error {
	s.mu.Lock()
	sess := s.sess
	s.sess = nil
	s.mu.Unlock()
	if sess == nil {
		return nil
	}
	if err := sess.Close(); err != nil && !errors.Is(err, mcp.ErrSessionMissing) {
		return fmt.Errorf("mcptool: close %s: %s", s.cfg.Label(), s.scrub(err.Error()))
	}
	return nil
}

// Tools lists the server's tools (all pages) and returns the ones the config selects,
// in the server's order. It returns an error wrapping ErrConnect if the server cannot
// be listed, or ErrBadConfig if a selected tool is missing, a name is unusable, or two
// tools end up with one name.
func (s *Server) Tools(ctx context.Context) ([]tools.Tool, error) {
	listed, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	want, missing := map[string]bool{}, map[string]bool{}
	for _, n := range s.cfg.Tools {
		want[n], missing[n] = true, true
	}
	seen := map[string]string{}
	var out []tools.Tool
	for _, t := range listed {
		if len(want) > 0 && !want[t.Name] {
			continue
		}
		delete(missing, t.Name)
		name := s.cfg.Prefix + invalidNameChars.ReplaceAllString(t.Name, "_")
		if len(name) > maxToolName {
			return nil, fmt.Errorf("%w: %s: tool name %q longer than %d characters", ErrBadConfig, s.cfg.Label(), name, maxToolName)
		}
		if prev, dup := seen[name]; dup {
			return nil, fmt.Errorf("%w: %s: tools %q and %q both become %q", ErrBadConfig, s.cfg.Label(), prev, t.Name, name)
		}
		seen[name] = t.Name
		conc, approval := s.cfg.Concurrency, s.cfg.NeedsApproval
		if o, ok := s.cfg.Overrides[t.Name]; ok {
			if o.Concurrency != "" {
				conc = o.Concurrency
			}
			if o.NeedsApproval != nil {
				approval = *o.NeedsApproval
			}
		}
		tool, err := s.tool(name, t, conc, approval)
		if err != nil {
			return nil, err
		}
		out = append(out, tool)
	}
	if len(missing) > 0 {
		names := make([]string, 0, len(missing))
		for n := range missing {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("%w: %s: server has no tools %q", ErrBadConfig, s.cfg.Label(), names)
	}
	return out, nil
}

// list lists all the server's tools, every page. It returns an error wrapping
// ErrConnect.
func (s *Server) list(ctx context.Context) ([]*mcp.Tool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var listed []*mcp.Tool
	err := s.withSession(ctx, func(sess *mcp.ClientSession) error {
		listed = listed[:0]
		for t, err := range sess.Tools(ctx, nil) {
			if err != nil {
				return err
			}
			listed = append(listed, t)
		}
		return nil
	})
	if errors.Is(err, ErrConnect) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: list tools: %s", ErrConnect, s.cfg.Label(), s.errText(ctx, err))
	}
	return listed, nil
}

// maxToolName is the longest tool name model providers accept.
const maxToolName = 64

var invalidNameChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// tool makes the server's tool t a tools.Tool called name.
func (s *Server) tool(name string, t *mcp.Tool, conc tools.Concurrency, approval bool) (*Tool, error) {
	def := tools.Definition{
		Name:          name,
		Description:   t.Description,
		Concurrency:   conc,
		NeedsApproval: approval,
	}
	if def.Description == "" {
		def.Description = t.Title
	}
	if t.InputSchema != nil {
		schema, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: tool %s: input schema: %v", ErrBadConfig, s.cfg.Label(), t.Name, err)
		}
		def.Schema = schema
	}
	if def.Concurrency == "" {
		def.Concurrency = tools.Serial
	}
	return &Tool{srv: s, remote: t.Name, def: def}, nil
}

// bound applies the configured timeout to ctx.
func (s *Server) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.cfg.TimeoutMS > 0 {
		return context.WithTimeout(ctx, time.Duration(s.cfg.TimeoutMS)*time.Millisecond)
	}
	return context.WithCancel(ctx)
}

// session returns the shared session, opening one if there is none.
func (s *Server) session(ctx context.Context) (*mcp.ClientSession, error) {
	if sess := s.current(); sess != nil {
		return sess, nil
	}
	select {
	case s.connecting <- struct{}{}:
		defer func() { <-s.connecting }()
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %s: %w", ErrConnect, s.cfg.Label(), ctx.Err())
	}
	if sess := s.current(); sess != nil {
		return sess, nil // opened while this caller waited
	}
	var transport mcp.Transport = &mcp.StreamableClientTransport{
		Endpoint:   s.cfg.URL,
		HTTPClient: s.http,
		// Server-initiated messages are not used; a standing GET stream would only hold
		// a connection open.
		DisableStandaloneSSE: true,
	}
	if len(s.cfg.Command) > 0 {
		// Not bound to ctx: the process serves every later call, until it exits or
		// the session is closed (which closes its stdin, then terminates it).
		cmd := exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
		cmd.Dir = s.cfg.Dir
		cmd.Stderr = s.stderr
		transport = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	}
	var opts *mcp.ClientSessionOptions
	if s.cfg.ProtocolVersion != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: s.cfg.ProtocolVersion}
	}
	// The SDK's Connect can outlive ctx while it cleans up a failed handshake (it
	// waits for its cancellation notice to an unresponsive server), so the deadline is
	// enforced here and the cleanup finishes in the background.
	type connected struct {
		sess *mcp.ClientSession
		err  error
	}
	done := make(chan connected, 1)
	go func() {
		sess, err := s.client.Connect(ctx, transport, opts)
		done <- connected{sess, err}
	}()
	var c connected
	select {
	case c = <-done:
	case <-ctx.Done():
		go func() {
			if c := <-done; c.sess != nil {
				_ = c.sess.Close()
			}
		}()
		return nil, fmt.Errorf("%w: %s: %w", ErrConnect, s.cfg.Label(), ctx.Err())
	}
	sess, err := c.sess, c.err
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrConnect, s.cfg.Label(), ctx.Err())
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrConnect, s.cfg.Label(), s.scrub(err.Error()))
	}
	s.mu.Lock()
	s.sess = sess
	s.mu.Unlock()
	if len(s.cfg.Command) > 0 {
		// A process that exits ends its session: forget it, so the next call starts
		// the server again.
		go func() {
			_ = sess.Wait()
			s.drop(sess)
		}()
	}
	return sess, nil
}

func (s *Server) current() *mcp.ClientSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sess
}

// drop forgets a session that failed, so the next call opens a new one. The session
// is closed in the background: closing waits for the session's in-flight messages,
// which a failing server may hold up.
func (s *Server) drop(sess *mcp.ClientSession) {
	s.mu.Lock()
	if s.sess == sess {
		s.sess = nil
	}
	s.mu.Unlock()
	go func() { _ = sess.Close() }()
}

// withSession runs fn on the shared session. When fn fails for a reason other than the
// context or a JSON-RPC error response from the server (which leave the session
// usable), the session is dropped; when the server no longer knows the session (so it
// did not run the request), fn runs once more on a new one. Errors from opening a
// session wrap ErrConnect.
func (s *Server) withSession(ctx context.Context, fn func(*mcp.ClientSession) error) error {
	for attempt := 0; ; attempt++ {
		sess, err := s.session(ctx)
		if err != nil {
			return err
		}
		err = fn(sess)
		if err == nil || ctx.Err() != nil {
			return err
		}
		// ErrConnectionClosed: the call never left (the connection was already closing,
		// a command server had exited), so it is safe to send again on a new session.
		if errors.Is(err, mcp.ErrSessionMissing) || errors.Is(err, mcp.ErrConnectionClosed) {
			s.drop(sess)
			if attempt == 0 {
				continue
			}
			return err
		}
		if serverAnswered(err) {
			return err
		}
		s.drop(sess)
		return err
	}
}

// codeRejected is the JSON-RPC code the SDK gives transport rejections (HTTP errors,
// unreachable server); those say nothing good about the session.
const codeRejected = -32005

// serverAnswered reports whether err is a JSON-RPC error response from the server
// (unknown tool, invalid params, …): the session is fine.
func serverAnswered(err error) bool {
	var rpcErr *jsonrpc.Error
	return errors.As(err, &rpcErr) && rpcErr.Code != codeRejected
}

// errText describes err for an error message: the context's error if it ended the
// operation, else the scrubbed text.
func (s *Server) errText(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return ctx.Err().Error()
	}
	return s.scrub(err.Error())
}

// maxErrorText bounds error text: it is logged durably and shown to the model.
const maxErrorText = 2048

// scrub removes configured header values and URL secrets from text and bounds it.
func (s *Server) scrub(text string) string {
	text = s.secrets.Scrub(text)
	if u, err := url.Parse(s.cfg.URL); err == nil {
		if u.RawQuery != "" {
			text = strings.ReplaceAll(text, u.RawQuery, "[redacted]")
		}
		if p, ok := u.User.Password(); ok && p != "" {
			text = strings.ReplaceAll(text, p, "[redacted]")
		}
	}
	return bound(text)
}

func bound(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > maxErrorText {
		s = s[:maxErrorText] + "…"
	}
	return s
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

// Tool is one tool of an MCP server; it implements tools.Tool and io.Closer.
type Tool struct {
	srv    *Server
	remote string // the server's name for the tool
	def    tools.Definition
}

var (
	_ tools.Tool = (*Tool)(nil)
	_ io.Closer  = (*Tool)(nil)
)

// Definition returns the tool's definition.
func (t *Tool) Definition() tools.Definition { return t.def }

// Close closes the session shared with the server's other tools; see Server.Close.
func (t *Tool) Close() error { return t.srv.Close() }

// Call calls the tool with args (a JSON object; empty means {}). The result is the
// tool's structured content if it has any; else the JSON its only text content holds,
// if that text is a JSON object or array; else {"text": TEXT} with the text contents
// joined by newlines, plus "content" describing any non-text content (type, MIME type,
// URI; binary data is not carried). It returns an error wrapping tools.ErrBadArgs if
// args is not a JSON object; ErrTool, with the tool's text, if the result has isError
// set; ErrResultTooLarge above max_result_bytes; ErrCall if the call itself failed,
// wrapping the context's error when that ended it; ErrConnect if no session could be
// opened.
func (t *Tool) Call(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	payload := bytes.TrimSpace(args)
	if len(payload) == 0 {
		payload = []byte(`{}`)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%w: %s: args must be a JSON object", tools.ErrBadArgs, t.def.Name)
	}
	ctx, cancel := t.srv.bound(ctx)
	defer cancel()
	var res *mcp.CallToolResult
	err := t.srv.withSession(ctx, func(sess *mcp.ClientSession) error {
		var err error
		res, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: t.remote, Arguments: json.RawMessage(payload)})
		return err
	})
	if err != nil {
		if errors.Is(err, ErrConnect) {
			return nil, err
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCall, t.def.Name, ctxErr)
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrCall, t.def.Name, t.srv.scrub(err.Error()))
	}
	if res.IsError {
		text := strings.Join(texts(res.Content), "\n")
		if text == "" {
			text = "the tool reported an error"
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrTool, t.def.Name, bound(text))
	}
	out, err := resultJSON(res)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCall, t.def.Name, err)
	}
	if len(out) > t.srv.cfg.MaxResultBytes {
		return nil, fmt.Errorf("%w: %s: %d bytes, limit %d", ErrResultTooLarge, t.def.Name, len(out), t.srv.cfg.MaxResultBytes)
	}
	return out, nil
}

// resultJSON maps a successful result to JSON (see Tool.Call).
func resultJSON(res *mcp.CallToolResult) (json.RawMessage, error) {
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, fmt.Errorf("structured content: %v", err)
		}
		return b, nil
	}
	text := texts(res.Content)
	others := nonText(res.Content)
	if len(others) == 0 && len(text) == 1 {
		if t := strings.TrimSpace(text[0]); (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")) && json.Valid([]byte(t)) {
			var buf bytes.Buffer
			if json.Compact(&buf, []byte(t)) == nil {
				return buf.Bytes(), nil
			}
		}
	}
	out := struct {
		Text    string           `json:"text"`
		Content []map[string]any `json:"content,omitempty"`
	}{Text: strings.Join(text, "\n"), Content: others}
	return json.Marshal(out)
}

// texts returns the text of text content and of embedded text resources.
func texts(content []mcp.Content) []string {
	var out []string
	for _, c := range content {
		switch v := c.(type) {
		case *mcp.TextContent:
			out = append(out, v.Text)
		case *mcp.EmbeddedResource:
			if v.Resource != nil && v.Resource.Text != "" {
				out = append(out, v.Resource.Text)
			}
		}
	}
	return out
}

// nonText describes content that has no text, without its binary data.
func nonText(content []mcp.Content) []map[string]any {
	var out []map[string]any
	for _, c := range content {
		switch v := c.(type) {
		case *mcp.TextContent:
		case *mcp.ImageContent:
			out = append(out, map[string]any{"type": "image", "mime_type": v.MIMEType, "bytes": len(v.Data)})
		case *mcp.AudioContent:
			out = append(out, map[string]any{"type": "audio", "mime_type": v.MIMEType, "bytes": len(v.Data)})
		case *mcp.ResourceLink:
			out = append(out, map[string]any{"type": "resource_link", "uri": v.URI, "name": v.Name, "mime_type": v.MIMEType})
		case *mcp.EmbeddedResource:
			if v.Resource != nil && v.Resource.Text == "" {
				out = append(out, map[string]any{"type": "resource", "uri": v.Resource.URI, "mime_type": v.Resource.MIMEType, "bytes": len(v.Resource.Blob)})
			}
		default:
			out = append(out, map[string]any{"type": fmt.Sprintf("%T", c)})
		}
	}
	return out
}
