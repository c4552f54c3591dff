package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/model/openai/openaitest"
)

// The keys of the test: they must reach the model server and nothing else.
const (
	acmeKey  = "sk-acme-SECRET123"  // from the process environment
	localKey = "sk-local-DOTENV456" // from .env in the working directory
)

// ownDev is a `terret dev` run in a working directory of the test's, with its own
// environment, console captured.
type ownDev struct {
	cmd      *exec.Cmd
	dir      string
	env      []string
	stdout   *syncBuf
	stderr   *syncBuf
	ready    devState
	stateDir string
}

func startOwnDev(t *testing.T, dir string, env []string, args ...string) *ownDev {
	t.Helper()
	stateDir := t.TempDir()
	ready := filepath.Join(stateDir, "ready.json")
	env = append(append(os.Environ(), "TERRET_STATE_DIR="+stateDir), env...)
	args = append([]string{"dev", "--addr", "127.0.0.1:0", "--ready-file", ready,
		"--dynamodb-endpoint", dynamotest.Endpoint(t), "--table-prefix", dynamotest.UniqueName("own") + "-"}, args...)
	cmd := exec.Command(terretBin(t), args...)
	cmd.Dir, cmd.Env = dir, env
	p := &ownDev{cmd: cmd, dir: dir, env: env, stdout: &syncBuf{}, stderr: &syncBuf{}, stateDir: stateDir}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	hang.UntilNil(t, "terret dev's ready file", func() error {
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &p.ready) == nil {
			return nil
		}
		return fmt.Errorf("not ready\nstdout:\n%s\nstderr:\n%s", p.stdout, p.stderr)
	})
	return p
}

// run runs a terret command in the working directory, against this terret dev.
func (p *ownDev) run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(terretBin(t), args...)
	cmd.Dir, cmd.Env = p.dir, p.env
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// agentConn is a subscribed socket of one agent, every frame it received kept.
type agentConn struct {
	t      *testing.T
	dev    *ownDev
	id     string
	c      *websocket.Conn
	frames []string
	ends   int // turn/end events seen
	// in carries what the reader goroutine read. It reads all the time, so the
	// gateway's pings are answered while the test runs commands between turns (a
	// socket read only inside until missed them on a loaded machine, and the gateway
	// closed it for a ping timeout).
	in chan readResult
}

// readResult is one read of the socket.
type readResult struct {
	b   []byte
	err error
}

func (p *ownDev) connect(t *testing.T, agentID string) *agentConn {
	t.Helper()
	out, errOut, code := p.run(t, "token", "create", "--agent", agentID)
	if code != 0 {
		t.Fatalf("token create: %s %s", out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
	defer cancel()
	c, _, err := websocket.Dial(ctx, strings.Replace(p.ready.WSURL, "{agent_id}", agentID, 1),
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + strings.TrimSpace(out)}}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	t.Cleanup(func() { c.CloseNow() })
	a := &agentConn{t: t, c: c, dev: p, id: agentID, in: make(chan readResult, 1<<14)}
	go func() {
		for {
			_, b, err := c.Read(context.Background())
			a.in <- readResult{b, err}
			if err != nil {
				return
			}
		}
	}()
	a.send(`{"type":"subscribe","from_seq":0}`)
	a.until("hello", func(f string) bool { return strings.Contains(f, `"type":"hello"`) })
	return a
}

func (a *agentConn) send(frame string) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
	defer cancel()
	if err := a.c.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		a.t.Fatalf("%s: send %s: %v", a.id, frame, err)
	}
}

// until reads frames until one satisfies ok, and returns it. Each frame's wait is
// internal/hang's bound (a hang detector, no claim about speed); a failure names what
// was awaited and the frames read so far.
func (a *agentConn) until(what string, ok func(string) bool) string {
	a.t.Helper()
	for {
		bound := hang.Bound()
		var b []byte
		var err error
		select {
		case r := <-a.in:
			b, err = r.b, r.err
			if err != nil {
				a.in <- r // every later wait fails the same way
			}
		case <-time.After(bound):
			err = errors.New("timed out")
		}
		if err != nil {
			a.t.Fatalf("%s: waiting for %s: no frame in %s: %v\nframes so far:\n%s\nterret dev stderr:\n%s",
				a.id, what, bound, err, strings.Join(a.frames, "\n"), a.dev.stderr)
		}
		f := string(b)
		a.frames = append(a.frames, f)
		if strings.Contains(f, `"type":"turn/end"`) {
			a.ends++
		}
		if ok(f) {
			return f
		}
	}
}

// event is the part of an event frame the tests read.
type event struct {
	Type    string `json:"type"`
	Payload struct {
		Text   string          `json:"text"`
		Status string          `json:"status"`
		Reason string          `json:"reason"`
		Result json.RawMessage `json:"result"`
		Error  string          `json:"error"`
	} `json:"payload"`
}

// turn injects text waking the agent and returns the events up to its turn/end.
func (a *agentConn) turn(text string) []event {
	a.t.Helper()
	b, _ := json.Marshal(map[string]any{"type": "inject", "text": text, "wake": true})
	a.send(string(b))
	from, want := len(a.frames), a.ends+1
	a.until(fmt.Sprintf("turn/end of the turn woken by %.60q", text), func(string) bool { return a.ends == want })
	var evs []event
	for _, f := range a.frames[from:] {
		var ev event
		if json.Unmarshal([]byte(f), &ev) == nil {
			evs = append(evs, ev)
		}
	}
	return evs
}

// setModel sends set_model and returns the error frame it drew, or "" once the
// agent's state item holds spec (a successful set_model answers nothing).
func (a *agentConn) setModel(role, spec string) string {
	a.t.Helper()
	b, _ := json.Marshal(map[string]any{"type": "set_model", "role": role, "spec": spec})
	a.send(string(b))
	a.send(`{"type":"cancel"}`)
	// Either an error frame comes back, or the state item changes; a cancel (no turn
	// runs, so it answers not_running) paces the polling of the table.
	for deadline := time.Now().Add(hang.Bound()); time.Now().Before(deadline); {
		var answer string
		a.until("an error frame answering set_model or cancel", func(f string) bool {
			if strings.Contains(f, `"type":"error"`) && !strings.Contains(f, `"code":"not_running"`) {
				answer = f
			}
			return strings.Contains(f, `"type":"error"`)
		})
		if answer != "" {
			return answer
		}
		if a.modelMain() == spec {
			return ""
		}
		a.send(`{"type":"cancel"}`)
	}
	a.t.Fatalf("set_model %s %s: neither an error nor a change", role, spec)
	return ""
}

// modelMain reads the agent's main model from its state item.
func (a *agentConn) modelMain() string {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
	defer cancel()
	out, err := dynamolocal.Client(a.dev.ready.DynamoDBEndpoint).GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(a.dev.ready.Tables["AgentsTable"]),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "agent#" + a.id}, "sk": &types.AttributeValueMemberS{Value: "state"}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		a.t.Fatal(err)
	}
	v, _ := out.Item["model_main"].(*types.AttributeValueMemberS)
	if v == nil {
		return ""
	}
	return v.Value
}

func lastEnd(t *testing.T, evs []event) event {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == "turn/end" {
			return evs[i]
		}
	}
	t.Fatalf("no turn/end in %+v", evs)
	return event{}
}

func chunks(evs []event) (n int, text string) {
	for _, ev := range evs {
		if ev.Type == "assistant/chunk" {
			n++
			text += ev.Payload.Text
		}
	}
	return n, text
}

func toolResult(t *testing.T, evs []event) event {
	t.Helper()
	for _, ev := range evs {
		if ev.Type == "tool/result" {
			return ev
		}
	}
	t.Fatalf("no tool/result in %+v", evs)
	return event{}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Through a rename, so terret dev never reads a half-written file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// buildMCPServer builds testdata/mcpserver, a stdio MCP server whose tool "whoami"
// returns its process id.
func buildMCPServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcpserver")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/mcpserver").CombinedOutput(); err != nil {
		t.Fatalf("go build mcpserver: %v\n%s", err, out)
	}
	return bin
}

func profileJSON(system, baseURL, mcpBin string) string {
	return fmt.Sprintf(`{
  "system": %q,
  "models": {"main": "acme/gpt-test", "titler": "scripted"},
  "allowed_models": ["acme/gpt-*", "local/*", "bedrock/*", "scripted"],
  "providers": {
    "acme":  {"kind": "openai", "base_url": %q, "api_key_env": "ACME_KEY"},
    "local": {"kind": "openai", "base_url": %q, "api_key_env": "LOCAL_KEY"},
    "bedrock": {"max_tokens": 1024}
  },
  "tools": [
    {"name": "echo"},
    {"name": "lookup", "kind": "mcp", "spec": {"command": [%q]}}
  ]
}`, system, baseURL, baseURL, mcpBin)
}

// TestOwnAgent runs the real binary with a profile of the user's own: terret.json in
// the working directory (no --profile), an OpenAI-compatible model server of the
// test's, keys from the environment and from .env, and a stdio MCP server built here.
// It checks what reaches the model server, the streamed reply, set_model's errors,
// the MCP server surviving a kill, hot reload (good and broken edits), `terret agent`
// put/get/list/delete with each validation error, and that no key leaks.
func TestOwnAgent(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	mcpBin := buildMCPServer(t)
	dir := t.TempDir()
	base := model.BaseURL()
	writeFile(t, filepath.Join(dir, "terret.json"), profileJSON("You are the support agent of ACME.", base, mcpBin))
	writeFile(t, filepath.Join(dir, ".env"), "# local keys\nLOCAL_KEY=\""+localKey+"\"\n")
	// Bedrock gets the user's own AWS credentials (here from the environment), pointed
	// at a server of the test's that records who signed the request.
	var bedrockAuth struct {
		sync.Mutex
		v []string
	}
	bedrockSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bedrockAuth.Lock()
		bedrockAuth.v = append(bedrockAuth.v, r.Header.Get("Authorization"))
		bedrockAuth.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amzn-ErrorType", "ValidationException")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"message":"The provided model identifier is invalid."}`)
	}))
	defer bedrockSrv.Close()
	p := startOwnDev(t, dir, []string{"ACME_KEY=" + acmeKey,
		"AWS_ACCESS_KEY_ID=AKIATERRETUSER", "AWS_SECRET_ACCESS_KEY=user-secret", "AWS_REGION=us-east-1",
		"AWS_ENDPOINT_URL_BEDROCK_RUNTIME=" + bedrockSrv.URL, "AWS_MAX_ATTEMPTS=1"})
	if !strings.Contains(p.stdout.String(), "terret dev: profile terret.json") {
		t.Fatalf("banner does not name the profile:\n%s", p.stdout)
	}
	a := p.connect(t, "acme1")

	// 1. The profile's model: system prompt, tools and key reach it; the reply streams.
	evs := a.turn("hi")
	if end := lastEnd(t, evs); end.Payload.Status != "completed" {
		t.Fatalf("turn ended %+v, want completed\nstderr:\n%s", end.Payload, p.stderr)
	}
	req := model.Request(t, 1)
	if got, want := req.System(), "You are the support agent of ACME."; got != want {
		t.Errorf("system prompt = %q, want %q", got, want)
	}
	if got, want := strings.Join(req.Tools(), ","), "echo,whoami"; got != want {
		t.Errorf("tools = %s, want %s", got, want)
	}
	if got, want := req.Auth, "Bearer "+acmeKey; got != want {
		t.Errorf("Authorization = %q, want %q", got, want)
	}
	if req.Body.Model != "gpt-test" || !req.Body.Stream {
		t.Errorf("model %q stream %t, want gpt-test, true", req.Body.Model, req.Body.Stream)
	}
	if n, text := chunks(evs); n == 0 || text != "Hello world" {
		t.Errorf("assistant/chunk: %d events, text %q; want >= 1, \"Hello world\"", n, text)
	}

	// 2. A second provider of the same kind, its key from .env.
	if f := a.setModel("main", "local/gpt-local"); f != "" {
		t.Fatalf("set_model local/gpt-local: %s", f)
	}
	a.turn("again")
	if req := model.Request(t, 2); req.Auth != "Bearer "+localKey || req.Body.Model != "gpt-local" {
		t.Errorf("second provider: Authorization %q model %q, want the .env key and gpt-local", req.Auth, req.Body.Model)
	}

	// 3. set_model says whether the role or the spec was wrong, and why.
	for _, c := range []struct{ role, spec, want string }{
		{"main", "openai/gpt-4o-mini", `set_model: spec \"openai/gpt-4o-mini\": no provider \"openai\" is configured (configured: acme, bedrock, local, scripted)`},
		{"boss", "scripted", `set_model: role \"boss\": unknown role (main, titler, compactor)`},
		{"main", "acme", `set_model: field \"spec\" must be \"provider/model\" or \"scripted\"`},
		{"main", "acme/o1", `set_model: spec \"acme/o1\": not among the models this agent's profile allows (allowed_models)`},
	} {
		f := a.setModel(c.role, c.spec)
		if !strings.Contains(f, `"code":"bad_frame"`) || !strings.Contains(f, c.want) {
			t.Errorf("set_model %s %s answered %s, want bad_frame with %s", c.role, c.spec, f, c.want)
		}
	}

	// 4. The stdio MCP server, called by a scripted turn, survives a kill.
	if f := a.setModel("main", "scripted"); f != "" {
		t.Fatalf("set_model scripted: %s", f)
	}
	script := `{"script":[{"call":[{"tool":"whoami","args":{}}]},{"say":"done"}]}`
	pid1 := whoami(t, a.turn(script))
	if !strings.Contains(p.stderr.String(), fmt.Sprintf("mcpserver: started pid %d", pid1)) {
		t.Errorf("the MCP server's stderr is not on the console:\n%s", p.stderr)
	}
	if pid2 := whoami(t, a.turn(script)); pid2 != pid1 {
		t.Errorf("second call answered by pid %d, want the shared server %d", pid2, pid1)
	}
	if err := syscall.Kill(pid1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// terret dev is the server's parent: the pid is gone once it has reaped the
	// process, which it does when it forgets the dead server's session.
	hang.Until(t, fmt.Sprintf("the killed MCP server %d reaped", pid1), func() bool { return syscall.Kill(pid1, 0) != nil })
	pid3 := whoami(t, a.turn(script))
	if pid3 == pid1 || pid3 == 0 {
		t.Errorf("after the kill the call was answered by pid %d, want a new server (old %d)", pid3, pid1)
	}

	// 5. An edited profile applies from the next turn; a broken edit keeps the last good one.
	writeFile(t, filepath.Join(dir, "terret.json"), profileJSON("You are v2.", base, mcpBin))
	if f := a.setModel("main", "acme/gpt-test"); f != "" {
		t.Fatalf("set_model acme/gpt-test: %s", f)
	}
	a.turn("v2?")
	if got := model.Request(t, 3).System(); got != "You are v2." {
		t.Errorf("after the edit the system prompt is %q, want %q", got, "You are v2.")
	}
	writeFile(t, filepath.Join(dir, "terret.json"), `{"system":"broken","tools":[{"name":"x","kind":"weird"}]}`)
	if end := lastEnd(t, a.turn("still v2?")); end.Payload.Status != "completed" {
		t.Errorf("turn after a broken edit ended %+v", end.Payload)
	}
	if got := model.Request(t, 4).System(); got != "You are v2." {
		t.Errorf("after a broken edit the system prompt is %q, want the last good %q", got, "You are v2.")
	}
	p.stderr.waitFor(t, "profile file rejected", `tools[0].kind: unknown tool kind \"weird\"`)
	writeFile(t, filepath.Join(dir, "terret.json"), profileJSON("You are v2.", base, mcpBin))

	// 6. A failed turn prints its reason on the console.
	if f := a.setModel("main", "scripted"); f != "" {
		t.Fatalf("set_model scripted: %s", f)
	}
	a.turn(`{"script":[{"fail":"model exploded"}]}`)
	p.stderr.waitFor(t, "turn failed", "model exploded")

	// A Bedrock turn is signed with the user's credentials, not DynamoDB Local's; its
	// failure is on the console.
	if f := a.setModel("main", "bedrock/no.such-model"); f != "" {
		t.Fatalf("set_model bedrock: %s", f)
	}
	if end := lastEnd(t, a.turn("bedrock?")); end.Payload.Status != "failed" || !strings.Contains(end.Payload.Reason, "model identifier is invalid") {
		t.Errorf("bedrock turn ended %+v, want failed with the server's message", end.Payload)
	}
	bedrockAuth.Lock()
	auths := strings.Join(bedrockAuth.v, "\n")
	bedrockAuth.Unlock()
	if !strings.Contains(auths, "Credential=AKIATERRETUSER/") || strings.Contains(auths, "Credential=local/") {
		t.Errorf("Bedrock requests signed with %q, want the user's AKIATERRETUSER", auths)
	}
	p.stderr.waitFor(t, "model identifier is invalid")

	// 7. terret agent put/get/list/delete, and quota.
	testAgentCommands(t, p, model)
	testQuotaCommand(t, p)

	// 8. No key anywhere but the model server.
	all := p.stdout.String() + p.stderr.String() + strings.Join(a.frames, "\n")
	// The whole session log, replayed to a new subscriber: it is complete once the
	// policy/updated appended after the subscribe arrives.
	policies := func(frames []string) (n int) {
		for _, f := range frames {
			if strings.Contains(f, `"type":"policy/updated"`) {
				n++
			}
		}
		return n
	}
	want := policies(a.frames) + 1
	replay := p.connect(t, "acme1")
	replay.send(`{"type":"set_policy","patterns":["*"]}`)
	replay.until(fmt.Sprintf("the replayed log's %d policy/updated events", want), func(string) bool { return policies(replay.frames) == want })
	all += strings.Join(replay.frames, "\n")
	for _, k := range []string{acmeKey, localKey} {
		if strings.Contains(all, k) {
			t.Errorf("key %s leaked into the console or the session log", k)
		}
	}
}

func whoami(t *testing.T, evs []event) int {
	t.Helper()
	res := toolResult(t, evs)
	var out struct {
		PID int `json:"pid"`
	}
	if res.Payload.Error != "" || json.Unmarshal(res.Payload.Result, &out) != nil || out.PID == 0 {
		t.Fatalf("whoami result %s error %q, want a pid", res.Payload.Result, res.Payload.Error)
	}
	return out.PID
}

func testAgentCommands(t *testing.T, p *ownDev, model *openaitest.Server) {
	t.Helper()
	own := filepath.Join(p.dir, "own.json")
	writeFile(t, own, `{"system": "You are OWN.", "models": {"main": "local/own-model"}}`)
	out, errOut, code := p.run(t, "agent", "put", "--agent", "own1", "--profile", own)
	if code != 0 {
		t.Fatalf("agent put: exit %d\n%s%s", code, out, errOut)
	}
	a := p.connect(t, "own1")
	if end := lastEnd(t, a.turn("who are you?")); end.Payload.Status != "completed" {
		t.Fatalf("own1's turn ended %+v", end.Payload)
	}
	req := model.Last(t)
	if req.System() != "You are OWN." || req.Body.Model != "own-model" || req.Auth != "Bearer "+localKey {
		t.Errorf("own1's turn sent system %q model %q auth %q; want its stored profile's", req.System(), req.Body.Model, req.Auth)
	}
	if got, want := strings.Join(req.Tools(), ","), "echo,whoami"; got != want {
		t.Errorf("own1's tools = %s, want the default's %s (merged)", got, want)
	}

	out, _, code = p.run(t, "agent", "get", "--agent", "own1")
	var got map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["system"] != "You are OWN." {
		t.Errorf("agent get = %q (exit %d), want the stored profile", out, code)
	}
	if strings.Contains(out, acmeKey) || strings.Contains(out, localKey) {
		t.Errorf("agent get shows a key: %s", out)
	}
	if out, _, code = p.run(t, "agent", "list"); code != 0 || out != "own1\n" {
		t.Errorf("agent list = %q (exit %d), want own1", out, code)
	}

	// Each validation error: exit 1, FILE: PATH: PROBLEM, nothing stored.
	bad := filepath.Join(p.dir, "bad.json")
	for _, c := range []struct{ profile, want string }{
		{`{"sistem": "x"}`, `sistem: unknown key`},
		{`{"tools": [{"name": "x", "kind": "weird"}]}`, `tools[0].kind: unknown tool kind "weird"`},
		{`{"tools": [{"name": "nope"}]}`, `tools[0].name: no builtin tool "nope"`},
		{`{"tools": [{"name": "l", "kind": "mcp", "spec": {"command": [""]}}]}`, `tools[0].spec.command: the program (first element) is empty`},
		{`{"tools": [{"name": "l", "kind": "mcp", "spec": {"url": "ftp://x"}}]}`, `tools[0].spec.url: must be an absolute http(s) URL`},
		{`{"providers": {"acme2": {"kind": "openai", "base_url": "ftp://x"}}}`, `providers.acme2.base_url: must be an absolute http(s) URL`},
		{`{"providers": {"acme2": {"base_url": "http://x/v1"}}}`, `providers.acme2.kind: required`},
		{`{"providers": {"acme2": {"kind": "anthropic"}}}`, `providers.acme2.kind: unknown provider kind "anthropic"`},
		{`{"providers": {"acme2": {"kind": "openai", "base_url": "http://x/v1", "api_key": "sk-x"}}}`, `providers.acme2.api_key: a key is never written in a profile`},
		{`{"providers": {"acme2": {"kind": "openai", "base_url": "http://x/v1", "api_key_env": "TERRET_TEST_UNSET_KEY"}}}`, `providers.acme2.api_key_env: environment variable TERRET_TEST_UNSET_KEY is not set`},
		{`{"models": {"main": "openai/gpt-4o-mini"}}`, `models.main: no provider "openai" is configured (configured: acme, bedrock, local, scripted)`},
		{`{"models": {"boss": "scripted"}}`, `models.boss: unknown model role`},
		{`{"tools": [{"name": "echo", "concurrency": "sometimes"}]}`, `tools[0].concurrency: "sometimes" is not parallel or serial`},
		{`{"quotas": {"turns_per_day": -1}}`, `quotas.turns_per_day: must be 0 (no cap) or more, got -1`},
		{`{"allowed_models": ["acme/*", ""]}`, `allowed_models[1]: empty glob`},
		{`{"tools": [{"name": "d", "kind": "mcp", "spec": {"url": "http://x/mcp", "headers": {"Authorization": "Bearer sk-literal"}}}]}`, `tools[0].spec.headers.Authorization: a secret is never written in a profile`},
		{`{"tools": [{"name": "d", "kind": "mcp", "spec": {"url": "http://x/mcp", "headers_env": {"Authorization": "TERRET_TEST_UNSET_KEY"}}}]}`, `tools[0].spec.headers_env.Authorization: environment variable TERRET_TEST_UNSET_KEY is not set`},
		{`{"quotas": {"turns_per_hour": 5}}`, `quotas.turns_per_hour: unknown quota (turns_per_day, tokens_per_month, turn_tokens, turn_model_calls, schedules)`},
		{`{"rules": [{"tool": "*", "when": "args.path ==", "effect": "deny"}]}`, `rules[0].when: column 13: Syntax error: mismatched input '<EOF>'`},
		{`{"rules": [{"tool": "*", "when": "size(args) > 0", "effect": "allow"}, {"tool": "*", "when": "path == 1", "effect": "deny"}]}`, `rules[1].when: column 1: undeclared reference to 'path'`},
		{`{"rules": [{"tool": "*", "effect": "maybe"}]}`, `rules[0].effect: want "allow", "ask" or "deny", got "maybe"`},
		{`{"tools": [{"name": "echo", "default_effect": "later"}]}`, `tools[0].default_effect: want "allow", "ask" or "deny", got "later"`},
		{`{"webhooks": [{"url": "https://10.0.0.1/hook", "events": ["turn/end"], "secret_env": "TERRET_TEST_UNSET_KEY"}]}`, `webhooks[0].url: webhook: address refused: 10.0.0.1 is a private address`},
		{`{"webhooks": [{"url": "https://hooks.example.com/", "events": ["Turn/End"], "secret_env": "TERRET_TEST_UNSET_KEY"}]}`, `webhooks[0].events[0]: webhook: invalid event glob`},
		{`{"webhooks": [{"url": "https://hooks.example.com/", "events": ["*"], "secret_env": "TERRET_TEST_UNSET_KEY"}]}`, `webhooks[0].secret_env: environment variable TERRET_TEST_UNSET_KEY is not set`},
		{`{"webhooks": [{"url": "https://hooks.example.com/", "events": ["*"], "secret": "whsec_x"}]}`, `webhooks[0].secret: a secret is never written in a profile`},
		{`not json`, `bad.json: not a JSON object`},
	} {
		writeFile(t, bad, c.profile)
		out, errOut, code := p.run(t, "agent", "put", "--agent", "bad1", "--profile", bad)
		if code != 1 || !strings.Contains(errOut, bad+": ") || !strings.Contains(errOut, c.want) {
			t.Errorf("agent put %s: exit %d, stderr %q; want exit 1 naming %s and %q", c.profile, code, errOut, bad, c.want)
		}
		if out != "" {
			t.Errorf("agent put %s printed %q on stdout", c.profile, out)
		}
	}
	if _, errOut, code := p.run(t, "agent", "get", "--agent", "bad1"); code != 1 || !strings.Contains(errOut, "has no profile of its own") {
		t.Errorf("a refused put stored something: agent get bad1 exit %d %q", code, errOut)
	}
	if _, errOut, code := p.run(t, "agent", "put", "--agent", "bad1"); code != 2 || !strings.Contains(errOut, "--profile is required") {
		t.Errorf("agent put without --profile: exit %d %q, want 2 naming --profile", code, errOut)
	}

	if out, _, code = p.run(t, "agent", "delete", "--agent", "own1"); code != 0 {
		t.Errorf("agent delete = %q exit %d", out, code)
	}
	if _, _, code = p.run(t, "agent", "get", "--agent", "own1"); code != 1 {
		t.Errorf("agent get after delete: exit %d, want 1", code)
	}
	if out, _, _ = p.run(t, "agent", "list"); out != "" {
		t.Errorf("agent list after delete = %q, want nothing", out)
	}
	// The next turn runs with the default profile again.
	a.turn("and now?")
	req = model.Last(t)
	if req.System() != "You are v2." || req.Body.Model != "gpt-test" || req.Auth != "Bearer "+acmeKey {
		t.Errorf("after delete own1 sent system %q model %q, want the default's", req.System(), req.Body.Model)
	}
}

// TestDevRefusesBadProfile: `terret dev --profile FILE` with a profile that does not
// pass exits 1, naming the file and the JSON path of each problem, without quoting
// the key written in it.
func TestDevRefusesBadProfile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "agent.json"), `{"models": {"main": "openai/gpt-4o-mini"},
	  "providers": {"acme": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "api_key": "sk-WRITTEN-IN-FILE"}},
	  "tools": [{"name": "x", "kind": "weird"}],
	  "webhooks": [{"url": "http://192.168.1.10/hook", "events": ["turn/end"], "secret_env": "TERRET_TEST_UNSET_KEY"}]}`)
	cmd := exec.Command(terretBin(t), "dev", "--addr", "127.0.0.1:0", "--profile", "agent.json",
		"--dynamodb-endpoint", dynamotest.Endpoint(t), "--table-prefix", dynamotest.UniqueName("bad")+"-")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TERRET_STATE_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("terret dev with a bad profile: %v, want exit 1\n%s", err, out)
	}
	for _, want := range []string{
		`agent.json: providers.acme.api_key: a key is never written in a profile`,
		`agent.json: models.main: no provider "openai" is configured (configured: acme, bedrock, scripted)`,
		`agent.json: tools[0].kind: unknown tool kind "weird"`,
		`agent.json: webhooks[0].url: webhook: invalid url: http only to a loopback host`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "sk-WRITTEN-IN-FILE") {
		t.Errorf("the key written in the file was printed:\n%s", out)
	}
}
