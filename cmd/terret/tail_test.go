package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/devstate"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// wait bounds a wait on the stack or a process: internal/hang's bound, minutes grown
// with the machine's load — a hang detector, since DynamoDB Local on a loaded machine
// can take seconds per request.
func wait() time.Duration { return hang.Bound() }

// dialTimeout is the client's default bound on one connection attempt, scaled by the
// machine's load: a loaded machine's $connect is given the room an idle one's has.
func dialTimeout() time.Duration { return hang.Scaled(15 * time.Second) }

// dialFlag passes dialTimeout to a terret chat or tail.
func dialFlag() string { return "--dial-timeout=" + dialTimeout().String() }

// e2e is the built terret binary and an in-process `terret dev` (approvals mounted)
// for it to talk to.
type e2e struct {
	bin    string
	st     *devstack.Stack
	tokens *auth.Store
	log    *sessionlog.Log
}

// binaryTests are the end-to-end subtests; chat_pty_test.go adds its own on Linux.
var binaryTests = []struct {
	name string
	run  func(*testing.T, *e2e)
}{
	{"tail", testTail},
	{"tail refused", testTailRefused},
	{"tail superseded", testTailSuperseded},
	{"tail --observe beside the driver", testTailObserve},
	{"tail from terret dev and the environment", testTailFindsDev},
	{"tail across a dropped connection", testTailReconnects},
	{"tail with a token file", testTailTokenFile},
}

// TestBinary builds terret once and runs every end-to-end subtest against one stack.
func TestBinary(t *testing.T) {
	t.Parallel()
	endpoint := dynamotest.Endpoint(t)
	e := &e2e{}
	built := make(chan error, 1)
	go func() {
		var err error
		e.bin, err = buildTerret(t.TempDir())
		built <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), wait())
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		DynamoDBEndpoint: endpoint, Addr: "127.0.0.1:0", TablePrefix: dynamotest.UniqueName("cli") + "-",
		Approvals: true, PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		<-built
		t.Fatalf("start stack: %v", err)
	}
	db := dynamolocal.Client(st.DynamoDBEndpoint)
	t.Cleanup(func() {
		st.Close()
		for _, name := range st.Tables {
			_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
		}
	})
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	e.st, e.tokens, e.log = st, auth.New(db, st.Tables["ConnectionsTable"]), sessionlog.New(db, st.Tables["LogTable"])
	for _, bt := range binaryTests {
		t.Run(bt.name, func(t *testing.T) {
			t.Parallel()
			bt.run(t, e)
		})
	}
}

// buildTerret builds this command into dir, with the race detector when the tests
// have it (which also reuses their build cache).
func buildTerret(dir string) (string, error) {
	bin := filepath.Join(dir, "terret")
	args := []string{"build", "-o", bin}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		return "", errors.New("go build: " + err.Error() + "\n" + string(out))
	}
	return bin, nil
}

func (e *e2e) token(t *testing.T, agent string) string {
	t.Helper()
	tok, err := e.tokens.Create(context.Background(), agent)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (e *e2e) url(agent string) string { return e.st.WebSocketURL() + "/agents/" + agent + "/ws" }

// command runs terret with an environment of its own: none of the caller's TERRET_
// variables, an empty state directory (no `terret dev` to find) unless env says
// otherwise.
func (e *e2e) command(t *testing.T, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(e.bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TERRET_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "TERRET_STATE_DIR="+t.TempDir())
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// proc is a running terret whose stdout is read line by line.
type proc struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *syncBuffer
	exited chan struct{}
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, lines: make(chan string, 1000), stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (p *proc) line(t *testing.T) string {
	t.Helper()
	select {
	case l := <-p.lines:
		return l
	case <-p.exited:
		t.Fatalf("terret exited (%v) before printing a line; stderr: %s", p.err, p.stderr)
	case <-time.After(wait()):
		t.Fatalf("no line within %s; stderr: %s", wait(), p.stderr)
	}
	return ""
}

// exit waits for the process to end and returns its exit code.
func (p *proc) exit(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(wait()):
		t.Fatalf("terret still running; stderr: %s", p.stderr)
	}
	if p.err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) {
		t.Fatalf("wait: %v", p.err)
	}
	return ee.ExitCode()
}

// testTail: the log as JSON lines, each the envelope exactly as the log holds it, then
// the live tail, until interrupted.
func testTail(t *testing.T, e *e2e) {
	agent := dynamotest.UniqueName("t")
	// A server root as --url: the command builds the agent's URL from it.
	p := start(t, e.command(t, nil, "tail", dialFlag(), "--agent", agent, "--url", e.st.WebSocketURL(), "--token", e.token(t, agent)))
	lines := []string{p.line(t)}
	for i := range 3 {
		if _, err := e.log.Append(context.Background(), agent, "test/event", map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		lines = append(lines, p.line(t))
	}
	want, err := e.log.Read(context.Background(), agent, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != len(lines) {
		t.Fatalf("log holds %d events, tail printed %d lines", len(want), len(lines))
	}
	for i, ev := range want {
		b, _ := json.Marshal(ev)
		if lines[i] != string(b) {
			t.Fatalf("line %d is %s, want the envelope %s", i, lines[i], b)
		}
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.exit(t); code != 0 || p.stderr.String() != "" {
		t.Fatalf("interrupted tail exited %d, stderr %q", code, p.stderr)
	}
}

// testTailRefused: a refused token, or no server to find, is a one-line error and a
// non-zero exit.
func testTailRefused(t *testing.T, e *e2e) {
	agent := dynamotest.UniqueName("t")
	e.token(t, agent)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"bad token", []string{"tail", "--agent", agent, "--url", e.url(agent), "--token", "tt_garbage"}, 1,
			"terret tail: " + strings.Replace(explainEnd(client.ErrUnauthorized, target{agent: agent}).Error(), invokedAs(), e.bin, 1) + "\n"},
		{"no terret dev", []string{"tail", "--agent", agent}, 1,
			"terret tail: " + errNoDevSocket.Error() + "\n"},
		{"url without token", []string{"tail", "--agent", agent, "--url", e.url(agent)}, 2,
			"terret tail: --token is required with --url (env TERRET_TOKEN, or --token-file)\n"},
		{"url of another agent", []string{"tail", "--agent", "other", "--url", e.url(agent), "--token", "x"}, 2, ""},
		{"dial timeout 0", []string{"tail", "--agent", agent, "--url", e.url(agent), "--token", "x", "--dial-timeout", "0"}, 2,
			"terret tail: --dial-timeout must be > 0\n"},
	} {
		p := start(t, e.command(t, nil, tc.args...))
		code := p.exit(t)
		if code != tc.code || (tc.stderr != "" && p.stderr.String() != tc.stderr) || strings.Count(p.stderr.String(), "\n") != 1 {
			t.Errorf("%s: exit %d, stderr %q; want %d, %q", tc.name, code, p.stderr, tc.code, tc.stderr)
		}
		select {
		case l := <-p.lines:
			t.Errorf("%s: printed %s", tc.name, l)
		default:
		}
	}
}

// testTailSuperseded: another connection for the agent ends tail with an error.
func testTailSuperseded(t *testing.T, e *e2e) {
	agent := dynamotest.UniqueName("t")
	tok := e.token(t, agent)
	p := start(t, e.command(t, nil, "tail", dialFlag(), "--agent", agent, "--url", e.url(agent), "--token", tok))
	p.line(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait())
	defer cancel()
	c, err := client.Dial(ctx, e.url(agent), tok, client.Options{DialTimeout: dialTimeout()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := "terret tail: superseded: another client connected to agent " + agent + ". An agent has one connection at a time " +
		"and the newest wins: terret chat, terret tail and the web page on one agent take it from each other. " +
		"Close the other client (or use another agent id), then run this again\n"
	if code := p.exit(t); code != 1 || p.stderr.String() != want {
		t.Fatalf("exit %d, stderr %q, want %q", code, p.stderr, want)
	}
}

// stateDir is a TERRET_STATE_DIR whose state file names e's stack as the running terret
// dev, as `terret dev` writes it.
func (e *e2e) stateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := devstate.Write(dir, devState{
		WSURL: e.st.WebSocketURL() + "/agents/{agent_id}/ws", DynamoDBEndpoint: e.st.DynamoDBEndpoint,
		Region: e.st.Region, Tables: e.st.Tables, PID: os.Getpid(),
	}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// testTailObserve: tail --observe, with a new observer token from the running terret
// dev, reads the agent's events beside its driver: neither supersedes the other, and
// the driver's inject reaches both.
func testTailObserve(t *testing.T, e *e2e) {
	dir := e.stateDir(t)
	agent := dynamotest.UniqueName("t")
	ctx, cancel := context.WithTimeout(context.Background(), wait())
	defer cancel()
	drv, err := client.Dial(ctx, e.url(agent), e.token(t, agent), client.Options{DialTimeout: dialTimeout()})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	if r := drv.Hello().Role; r != client.RoleDriver {
		t.Fatalf("driver's hello role %q", r)
	}
	p := start(t, e.command(t, []string{"TERRET_STATE_DIR=" + dir}, "tail", dialFlag(), "--observe", "--agent", agent))
	if l := p.line(t); !strings.Contains(l, `"seq":0,`) {
		t.Fatalf("first line %s", l)
	}
	if err := drv.Inject(ctx, "watched", true); err != nil {
		t.Fatal(err)
	}
	for {
		l := p.line(t)
		if strings.Contains(l, `"type":"turn/end"`) {
			break
		}
	}
	select {
	case <-drv.Done():
		t.Fatalf("the driver ended beside an observer: %v", drv.Err())
	default:
	}
	if s := p.stderr.String(); strings.Contains(s, "superseded") {
		t.Fatalf("tail --observe: %s", s)
	}
}

// TestExplainEnd: superseded and unauthorized say what happened and what to do, and
// stay the client's errors; others pass through unchanged.
func TestExplainEnd(t *testing.T) {
	other := errors.New("client: connection lost")
	for _, tc := range []struct {
		name string
		err  error
		want string // the start of the message
	}{
		{"superseded", fmt.Errorf("wrapped: %w", client.ErrSuperseded), "superseded: another client connected to agent a1. An agent has one connection at a time"},
		{"unauthorized", client.ErrUnauthorized, "unauthorized: the token for agent a1 is missing, invalid, rotated, revoked or expired. Get a new one (" + invokedAs() + " token create --agent a1)"},
		{"other", other, "client: connection lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := explainEnd(tc.err, target{agent: "a1"})
			if !strings.HasPrefix(got.Error(), tc.want) || !errors.Is(got, tc.err) {
				t.Fatalf("explainEnd(%v) = %q, want it to start %q and wrap the error", tc.err, got, tc.want)
			}
		})
	}
	if explainEnd(nil, target{agent: "a1"}) != nil {
		t.Fatal("explainEnd(nil) is not nil")
	}
}

// testTailFindsDev: with no --url and --token, tail finds the running terret dev by its
// state file and makes itself a token; TERRET_URL and TERRET_TOKEN stand for the flags.
func testTailFindsDev(t *testing.T, e *e2e) {
	dir := e.stateDir(t)
	agent, agent2 := dynamotest.UniqueName("t"), dynamotest.UniqueName("t")
	p := start(t, e.command(t, []string{"TERRET_STATE_DIR=" + dir}, "tail", dialFlag(), "--agent", agent))
	p2 := start(t, e.command(t, []string{"TERRET_URL=" + e.url(agent2), "TERRET_TOKEN=" + e.token(t, agent2)}, "tail", dialFlag()))
	if l := p.line(t); !strings.Contains(l, `"seq":0,`) || !strings.Contains(l, `"session_id":"`+agent+`"`) {
		t.Fatalf("first line %s", l)
	}
	if l := p2.line(t); !strings.Contains(l, `"session_id":"`+agent2+`"`) {
		t.Fatalf("first line %s", l)
	}
}

// testTailReconnects: the connection dies under tail; it says so on stderr, reconnects,
// and stdout carries on with every event once.
func testTailReconnects(t *testing.T, e *e2e) {
	agent := dynamotest.UniqueName("t")
	cut := cuttableProxy(t, strings.TrimPrefix(e.st.WebSocketURL(), "ws://"))
	p := start(t, e.command(t, nil, "tail", dialFlag(), "--agent", agent, "--url", "ws://"+cut.addr, "--token", e.token(t, agent)))
	p.line(t)
	cut.cut()
	for i := range 2 {
		if _, err := e.log.Append(context.Background(), agent, "test/event", map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	for seq := 1; seq <= 2; seq++ {
		if l := p.line(t); !strings.Contains(l, fmt.Sprintf(`"seq":%d,`, seq)) {
			t.Fatalf("line %s, want seq %d", l, seq)
		}
	}
	select {
	case l := <-p.lines:
		t.Fatalf("extra line %s", l)
	case <-time.After(300 * time.Millisecond):
	}
	if s := p.stderr.String(); !strings.Contains(s, "terret tail: connection lost (") || !strings.Contains(s, "terret tail: reconnected (log at seq") {
		t.Fatalf("stderr %q does not tell of the reconnect", s)
	}
}

// tcpCut forwards TCP to target; cut drops every connection open through it.
type tcpCut struct {
	addr  string
	mu    sync.Mutex
	conns []net.Conn
}

func cuttableProxy(t *testing.T, target string) *tcpCut {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpCut{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *tcpCut) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// testTailTokenFile: --token-file stands for --token, so the token is not in the
// command line.
func testTailTokenFile(t *testing.T, e *e2e) {
	agent := dynamotest.UniqueName("t")
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(e.token(t, agent)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, e.command(t, nil, "tail", dialFlag(), "--agent", agent, "--url", e.url(agent), "--token-file", file))
	if l := p.line(t); !strings.Contains(l, `"seq":0,`) || !strings.Contains(l, `"session_id":"`+agent+`"`) {
		t.Fatalf("first line %s", l)
	}
}
