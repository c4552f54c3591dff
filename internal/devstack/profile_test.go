package devstack_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/model/openai/openaitest"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/tools"
)

// lockedBuf is a bytes.Buffer safe for the stack's concurrent writers.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestEmulatorProfile: the stack serves the default profile Options.Profile names —
// its system prompt, its model on its own provider, its tools — in whichever mode the
// rig runs. Emulated, the turn runs in the runner's bootstrap, which gets the profile
// as AGENT_PROFILE (the template's AgentProfile parameter) and the key its provider
// names as a variable of its own. The key reaches the model server's Authorization
// header and nothing else: not the stack's log, which carries the functions' own log
// lines, nor the emulator's console.
//
// It sets a variable of the process (t.Setenv), so it does not run in parallel.
func TestEmulatorProfile(t *testing.T) {
	const keyVar = "TERRET_TEST_EMULATED_PROFILE_KEY"
	const key = "sk-emu-7f3a9c0d-SECRET"
	t.Setenv(keyVar, key)
	model := openaitest.New(t)
	file := filepath.Join(t.TempDir(), "agent.json")
	if err := os.WriteFile(file, []byte(`{
  "system": "You are the emulated agent.",
  "models": {"main": "emu/gpt-emu"},
  "providers": {"emu": {"kind": "openai", "base_url": "`+model.BaseURL()+`", "api_key_env": "`+keyVar+`"}},
  "tools": [{"name": "echo"}]
}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs, console lockedBuf
	o := devstack.Options{Profile: file, Logger: service.Logger(&logs, "debug")}
	if emulated() {
		o.LambdaEmulator = emulatorOptions(t)
		o.LambdaEmulator.Console = &console
	}
	e := startRuntimeStack(t, o)
	runFlows(t, e, flow{"own agent", func(a *agentConn) {
		a.inject("who are you?", true)
		id := a.startTurn("who are you?")
		// The provider's deltas arrive as the runtime reads them: one chunk or several.
		var text strings.Builder
		for final := false; !final; {
			ev := a.expect("assistant/chunk")
			text.WriteString(ev.str("text"))
			final = string(ev.fields["final"]) == "true"
		}
		if text.String() != openaitest.Reply {
			a.fatalf("answer %q, want the model server's %q", text.String(), openaitest.Reply)
		}
		a.follow(id, endW("completed", ""), titledW("who are you?"))
		a.settled(1)
	}})
	if t.Failed() {
		t.Logf("stack log:\n%s", strings.ReplaceAll(logs.String(), key, "<KEY>"))
		return
	}
	req := model.Request(t, 1)
	if got, want := req.Auth, "Bearer "+key; got != want {
		t.Errorf("Authorization at the model server %q, want the key of %s", got, keyVar)
	}
	if got, want := req.System(), "You are the emulated agent."; got != want {
		t.Errorf("system prompt %q, want %q", got, want)
	}
	if got, want := req.Body.Model, "gpt-emu"; got != want {
		t.Errorf("model %q, want %q", got, want)
	}
	if got, want := strings.Join(req.Tools(), ","), "echo"; got != want {
		t.Errorf("tools offered %q, want the profile's %q (not the demo tools)", got, want)
	}
	if emu := e.stack.Emulator(); emulated() {
		if n := emu.Stats()["runner"].Invocations; n == 0 {
			t.Errorf("the emulated runner ran %d invocations: the turn ran elsewhere", n)
		}
		// The functions' own lines reach the log: the check below reads them too.
		if !strings.Contains(logs.String(), `"environment":`) {
			t.Errorf("no function's log line in the stack's log:\n%s", logs.String())
		}
	}
	for name, out := range map[string]string{"stack log": logs.String(), "console": console.String()} {
		if strings.Contains(out, key) {
			t.Errorf("the key appears in the %s:\n%s", name, strings.ReplaceAll(out, key, "<KEY>"))
		}
	}
}

// TestProfileRefusedBeforeStart: a default profile that cannot be served fails Start
// with ErrProfile before anything starts — the DynamoDB endpoint given answers
// nothing, and the emulator has nothing built — in process and emulated; one that
// passes in process but not as the functions run it (a command MCP server: TestOwnAgent
// runs one in process) fails with ErrProfileEmulated.
func TestProfileRefusedBeforeStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	command := filepath.Join(dir, "command.json")
	if err := os.WriteFile(command, []byte(`{"tools": [{"name": "lookup", "kind": "mcp", "spec": {"command": ["/bin/true"]}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// Never built or started: the profile fails first.
	emu := &devstack.LambdaEmulator{BuildDir: filepath.Join(dir, "nothing-built"), SkipBuild: true}
	tests := []struct {
		name     string
		file     string
		emulator *devstack.LambdaEmulator
		want     error
		problem  bool // the error lists problems (*tools.ProfileError)
	}{
		{"missing, in process", filepath.Join(dir, "missing.json"), nil, devstack.ErrProfile, false},
		{"missing, emulated", filepath.Join(dir, "missing.json"), emu, devstack.ErrProfile, false},
		{"command MCP server, emulated", command, emu, devstack.ErrProfileEmulated, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := devstack.Start(t.Context(), devstack.Options{Addr: "127.0.0.1:0", DynamoDBEndpoint: "http://127.0.0.1:1",
				Profile: tt.file, LambdaEmulator: tt.emulator, Logger: service.Logger(testLogOut(), "info")})
			var pe *tools.ProfileError
			switch {
			case !errors.Is(err, tt.want):
				t.Fatalf("Start: %v, want %v", err, tt.want)
			case tt.problem != errors.As(err, &pe):
				t.Fatalf("Start: %v: lists problems %t, want %t", err, !tt.problem, tt.problem)
			}
		})
	}
}

// TestEmulatorAdmit: LambdaEmulator.Admit is asked once the profile is read, and its
// error stops Start before anything starts (the DynamoDB endpoint given answers
// nothing; nothing is built); a profile that cannot be served is reported first.
func TestEmulatorAdmit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	refused := errors.New("admit: refused")
	asked := 0
	emu := &devstack.LambdaEmulator{BuildDir: filepath.Join(dir, "nothing-built"), SkipBuild: true,
		Admit: func() error { asked++; return refused }}
	start := func(profile string) error {
		_, err := devstack.Start(t.Context(), devstack.Options{Addr: "127.0.0.1:0", DynamoDBEndpoint: "http://127.0.0.1:1",
			Profile: profile, LambdaEmulator: emu, Logger: service.Logger(testLogOut(), "info")})
		return err
	}
	if err := start(filepath.Join(dir, "missing.json")); !errors.Is(err, devstack.ErrProfile) || asked != 0 {
		t.Fatalf("bad profile: %v (Admit asked %d times), want ErrProfile before Admit", err, asked)
	}
	if err := start(""); !errors.Is(err, refused) || asked != 1 {
		t.Fatalf("Start: %v (Admit asked %d times), want Admit's error, asked once", err, asked)
	}
}
