package ownagent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
)

// The commands of README.md's "Run it", as written there. TestExample runs them, so
// the page cannot drift from what works.
const (
	readmeServe = "make example"
	readmeChat  = "echo 'where is order 1042?' | bin/terret chat --agent support"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lockPort serializes the tests on this machine that need fakemodel's fixed port
// 127.0.0.1:8089 (two checkouts' make test at once).
func lockPort(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "terret-example-8089.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}

// TestExample runs README.md's two commands from the repository's root: `make example`
// (its terret dev told, through EXAMPLE_FLAGS, to use the test's DynamoDB and a free
// port), then the chat line, and checks the turn went model → MCP tool → model: the
// tool's answer, the reply built from it, the MCP server's stderr on the console. Then
// Ctrl-C (SIGINT to make's process group) stops everything it started.
func TestExample(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{readmeServe, readmeChat} {
		if !strings.Contains(string(readme), "\n"+c) {
			t.Fatalf("README.md does not show the command %q on a line of its own", c)
		}
	}
	lockPort(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	ready := filepath.Join(state, "ready.json")
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "TERRET_STATE_DIR", "OPENAI_API_KEY":
		default:
			env = append(env, kv)
		}
	}
	env = append(env, "TERRET_STATE_DIR="+state)

	flags := fmt.Sprintf("EXAMPLE_FLAGS=--addr 127.0.0.1:0 --ready-file %s --dynamodb-endpoint %s --table-prefix %s-",
		ready, dynamotest.Endpoint(t), dynamotest.UniqueName("example"))
	serve := exec.Command("sh", "-c", readmeServe+` "$0"`, flags)
	serve.Dir, serve.Env = root, env
	serve.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	console := &syncBuf{}
	serve.Stdout, serve.Stderr = console, console
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			syscall.Kill(-serve.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	hang.UntilNil(t, "make example's terret dev to write its ready file", func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("make example ended before it was ready: %v\n%s", err, console)
		default:
		}
		var st struct{ Addr string }
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &st) == nil && st.Addr != "" {
			return nil
		}
		return fmt.Errorf("not ready; console:\n%s", console)
	})

	chat := exec.Command("sh", "-c", readmeChat)
	chat.Dir, chat.Env = root, env
	out, err := chat.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s\nconsole:\n%s", readmeChat, err, out, console)
	}
	const status = "order 1042: shipped on 2026-12-01 with DHL"
	got := string(out)
	call := strings.Index(got, `lookup_order {"order_id":"1042"}`)
	result := strings.Index(got, "lookup_order → {\"text\":\""+status)
	reply := strings.Index(got, "The orders system says: "+status)
	done := strings.Index(got, "turn completed")
	if call < 0 || result < call || reply < result || done < reply {
		t.Fatalf("chat did not show the call, its result, the reply and the turn's end, in that order:\n%s\nconsole:\n%s", got, console)
	}
	if !strings.Contains(console.String(), "terret dev: create a token with: bin/terret token create --agent AGENT_ID\n") {
		t.Errorf("terret dev's token hint does not name bin/terret:\n%s", console)
	}
	hang.Until(t, "the MCP server's stderr line on the console", func() bool {
		return strings.Contains(console.String(), `mcp orders: lookup_order "1042"`)
	})

	// Ctrl-C: the terminal signals the foreground process group.
	stopped = true
	if err := syscall.Kill(-serve.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(hang.Bound()):
		syscall.Kill(-serve.Process.Pid, syscall.SIGKILL)
		t.Fatalf("make example did not stop on SIGINT; console:\n%s", console)
	}
	// Nothing it started is left: fakemodel's port is free again, and terret dev
	// removed its instance record.
	hang.UntilNil(t, "every process of make example's group to end", func() error {
		if err := syscall.Kill(-serve.Process.Pid, 0); err == nil {
			return fmt.Errorf("a process of the group is still running")
		}
		return nil
	})
	if recs, _ := filepath.Glob(filepath.Join(state, "dev", "*.json")); len(recs) > 0 {
		t.Errorf("terret dev left its instance record: %v", recs)
	}
}
