package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/devstate"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// terretBin builds the terret command once per test binary.
func terretBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "terret-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "terret")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// devProc is a running `terret dev`.
type devProc struct {
	cmd      *exec.Cmd
	stateDir string
	stdout   *syncBuf
	ready    devState
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// waitFor waits until the buffer holds every string of want, and returns it: console
// lines of turns come from the stream consumer, after the client saw the events.
func (s *syncBuf) waitFor(t *testing.T, want ...string) string {
	t.Helper()
	var got string
	hang.UntilNil(t, "console lines", func() error {
		got = s.String()
		for _, w := range want {
			if !strings.Contains(got, w) {
				return fmt.Errorf("console lacks %q:\n%s", w, got)
			}
		}
		return nil
	})
	return got
}

func startDev(t *testing.T, args ...string) *devProc {
	t.Helper()
	stateDir := t.TempDir()
	ready := filepath.Join(stateDir, "ready.json")
	args = append([]string{"dev", "--addr", "127.0.0.1:0", "--ready-file", ready}, args...)
	cmd := exec.Command(terretBin(t), args...)
	cmd.Env = append(os.Environ(), "TERRET_STATE_DIR="+stateDir)
	p := &devProc{cmd: cmd, stateDir: stateDir, stdout: &syncBuf{}}
	cmd.Stdout = p.stdout
	stderr := &syncBuf{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	hang.UntilNil(t, "terret dev's ready file", func() error {
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &p.ready) == nil {
			return nil
		}
		return fmt.Errorf("not ready\nstdout:\n%s\nstderr:\n%s", p.stdout, stderr)
	})
	return p
}

// run runs a terret command against the dev process's state directory.
func (p *devProc) run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(terretBin(t), args...)
	cmd.Env = append(os.Environ(), "TERRET_STATE_DIR="+p.stateDir)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

func (p *devProc) wsURL(agent string) string {
	return strings.Replace(p.ready.WSURL, "{agent_id}", agent, 1)
}

func readFrame(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read a frame: %v", err)
	}
	return string(b)
}

// TestDevCommand runs the real binary: ready file and banner, token create over the
// state file, a connection served end to end, rotation dropping it, usage, and a clean
// stop on SIGTERM.
func TestDevCommand(t *testing.T) {
	t.Parallel()
	p := startDev(t, "--dynamodb-endpoint", dynamotest.Endpoint(t), "--table-prefix", dynamotest.UniqueName("c")+"-")
	banner := regexp.MustCompile(`(?m)^terret dev: listening on ws://127\.0\.0\.1:\d+/agents/\{agent_id\}/ws$`)
	if !banner.MatchString(p.stdout.String()) {
		t.Fatalf("banner missing:\n%s", p.stdout)
	}
	if !strings.HasPrefix(p.ready.WSURL, "ws://127.0.0.1:") || p.ready.DynamoDBEndpoint == "" || p.ready.Region == "" {
		t.Fatalf("ready file %+v lacks ws_url, dynamodb_endpoint or region", p.ready)
	}
	out, errOut, code := p.run(t, "token", "create", "--agent", "a1")
	tok := strings.TrimSpace(out)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.HasPrefix(tok, "tt_") {
		t.Fatalf("token create = %q (stderr %q, exit %d), want one token line", out, errOut, code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
	defer cancel()
	c, _, err := websocket.Dial(ctx, p.wsURL("a1"), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if f := readFrame(t, c); !strings.Contains(f, `"type":"hello"`) {
		t.Fatalf("first frame %s", f)
	}
	c.Write(ctx, websocket.MessageText, []byte(`{"type":"inject","text":"hi there","wake":true}`))
	c.Write(ctx, websocket.MessageText, []byte(`{"type":"subscribe","from_seq":0}`))
	var reply strings.Builder
	for !strings.Contains(readFrameUntil(t, c, &reply), `"type":"turn/end"`) {
	}
	if !strings.Contains(reply.String(), `"status":"completed"`) {
		t.Fatalf("turn did not complete: %s", reply.String())
	}
	// The turn is metered by the runner's release, the write after turn/end: the count
	// shows once that write is in, which turn/end's arrival does not wait for.
	counted := func(out string) bool {
		return regexp.MustCompile(`(?m)^turns\s+1$`).MatchString(out) &&
			regexp.MustCompile(`(?m)^turns today\s+1 \(\d{4}-\d\d-\d\d UTC, against turns_per_day\)$`).MatchString(out)
	}
	hang.Until(t, "usage counting the turn", func() bool {
		out, errOut, code = p.run(t, "usage", "--agent", "a1")
		return code != 0 || counted(out)
	})
	if code != 0 || !counted(out) {
		t.Fatalf("usage = %q (stderr %q, exit %d), want turns 1 and turns today 1", out, errOut, code)
	}
	out, _, code = p.run(t, "token", "rotate", "--agent", "a1")
	if code != 0 || !strings.HasPrefix(out, "tt_") {
		t.Fatalf("token rotate = %q, %d", out, code)
	}
	for {
		f := readFrame(t, c)
		if strings.Contains(f, `"type":"error"`) {
			if !strings.Contains(f, `"code":"unauthorized"`) {
				t.Fatalf("error frame %s, want unauthorized", f)
			}
			break
		}
	}
	if out, _, code = p.run(t, "token", "revoke", "--agent", "a1"); code != 0 || out != "" {
		t.Fatalf("token revoke = %q, %d; want no output", out, code)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("terret dev exited with %v after SIGTERM", err)
		}
	case <-time.After(hang.Bound()):
		t.Fatal("terret dev did not stop on SIGTERM")
	}
	if left, _ := filepath.Glob(filepath.Join(devstate.Dir(p.stateDir), "*.json")); len(left) != 0 {
		t.Fatalf("state records left behind: %v", left)
	}
	if _, _, code := p.run(t, "token", "create", "--agent", "a1"); code == 0 {
		t.Fatal("token create succeeded with no terret dev running")
	}
}

func readFrameUntil(t *testing.T, c *websocket.Conn, all *strings.Builder) string {
	t.Helper()
	f := readFrame(t, c)
	all.WriteString(f + "\n")
	return f
}

// TestDevStartsDynamoDBLocal: without --dynamodb-endpoint, terret dev starts DynamoDB
// Local itself and stops it on SIGINT.
func TestDevStartsDynamoDBLocal(t *testing.T) {
	t.Parallel()
	dynamotest.Endpoint(t) // skip (or fail under CI) where DynamoDB Local cannot run
	p := startDev(t)
	endpoint := p.ready.DynamoDBEndpoint
	host := strings.TrimPrefix(endpoint, "http://")
	if c, err := net.DialTimeout("tcp", host, time.Second); err != nil {
		t.Fatalf("DynamoDB Local at %s not reachable: %v", endpoint, err)
	} else {
		c.Close()
	}
	out, _, code := p.run(t, "token", "create", "--agent", "x")
	if code != 0 || !strings.HasPrefix(out, "tt_") {
		t.Fatalf("token create against the started DynamoDB Local = %q, %d", out, code)
	}
	// Its database is private: a client with the fixed local key (anyone on the
	// network) sees none of its tables; the record's key does, and the record is 0600.
	if p.ready.AccessKeyID == "" {
		t.Fatal("the ready file names no access key for the started DynamoDB Local")
	}
	lt, err := dynamolocal.Client(endpoint).ListTables(context.Background(), &dynamodb.ListTablesInput{})
	if err != nil || len(lt.TableNames) != 0 {
		t.Fatalf("the fixed local key sees tables %v (%v), want none", lt, err)
	}
	own, err := dynamolocal.ClientWith(endpoint, devCredentials(p.ready)).ListTables(context.Background(), &dynamodb.ListTablesInput{})
	if err != nil || len(own.TableNames) != 3 {
		t.Fatalf("the instance's key sees %v (%v), want its 3 tables", own, err)
	}
	recs, err := devstate.List(p.stateDir)
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %v %v", recs, err)
	}
	if fi, err := os.Stat(filepath.Join(devstate.Dir(p.stateDir), fmt.Sprint(recs[0].PID)+".json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record file: %v %v, want mode 0600", err, fi)
	}
	p.cmd.Process.Signal(os.Interrupt)
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGINT: %v", err)
	}
	hang.Until(t, "DynamoDB Local stopping with terret dev", func() bool {
		c, err := net.DialTimeout("tcp", host, 200*time.Millisecond)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "usage: terret"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"token"}, 2, "needs a subcommand"},
		{[]string{"token", "mint", "--agent", "a"}, 2, "unknown token subcommand"},
		{[]string{"token", "create"}, 2, "--agent is required"},
		{[]string{"token", "create", "--agent", "bad id"}, 2, "invalid agent id"},
		{[]string{"dev", "--replay-limit", "0"}, 2, "--replay-limit must be positive"},
		{[]string{"dev", "--lambda-emulator", "--lambda-concurrency", "0"}, 2, "--lambda-concurrency must be positive"},
		{[]string{"dev", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"dev", "--idle-timeout", "0"}, 2, "--idle-timeout must be positive"},
		{[]string{"dev", "--max-connection-duration", "-1s"}, 2, "--max-connection-duration must be positive"},
		{[]string{"dev", "--cloudfront-idle", "-1s"}, 2, "--cloudfront-idle must not be negative"},
		{[]string{"usage"}, 2, "--agent is required"},
	}
	for _, tc := range tests {
		cmd := exec.Command(terretBin(t), tc.args...)
		cmd.Env = append(os.Environ(), "TERRET_STATE_DIR="+t.TempDir())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != tc.code || !strings.Contains(stderr.String(), tc.msg) || strings.Contains(stderr.String(), "usage: usage") {
			t.Errorf("terret %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.msg)
		}
	}
	// Without a running terret dev, token commands say how to point them at a store.
	cmd := exec.Command(terretBin(t), "token", "create", "--agent", "a")
	cmd.Env = append(os.Environ(), "TERRET_STATE_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no running terret dev found") {
		t.Fatalf("token create without dev: %v %s", err, out)
	}
}
