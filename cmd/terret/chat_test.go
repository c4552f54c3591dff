package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/dynamotest"
)

func init() {
	binaryTests = append(binaryTests, struct {
		name string
		run  func(*testing.T, *e2e)
	}{"chat with piped input", testChatPiped})
	binaryTests = append(binaryTests, struct {
		name string
		run  func(*testing.T, *e2e)
	}{"chat with piped input ending at a parked approval", testChatPipedParked})
}

// testChatPiped: with input and output not terminals, chat prints plain lines, and at
// the end of input waits for the turn it started before exiting.
func testChatPiped(t *testing.T, e *e2e) {
	agent := dynamotest.UniqueName("chat")
	cmd := e.command(t, nil, "chat", dialFlag(), "--agent", agent, "--url", e.url(agent), "--token", e.token(t, agent))
	cmd.Stdin = strings.NewReader("hello from a pipe\n/bogus\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		out, err = cmd.Output()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(wait()):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("chat did not exit at the end of its input; it printed:\n%s", out)
	}
	if err != nil {
		t.Fatalf("chat: %v; stderr %s", err, stderr.String())
	}
	want := "· connected to " + agent + " (log at seq 0); type a message, or /help\n" +
		"! unknown command /bogus (/help lists them)\n" +
		"» hello from a pipe\n" +
		"◆ hello from a pipe\n" +
		"· turn completed\n"
	// The titler may name the session before chat exits, or after.
	got := regexp.MustCompile(`(?m)^· title: .*\n`).ReplaceAllString(string(out), "")
	if got != want {
		t.Fatalf("chat printed:\n%s\nwant:\n%s\nstderr: %s", out, want, stderr.String())
	}
}

// testChatPipedParked: when piped input ends with the turn parked on an approval —
// nothing more can come without the user — chat says the call is parked and how to
// resolve it, and exits 0 instead of waiting for ever; the call stays parked, and
// another client's approve completes the turn.
func testChatPipedParked(t *testing.T, e *e2e) {
	agent := dynamotest.UniqueName("chat")
	tok := e.token(t, agent)
	script := `{"script":[{"call":[{"tool":"guarded_echo","args":{"text":"hi"}}]},{"say":"done"}]}`
	cmd := e.command(t, nil, "chat", dialFlag(), "--agent", agent, "--url", e.url(agent), "--token", tok)
	cmd.Stdin = strings.NewReader(script + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		out, err = cmd.Output()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(wait()):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("chat did not exit at the end of its input with the turn parked; it printed:\n%s", out)
	}
	if err != nil {
		t.Fatalf("chat: %v; stderr %s", err, stderr.String())
	}
	got := regexp.MustCompile(`(?m)^· title: .*\n`).ReplaceAllString(string(out), "")
	m := regexp.MustCompile(`call_id=(\S+):`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("chat printed no parked call:\n%s", out)
	}
	id := m[1]
	want := "· connected to " + agent + " (log at seq 0); type a message, or /help\n" +
		"» " + script + "\n" +
		`⚙ guarded_echo {"text":"hi"}` + "\n" +
		"? approve guarded_echo call_id=" + id + ": /approve " + id + " or /deny " + id + " [reason]\n" +
		"· input ended with the turn parked on approval of guarded_echo call_id=" + id + ": leaving it parked\n" +
		"· to resolve it, run " + e.bin + " chat --agent " + agent + " and type /approve ID or /deny ID (or use the web page); until then the turn waits\n"
	if got != want {
		t.Fatalf("chat printed:\n%s\nwant:\n%s\nstderr: %s", out, want, stderr.String())
	}

	// Still parked: approving it from another client completes the turn.
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait())
	defer cancel()
	ends := make(chan string, 10)
	c, err := client.Dial(ctx, e.url(agent), tok, client.Options{DialTimeout: dialTimeout(), OnEvent: func(ev client.Event) error {
		if ev.Type == "turn/end" || ev.Type == "approval/resolved" {
			ends <- ev.Type + " " + string(ev.Payload)
		}
		return nil
	}, OnNotice: func(n client.Notice) { ends <- "notice " + n.Error() }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Subscribe(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Approve(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, want := range [][]string{{"approval/resolved ", `"call_id":"` + id + `"`, `"verdict":"approved"`}, {"turn/end ", `"status":"completed"`}} {
		select {
		case got := <-ends:
			for _, w := range want {
				if !strings.Contains(got, w) {
					t.Fatalf("after chat left, got %s, want %s", got, strings.Join(want, " … "))
				}
			}
		case <-ctx.Done():
			t.Fatalf("no %s after approving the parked call", strings.Join(want, " … "))
		}
	}
}

func TestParseInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line string
		want chatCommand
		err  bool
	}{
		{"", chatCommand{}, false},
		{"   ", chatCommand{}, false},
		{"hello there", chatCommand{kind: "inject", text: "hello there"}, false},
		{"  indented\r", chatCommand{kind: "inject", text: "  indented"}, false},
		{`{"script":[{"say":"x"}]}`, chatCommand{kind: "inject", text: `{"script":[{"say":"x"}]}`}, false},
		{"//etc/hosts", chatCommand{kind: "inject", text: "/etc/hosts"}, false},
		{"/cancel", chatCommand{kind: "cancel"}, false},
		{"/cancel  too slow ", chatCommand{kind: "cancel", reason: "too slow"}, false},
		{"/approve call_1", chatCommand{kind: "approve", id: "call_1"}, false},
		{"/approve", chatCommand{}, true},
		{"/approve a b", chatCommand{}, true},
		{"/deny call_1", chatCommand{kind: "deny", id: "call_1"}, false},
		{"/deny call_1 not   today", chatCommand{kind: "deny", id: "call_1", reason: "not   today"}, false},
		{"/deny", chatCommand{}, true},
		{"/policy echo s*", chatCommand{kind: "policy", patterns: []string{"echo", "s*"}}, false},
		{"/policy", chatCommand{}, true},
		{"/model main scripted", chatCommand{kind: "model", role: "main", spec: "scripted"}, false},
		{"/model main", chatCommand{}, true},
		{"/help", chatCommand{kind: "help"}, false},
		{"/quit", chatCommand{kind: "quit"}, false},
		{"/exit", chatCommand{kind: "quit"}, false},
		{"/nope", chatCommand{}, true},
	}
	for _, tc := range tests {
		got, err := parseInput(tc.line)
		if (err != nil) != tc.err || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseInput(%q) = %+v, %v; want %+v (error %v)", tc.line, got, err, tc.want, tc.err)
		}
	}
}

// TestChatView: what people see for each kind of event, notice and status, without
// colours when stdout is not a terminal.
func TestChatView(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	v := newChatView(&out, false, true, "demo")
	v.status(client.Status{State: client.StateConnecting})
	v.status(client.Status{State: client.StateConnected, Hello: client.Hello{Proto: 1, SessionID: "demo", LastSeq: 1}})
	v.own = []string{"hi", "steer me"}
	seq := int64(0)
	ev := func(typ, payload string) {
		if err := v.event(client.Event{Seq: seq, Type: typ, Payload: json.RawMessage(payload)}); err != nil {
			t.Fatal(err)
		}
		seq++
	}
	ev("session/created", `{}`)
	ev("user/message", `{"text":"hi"}`) // history (seq ≤ 1): shown although this chat typed "hi"
	ev("user/message", `{"text":"hi","turn_id":"t1"}`)
	ev("turn/start", `{"turn_id":"t1"}`)
	ev("assistant/chunk", `{"text":"Hel","index":0}`)
	ev("assistant/chunk", `{"text":"lo","index":1,"final":true}`)
	ev("tool/call", `{"id":"c1","name":"echo","args":{"text": "hi"}}`)
	ev("tool/result", `{"call_id":"c1","result":{"text":"hi"}}`)
	ev("context/injected", `{"text":"steer me"}`)
	ev("context/injected", `{"text":"from elsewhere"}`)
	ev("tool/call", `{"id":"c2","name":"guarded_echo","args":{}}`)
	ev("approval/requested", `{"call_id":"c2","name":"guarded_echo","args":{}}`)
	ev("approval/resolved", `{"call_id":"c2","verdict":"denied","reason":"no"}`)
	ev("tool/result", `{"call_id":"c2","error":"denied: no"}`)
	ev("assistant/chunk", `{"text":"cut","index":0}`)
	ev("assistant/chunk", `{"text":"again","index":0,"final":true}`)
	ev("policy/updated", `{"patterns":["echo","s*"]}`)
	ev("policy/updated", `{"patterns":[]}`)
	ev("turn/end", `{"turn_id":"t1","status":"completed"}`)
	ev("turn/end", `{"turn_id":"t2","status":"failed","reason":"model down"}`)
	ev("session/titled", `{"title":"Greetings"}`)
	ev("context/compacted", `{"through_seq":12,"summary":"the user said hi"}`)
	ev("custom/thing", `{"a": 1}`)
	v.notice(&client.ProtocolError{Code: client.CodeStaleCall, Message: "no standing approval request"})
	v.notice(&client.ReplayTruncated{Requested: 0, From: 16})
	v.status(client.Status{State: client.StateReconnecting, Attempt: 1, Delay: 250 * time.Millisecond, Err: errors.New("client: connection lost: EOF")})
	v.status(client.Status{State: client.StateReconnecting, Attempt: 2, Delay: 503 * time.Millisecond, Err: errors.New("client: dial ws://h/agents/demo/ws: refused")})
	v.status(client.Status{State: client.StateConnecting, Attempt: 1})
	v.status(client.Status{State: client.StateConnected, Attempt: 1, Hello: client.Hello{LastSeq: 30}})

	want := `· connected to demo (log at seq 1); type a message, or /help
» hi
◆ Hello
⚙ echo {"text":"hi"}
✓ echo → {"text":"hi"}
» from elsewhere  (steer)
⚙ guarded_echo {}
? approve guarded_echo call_id=c2: /approve c2 or /deny c2 [reason]
· denied c2: no
✗ guarded_echo → denied: no
◆ cut
◆ again
· policy: echo s*
· policy: (no tool allowed)
· turn completed
· turn failed: model down
· title: Greetings
· Earlier context summarised through seq 12
· custom/thing {"a":1}
! stale_call: no standing approval request
· history before seq 16 is not replayed (the server's replay limit)
· connection lost (EOF); reconnecting in 250ms
· still disconnected (dial ws://h/agents/demo/ws: refused); retrying in 500ms (attempt 2)
· reconnected (log at seq 30)
`
	if out.String() != want {
		t.Fatalf("chat shows:\n%s\nwant:\n%s", out.String(), want)
	}
	if len(v.own) != 0 || v.turnOpen {
		t.Fatalf("own %v, turn open %v", v.own, v.turnOpen)
	}

	var colored bytes.Buffer
	cv := newChatView(&colored, true, false, "demo")
	_ = cv.event(client.Event{Seq: 5, Type: "tool/call", Payload: json.RawMessage(`{"id":"c","name":"echo","args":{"text":"` + strings.Repeat("x", 400) + `"}}`)})
	if s := colored.String(); !strings.HasPrefix(s, "\x1b[36m⚙ echo ") || !strings.Contains(s, "…\x1b[0m\n") {
		t.Fatalf("terminal line %q is not coloured and clipped", s)
	}
}

func init() {
	binaryTests = append(binaryTests, struct {
		name string
		run  func(*testing.T, *e2e)
	}{"chat superseded", testChatSuperseded})
}

// testChatSuperseded: another connection for the agent ends chat with a message that
// says what happened and what to do, and exit status 1.
func testChatSuperseded(t *testing.T, e *e2e) {
	agent := dynamotest.UniqueName("chat")
	tok := e.token(t, agent)
	in, keep, err := os.Pipe() // input that never ends
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	cmd := e.command(t, nil, "chat", dialFlag(), "--agent", agent, "--url", e.url(agent), "--token", tok)
	cmd.Stdin = in
	p := start(t, cmd)
	in.Close()
	if l := p.line(t); !strings.HasPrefix(l, "· connected to "+agent) {
		t.Fatalf("first line %q", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait())
	defer cancel()
	c, err := client.Dial(ctx, e.url(agent), tok, client.Options{DialTimeout: dialTimeout()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := "terret chat: " + explainEnd(client.ErrSuperseded, target{agent: agent}).Error() + "\n"
	if code := p.exit(t); code != 1 || p.stderr.String() != want {
		t.Fatalf("exit %d, stderr %q, want %q", code, p.stderr, want)
	}
}
