package mcptool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/tools/mcpspec"
	"github.com/terret/terret-ws/internal/tools/mcptool"
)

// legacyProtocol pins the session-based protocol (Mcp-Session-Id). By default the
// client offers the SDK's newest, stateless protocol first and falls back when the
// server does not support it; tests that depend on session handling run both ways.
const legacyProtocol = "2025-11-25"

type lookupIn struct {
	ID int `json:"id" jsonschema:"the item id"`
}

type lookupOut struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

type textIn struct {
	Text string `json:"text"`
}

// newMCPServer builds the MCP server the tests talk to; calls counts tool runs by name.
func newMCPServer(calls *sync.Map) *mcp.Server {
	count := func(name string) {
		n, _ := calls.LoadOrStore(name, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "test-server", Version: "v0.0.1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "lookup", Description: "Looks up an item."},
		func(_ context.Context, _ *mcp.CallToolRequest, in lookupIn) (*mcp.CallToolResult, lookupOut, error) {
			count("lookup")
			if in.ID == 0 {
				return nil, lookupOut{}, errors.New("item 0 does not exist")
			}
			return nil, lookupOut{ID: in.ID, Name: fmt.Sprintf("widget-%d", in.ID)}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "echo.text", Description: "Echoes its text."},
		func(_ context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
			count("echo.text")
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "json_text", Description: "Answers JSON as text."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"a": [1, 2]}`}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "picture", Description: "Draws."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "here it is"},
				&mcp.ImageContent{MIMEType: "image/png", Data: []byte("\x89PNG....")},
			}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "big", Description: "Answers a lot."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", 500)}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "Waits."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		})
	return s
}

// testServer is a real MCP server over streamable HTTP. Its handler can be replaced
// by a fresh one (a restarted server that knows no sessions), and it counts the
// session-opening requests it sees.
type testServer struct {
	*httptest.Server
	calls sync.Map
	// A client opens a session with server/discover, falling back to initialize
	// when the server does not support it, or with initialize alone.
	discovers   atomic.Int64
	initializes atomic.Int64
	handler     atomic.Pointer[http.Handler]
	mcpServer   atomic.Pointer[mcp.Server]
}

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	ts := &testServer{}
	ts.restart()
	ts.Server = httptest.NewServer(http.HandlerFunc(ts.serve))
	t.Cleanup(ts.Close)
	return ts
}

// restart swaps in a fresh MCP handler and server: sessions of the old one are gone.
func (ts *testServer) restart() {
	srv := newMCPServer(&ts.calls)
	ts.mcpServer.Store(srv)
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts.handler.Store(&h)
}

func (ts *testServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		body, _ := io.ReadAll(r.Body)
		var msg struct {
			Method string `json:"method"`
		}
		if json.Unmarshal(body, &msg) == nil {
			switch msg.Method {
			case "initialize":
				ts.initializes.Add(1)
			case "server/discover":
				ts.discovers.Add(1)
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	(*ts.handler.Load()).ServeHTTP(w, r)
}

// connects counts the sessions clients opened.
func (ts *testServer) connects() int64 {
	return max(ts.discovers.Load(), ts.initializes.Load())
}

func (ts *testServer) runs(name string) int64 {
	n, ok := ts.calls.Load(name)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

func build(t *testing.T, spec string) []tools.Tool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts, err := mcptool.Build(ctx, json.RawMessage(spec), nil)
	if err != nil {
		t.Fatalf("Build(%s): %v", spec, err)
	}
	t.Cleanup(func() {
		for _, tool := range ts {
			_ = tool.(io.Closer).Close()
		}
	})
	return ts
}

func byName(t *testing.T, ts []tools.Tool, name string) tools.Tool {
	t.Helper()
	for _, tool := range ts {
		if tool.Definition().Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %q", name)
	return nil
}

func call(t *testing.T, tool tools.Tool, args string) (json.RawMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return tool.Call(ctx, json.RawMessage(args))
}

func TestBuildListsTools(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	ts := build(t, `{"kind":"mcp","url":"`+srv.URL+`","prefix":"t_","concurrency":"parallel",
		"overrides":{"echo.text":{"concurrency":"serial","needs_approval":true}}}`)
	var names []string
	for _, tool := range ts {
		names = append(names, tool.Definition().Name)
	}
	if want := []string{"t_big", "t_echo_text", "t_json_text", "t_lookup", "t_picture", "t_slow"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("tool names = %q, want %q", names, want)
	}

	lookup := byName(t, ts, "t_lookup").Definition()
	if lookup.Description != "Looks up an item." || lookup.Concurrency != tools.Parallel || lookup.NeedsApproval {
		t.Errorf("lookup definition = %+v", lookup)
	}
	var schema struct {
		Type       string `json:"type"`
		Required   []string
		Properties map[string]struct {
			Type        string `json:"type"`
			Description string `json:"description"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(lookup.Schema, &schema); err != nil {
		t.Fatalf("lookup schema %s: %v", lookup.Schema, err)
	}
	if schema.Type != "object" || schema.Properties["id"].Type != "integer" || schema.Properties["id"].Description != "the item id" ||
		!reflect.DeepEqual(schema.Required, []string{"id"}) {
		t.Errorf("lookup schema = %s", lookup.Schema)
	}

	echo := byName(t, ts, "t_echo_text").Definition()
	if echo.Concurrency != tools.Serial || !echo.NeedsApproval {
		t.Errorf("override not applied: %+v", echo)
	}
}

func TestBuildDefaultsAndSelection(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	ts := build(t, `{"kind":"mcp","url":"`+srv.URL+`","tools":["lookup","echo.text"]}`)
	if len(ts) != 2 {
		t.Fatalf("got %d tools, want the 2 selected", len(ts))
	}
	for _, tool := range ts {
		if d := tool.Definition(); d.Concurrency != tools.Serial || d.NeedsApproval {
			t.Errorf("%s: concurrency %q needs_approval %t, want serial/false by default", d.Name, d.Concurrency, d.NeedsApproval)
		}
	}
}

func TestCall(t *testing.T) {
	t.Parallel()
	for _, version := range []string{"", legacyProtocol} {
		t.Run("protocol="+version, func(t *testing.T) {
			t.Parallel()
			srv := newTestServer(t)
			ts := build(t, `{"url":"`+srv.URL+`","protocol_version":"`+version+`"}`)
			tests := []struct {
				tool, args, want string
			}{
				{"lookup", `{"id": 42}`, `{"id":42,"name":"widget-42"}`},
				{"echo_text", `{"text": "hi there"}`, `{"text":"hi there"}`},
				{"json_text", ``, `{"a":[1,2]}`},
				{"picture", `{}`, `{"text":"here it is","content":[{"bytes":8,"mime_type":"image/png","type":"image"}]}`},
			}
			for _, tt := range tests {
				got, err := call(t, byName(t, ts, tt.tool), tt.args)
				if err != nil {
					t.Fatalf("%s: %v", tt.tool, err)
				}
				if string(got) != tt.want {
					t.Errorf("%s = %s, want %s", tt.tool, got, tt.want)
				}
			}
			// Listing and every call ran on one session.
			if n := srv.connects(); n != 1 {
				t.Errorf("%d sessions opened, want 1", n)
			}
		})
	}
}

func TestCallConcurrent(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	lookup := byName(t, build(t, `{"url":"`+srv.URL+`"}`), "lookup")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 1; i <= 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := call(t, lookup, fmt.Sprintf(`{"id": %d}`, i))
			if err == nil && string(got) != fmt.Sprintf(`{"id":%d,"name":"widget-%d"}`, i, i) {
				err = fmt.Errorf("lookup %d = %s", i, got)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := srv.runs("lookup"); n != 8 {
		t.Errorf("lookup ran %d times, want 8", n)
	}
}

func TestCallErrors(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	ts := build(t, `{"url":"`+srv.URL+`","max_result_bytes":100}`)
	tests := []struct {
		name, tool, args string
		want             error
		contains         string
	}{
		{"tool error result", "lookup", `{"id": 0}`, mcptool.ErrTool, "item 0 does not exist"},
		{"args fail the server's schema", "lookup", `{"id": "forty-two"}`, mcptool.ErrTool, "id"},
		{"args not an object", "lookup", `[42]`, tools.ErrBadArgs, ""},
		{"result above max_result_bytes", "big", `{}`, mcptool.ErrResultTooLarge, "limit 100"},
	}
	for _, tt := range tests {
		_, err := call(t, byName(t, ts, tt.tool), tt.args)
		if !errors.Is(err, tt.want) || !strings.Contains(fmt.Sprint(err), tt.contains) {
			t.Errorf("%s: err = %v, want %v mentioning %q", tt.name, err, tt.want, tt.contains)
		}
	}
	if n := srv.runs("lookup"); n != 1 {
		t.Errorf("lookup ran %d times, want 1 (only the valid call reaches the handler)", n)
	}
	if n := srv.connects(); n != 1 {
		t.Errorf("tool errors reopened the session: %d sessions", n)
	}
}

func TestUnknownToolKeepsSession(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	ts := build(t, `{"url":"`+srv.URL+`","protocol_version":"`+legacyProtocol+`"}`)
	// The server drops a tool after it was listed: the call fails with a JSON-RPC
	// error, which says nothing about the session.
	srv.mcpServer.Load().RemoveTools("echo.text")
	_, err := call(t, byName(t, ts, "echo_text"), `{"text":"x"}`)
	if !errors.Is(err, mcptool.ErrCall) || !strings.Contains(err.Error(), "echo.text") {
		t.Fatalf("err = %v, want ErrCall naming the tool", err)
	}
	if _, err := call(t, byName(t, ts, "lookup"), `{"id":1}`); err != nil {
		t.Fatalf("lookup after the failed call: %v", err)
	}
	if n := srv.connects(); n != 1 {
		t.Errorf("%d sessions opened, want 1", n)
	}
}

func TestCallTimeout(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	// 1 s: connecting must fit in it even on a loaded machine; the slow tool takes 5 s.
	ts := build(t, `{"url":"`+srv.URL+`","timeout_ms":1000}`)
	start := time.Now()
	_, err := call(t, byName(t, ts, "slow"), `{}`)
	if !errors.Is(err, mcptool.ErrCall) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrCall wrapping DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("call took %v despite timeout_ms 1000", d)
	}
	// The session survives a call's deadline.
	if _, err := call(t, byName(t, ts, "lookup"), `{"id": 7}`); err != nil {
		t.Fatalf("lookup after timeout: %v", err)
	}
	if n := srv.connects(); n != 1 {
		t.Errorf("%d sessions opened, want 1", n)
	}
}

func TestServerRestartReconnects(t *testing.T) {
	t.Parallel()
	for _, version := range []string{"", legacyProtocol} {
		t.Run("protocol="+version, func(t *testing.T) {
			t.Parallel()
			srv := newTestServer(t)
			lookup := byName(t, build(t, `{"url":"`+srv.URL+`","protocol_version":"`+version+`"}`), "lookup")
			if _, err := call(t, lookup, `{"id": 1}`); err != nil {
				t.Fatal(err)
			}
			srv.restart() // the server forgets every session
			got, err := call(t, lookup, `{"id": 2}`)
			if err != nil {
				t.Fatalf("call after restart: %v", err)
			}
			if string(got) != `{"id":2,"name":"widget-2"}` {
				t.Errorf("result = %s", got)
			}
			if n := srv.runs("lookup"); n != 2 {
				t.Errorf("lookup ran %d times, want 2 (no duplicate run on reconnect)", n)
			}
			if version == legacyProtocol {
				if n := srv.connects(); n != 2 {
					t.Errorf("%d sessions opened, want 2 (one reconnect)", n)
				}
			}
		})
	}
}

func TestServerDown(t *testing.T) {
	t.Parallel()
	// A server that is not there: Build fails.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	if _, err := mcptool.Build(context.Background(), json.RawMessage(`{"url":"`+gone.URL+`/mcp"}`), nil); !errors.Is(err, mcptool.ErrConnect) {
		t.Fatalf("Build against a closed port: err = %v, want ErrConnect", err)
	}

	// A server that goes down after Build, then comes back on the same address.
	var calls sync.Map
	srv := newMCPServer(&calls)
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	hs := &http.Server{Handler: handler}
	go hs.Serve(ln)
	lookup := byName(t, build(t, `{"url":"http://`+addr+`/mcp","protocol_version":"`+legacyProtocol+`"}`), "lookup")
	if _, err := call(t, lookup, `{"id": 1}`); err != nil {
		t.Fatal(err)
	}
	hs.Close()
	_, err = call(t, lookup, `{"id": 2}`)
	if !errors.Is(err, mcptool.ErrCall) && !errors.Is(err, mcptool.ErrConnect) {
		t.Fatalf("call with the server down: err = %v, want ErrCall or ErrConnect", err)
	}
	if _, err := call(t, lookup, `{"id": 3}`); !errors.Is(err, mcptool.ErrConnect) {
		t.Fatalf("second call with the server down: err = %v, want ErrConnect", err)
	}

	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("relisten on %s: %v", addr, err)
	}
	hs = &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	got, err := call(t, lookup, `{"id": 4}`)
	if err != nil || string(got) != `{"id":4,"name":"widget-4"}` {
		t.Fatalf("call after the server came back = %s, %v", got, err)
	}
}

func TestHeadersSentAndNeverInErrors(t *testing.T) {
	t.Parallel()
	const secret = "Bearer s3cr3t-t0ken-value"
	var calls sync.Map
	srv := newMCPServer(&calls)
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	var reject atomic.Bool
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != secret {
			t.Errorf("Authorization = %q on %s", got, r.Method)
		}
		if reject.Load() {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, "forbidden: token %s revoked", r.Header.Get("Authorization"))
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	// The value is named, never written: headers_env, resolved where the server runs.
	spec := `{"url":"` + hs.URL + `?key=querysecret","headers_env":{"Authorization":"MCP_TOKEN"}}`
	sets := mcptool.Sets(mcptool.Options{LookupEnv: func(n string) (string, bool) { return map[string]string{"MCP_TOKEN": secret}[n], n == "MCP_TOKEN" }}, false)
	ts, err := sets(tools.ToolConfig{Name: "m", Kind: mcptool.Kind, Spec: json.RawMessage(spec)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ts[0].(io.Closer).Close() })
	lookup := byName(t, ts, "lookup")
	if _, err := call(t, lookup, `{"id": 5}`); err != nil {
		t.Fatal(err)
	}
	reject.Store(true)
	_, err = call(t, lookup, `{"id": 6}`)
	if err == nil {
		t.Fatal("call succeeded against a rejecting server")
	}
	for _, s := range []string{"s3cr3t", "querysecret"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error %q carries a secret", err)
		}
	}
	cfg, _ := mcpspec.ParseConfig(json.RawMessage(spec))
	if printed := fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg); strings.Contains(printed, "s3cr3t") || strings.Contains(printed, "querysecret") {
		t.Errorf("printed config leaks a secret: %s", printed)
	}
}

func TestBuildRejectsBadSpecs(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	for _, bad := range []string{
		`{"kind":"lambda","url":"` + srv.URL + `"}`,
		`{"url":"localhost:8080/mcp"}`,
		`{"url":"` + srv.URL + `","concurrency":"often"}`,
		`{"url":"` + srv.URL + `","prefix":"a.b"}`,
		`{"url":"` + srv.URL + `","overrides":{"lookup":{"concurrency":"x"}}}`,
		`{"url":"` + srv.URL + `","tools":["lookup","nope"]}`,
		`{"url":"` + srv.URL + `","timeout":5}`,
		`{"url":"` + srv.URL + `","prefix":"` + strings.Repeat("p", 60) + `"}`,
	} {
		if _, err := mcptool.Build(context.Background(), json.RawMessage(bad), nil); !errors.Is(err, mcptool.ErrBadConfig) {
			t.Errorf("Build(%s) err = %v, want ErrBadConfig", bad, err)
		}
	}
}

func TestBuildDeadlineAgainstHangingServer(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // accepts the request, never answers
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := mcptool.Build(ctx, json.RawMessage(`{"url":"`+hang.URL+`"}`), nil)
	if !errors.Is(err, mcptool.ErrConnect) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrConnect wrapping DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Build took %v with a 200ms deadline", d)
	}
}

func TestBuilderSharesSession(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	build := mcptool.Builder(nil)
	lookup, err := build(tools.ToolConfig{Name: "lookup", Kind: "mcp", Spec: json.RawMessage(`{"url":"` + srv.URL + `"}`)})
	if err != nil {
		t.Fatalf("Builder(lookup): %v", err)
	}
	t.Cleanup(func() { lookup.(io.Closer).Close() })
	approval := true
	echo, err := build(tools.ToolConfig{Name: "echo", Kind: "mcp", Concurrency: tools.Parallel, NeedsApproval: &approval,
		Spec: json.RawMessage(`{"url":"` + srv.URL + `","tool":"echo.text"}`)})
	if err != nil {
		t.Fatalf("Builder(echo): %v", err)
	}
	if d := lookup.Definition(); d.Name != "lookup" || d.Description != "Looks up an item." || d.Concurrency != tools.Serial || d.NeedsApproval || !strings.Contains(string(d.Schema), `"id"`) {
		t.Errorf("lookup definition = %+v", d)
	}
	if d := echo.Definition(); d.Name != "echo" || d.Description != "Echoes its text." || d.Concurrency != tools.Parallel || !d.NeedsApproval {
		t.Errorf("echo definition = %+v", d)
	}
	if got, err := call(t, echo, `{"text":"yo"}`); err != nil || string(got) != `{"text":"yo"}` {
		t.Errorf("echo = %s, %v", got, err)
	}
	if got, err := call(t, lookup, `{"id":3}`); err != nil || string(got) != `{"id":3,"name":"widget-3"}` {
		t.Errorf("lookup = %s, %v", got, err)
	}
	if n := srv.connects(); n != 1 {
		t.Errorf("%d sessions opened for two tools of one server, want 1", n)
	}
	for _, spec := range []string{
		`{"url":"` + srv.URL + `","tool":"nope"}`,
		`{"url":"` + srv.URL + `","prefix":"p_"}`,
		`{"url":"` + srv.URL + `","tools":["lookup"]}`,
		`{"url":"` + srv.URL + `","unknown":1}`,
		`{"url":"nope"}`,
	} {
		if _, err := build(tools.ToolConfig{Name: "x", Kind: "mcp", Spec: json.RawMessage(spec)}); !errors.Is(err, mcptool.ErrBadConfig) {
			t.Errorf("Builder with spec %s: err = %v, want ErrBadConfig", spec, err)
		}
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
