package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/devstate"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
)

// TestTokenHelp: `terret token -h` lists every subcommand, list included.
func TestTokenHelp(t *testing.T) {
	var out, errOut strings.Builder
	if code := run(t.Context(), []string{"token", "-h"}, &out, &errOut); code != 0 {
		t.Fatalf("token -h: exit %d, stderr %q", code, errOut.String())
	}
	for _, want := range []string{"usage: terret token create|list|rotate|revoke --agent ID", "\n  list ", "\n  create ", "\n  rotate ", "\n  revoke "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("token -h lacks %q:\n%s", want, out.String())
		}
	}
}

// TestExplainEndDevToken: a run that took its own dev token and was ended by a rotation
// says that running it again takes a fresh one.
func TestExplainEndDevToken(t *testing.T) {
	got := explainEnd(client.ErrUnauthorized, target{agent: "a1", devToken: true})
	want := "unauthorized: agent a1's tokens were rotated or revoked (or its session deleted) since this connected, which ended it. " +
		"Run this again: without --token it takes a fresh dev token"
	if got.Error() != want || !errors.Is(got, client.ErrUnauthorized) {
		t.Fatalf("explainEnd = %q, want %q wrapping ErrUnauthorized", got, want)
	}
}

// TestDevHints runs `bin/terret dev` as make dev starts it (a relative path, in a
// working directory of the test's) with its stdout on a pipe, and checks what the
// console tells a newcomer: the token hint names bin/terret; an MCP server's stderr
// lines carry its name; a failed turn is one line, after its "turn started"; a rejected
// profile edit names the profile's own path (providers…), with no "tools:" before it; a
// tail that took a dev token, ended by a rotation, says running it again takes a fresh
// one. Then, as after `terret dev | tee` and Ctrl-C, the pipe's reader goes away first:
// terret dev still stops cleanly (exit 0, not killed by SIGPIPE) and removes its
// instance record.
func TestDevHints(t *testing.T) {
	t.Parallel()
	mcpBin := buildMCPServer(t)
	work, state := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(terretBin(t), filepath.Join(work, "bin", "terret")); err != nil {
		t.Fatal(err)
	}
	good := fmt.Sprintf(`{"system":"hints","tools":[{"name":"echo"},{"name":"lookup","kind":"mcp","spec":{"command":[%q]}}]}`, mcpBin)
	writeFile(t, filepath.Join(work, "terret.json"), good)

	ready := filepath.Join(state, "ready.json")
	env := append(os.Environ(), "TERRET_STATE_DIR="+state)
	cmd := exec.Command("bin/terret", "dev", "--addr", "127.0.0.1:0", "--ready-file", ready,
		"--dynamodb-endpoint", dynamotest.Endpoint(t), "--table-prefix", dynamotest.UniqueName("hints")+"-")
	cmd.Dir, cmd.Env = work, env
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &ownDev{cmd: cmd, dir: work, env: env, stdout: &syncBuf{}, stderr: &syncBuf{}, stateDir: state}
	cmd.Stdout, cmd.Stderr = pw, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	copied := make(chan struct{})
	go func() { io.Copy(p.stdout, pr); close(copied) }()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		pr.Close()
	})
	hang.UntilNil(t, "terret dev's ready file", func() error {
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &p.ready) == nil {
			return nil
		}
		return fmt.Errorf("not ready\nstdout:\n%s\nstderr:\n%s", p.stdout, p.stderr)
	})

	p.stdout.waitFor(t, "terret dev: create a token with: bin/terret token create --agent AGENT_ID\n")

	// A turn that calls the MCP server's tool, then fails.
	agent := dynamotest.UniqueName("h")
	a := p.connect(t, agent)
	if end := lastEnd(t, a.turn(`{"script":[{"call":[{"tool":"whoami","args":{}}]},{"fail":"model exploded"}]}`)); end.Payload.Status != "failed" {
		t.Fatalf("turn ended %+v, want failed", end.Payload)
	}
	// A broken edit, then a turn that reads it, rejects it and runs on the last good
	// profile; its "turn ended" line comes after every console line of the first turn.
	writeFile(t, filepath.Join(work, "terret.json"),
		`{"models":{"main":"acme/m"},"providers":{"acme":{"kind":"openai","base_url":"not a url"}}}`)
	if end := lastEnd(t, a.turn("hello")); end.Payload.Status != "completed" {
		t.Fatalf("turn after a broken edit ended %+v", end.Payload)
	}
	console := p.stderr.waitFor(t, "status=completed")
	lines := strings.Split(console, "\n")
	find := func(what string, match func(string) bool) []int {
		var at []int
		for i, l := range lines {
			if match(l) {
				at = append(at, i)
			}
		}
		return at
	}
	started := find("turn started", func(l string) bool { return strings.Contains(l, " turn started agent_id="+agent) })
	failed := find("turn failed", func(l string) bool { return strings.Contains(l, "turn failed") })
	if len(failed) != 1 || len(started) == 0 || failed[0] < started[0] || !strings.Contains(lines[failed[0]], `reason="model exploded"`) {
		t.Errorf("want one turn failed line with its reason, after turn started (started at lines %v, failed at %v):\n%s", started, failed, console)
	}
	if mcp := find("mcp", func(l string) bool { return strings.HasPrefix(l, "mcp lookup: mcpserver: started pid ") }); len(mcp) != 1 {
		t.Errorf("want the MCP server's stderr line once, after \"mcp lookup: \":\n%s", console)
	}
	rejected := find("rejected", func(l string) bool { return strings.Contains(l, "profile file rejected") })
	if len(rejected) != 1 || !strings.Contains(lines[rejected[0]], `problems="providers.acme.base_url: must be an absolute http(s) URL"`) ||
		strings.Contains(console, "tools: invalid agent profile") {
		t.Errorf("want one rejected-edit line naming providers.acme.base_url first:\n%s", console)
	}
	writeFile(t, filepath.Join(work, "terret.json"), good)

	// tail with no --token takes a dev token; a rotation ends it with the hint.
	tailed := dynamotest.UniqueName("h")
	tail := exec.Command("bin/terret", "tail", "--agent", tailed)
	tail.Dir, tail.Env = work, env
	tailOut, tailErr := &syncBuf{}, &syncBuf{}
	tail.Stdout, tail.Stderr = tailOut, tailErr
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	tailDone := make(chan error, 1)
	go func() { tailDone <- tail.Wait() }()
	t.Cleanup(func() { tail.Process.Kill() })
	tailOut.waitFor(t, `"seq":0,`)
	if out, errOut, code := p.run(t, "token", "rotate", "--agent", tailed); code != 0 {
		t.Fatalf("token rotate: exit %d %s %s", code, out, errOut)
	}
	var ee *exec.ExitError
	if err := hangRecv(t, "tail's exit after the rotation", tailDone); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("tail after rotation: %v, want exit 1; stderr %q", err, tailErr)
	}
	if want := "terret tail: " + explainEnd(client.ErrUnauthorized, target{agent: tailed, devToken: true}).Error() + "\n"; tailErr.String() != want {
		t.Errorf("tail after rotation said %q, want %q", tailErr, want)
	}

	// `terret dev | tee`, Ctrl-C: the reader goes first, then the signal.
	pr.Close()
	<-copied
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := hangRecv(t, "terret dev's exit after SIGINT with its stdout's reader gone", exited); err != nil {
		t.Fatalf("terret dev with a closed stdout pipe exited %v after SIGINT, want 0 (SIGPIPE must not kill the stop)\nstderr:\n%s", err, p.stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(devstate.Dir(state), "*.json")); len(left) != 0 {
		t.Errorf("instance records left after the stop: %v", left)
	}
}

// hangRecv receives from ch, failing t if hang.Bound passes first.
func hangRecv(t *testing.T, what string, ch chan error) error {
	t.Helper()
	var got error
	hang.Until(t, what, func() bool {
		select {
		case got = <-ch:
			return true
		default:
			return false
		}
	})
	return got
}
