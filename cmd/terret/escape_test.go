package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
)

// attacks are what a client, a web page or the model may put in text the terminal
// prints: a window title (OSC 0 … BEL), a line erase and cursor move (CSI), a
// clipboard write (OSC 52 … ST), a C1 CSI, a carriage return and a right-to-left
// override.
const attacks = "\x1b]0;pwned\x07\x1b[2K\x1b[1G\x1b]52;c;Y3VybCBldmlsfHNo\x1b\\\u009b2J\r\u202e"

// controlBytes returns the control characters in out other than newline, after the
// SGR colour sequences the view writes itself are taken out.
func controlBytes(out string) []rune {
	out = regexp.MustCompile(`\x1b\[[0-9;]*m`).ReplaceAllString(out, "")
	var bad []rune
	for _, r := range out {
		if r < 0x20 && r != '\n' || r == 0x7f || r >= 0x80 && r <= 0x9f || r == 0x202e {
			bad = append(bad, r)
		}
	}
	return bad
}

// TestChatViewEscapes: every text of the log terret chat prints — the model's answer,
// tool calls, arguments, results and errors, reasons, titles, policies — prints its
// control characters escaped, with the chat's own colours still on.
func TestChatViewEscapes(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	v := newChatView(&out, true, false, "demo")
	a, _ := json.Marshal(attacks)
	s := string(a)
	for _, ev := range []client.Event{
		{Type: "assistant/chunk", Payload: json.RawMessage(`{"text":` + s + `,"index":0,"final":true}`)},
		{Type: "user/message", Payload: json.RawMessage(`{"text":` + s + `}`)},
		{Type: "tool/call", Payload: json.RawMessage(`{"id":"c1","name":` + s + `,"args":{"x":` + s + `}}`)},
		{Type: "tool/result", Payload: json.RawMessage(`{"call_id":"c1","error":` + s + `}`)},
		{Type: "tool/result", Payload: json.RawMessage(`{"call_id":` + s + `,"result":{"x":` + s + `}}`)},
		{Type: "approval/requested", Payload: json.RawMessage(`{"call_id":` + s + `,"name":` + s + `}`)},
		{Type: "approval/resolved", Payload: json.RawMessage(`{"call_id":"c","verdict":` + s + `,"reason":` + s + `}`)},
		{Type: "policy/updated", Payload: json.RawMessage(`{"patterns":[` + s + `]}`)},
		{Type: "turn/end", Payload: json.RawMessage(`{"status":"failed","reason":` + s + `}`)},
		{Type: "session/titled", Payload: json.RawMessage(`{"title":` + s + `}`)},
		{Type: "custom/" + attacks, Payload: json.RawMessage(`{}`)},
	} {
		if err := v.event(ev); err != nil {
			t.Fatal(err)
		}
	}
	v.notice(&client.ProtocolError{Code: client.CodeBadFrame, Message: attacks})
	got := out.String()
	if bad := controlBytes(got); len(bad) > 0 {
		t.Fatalf("chat printed control characters %q:\n%q", bad, got)
	}
	if want := `\u001b]52;c;Y3VybCBldmlsfHNo\u001b\`; strings.Count(got, want) < 11 {
		t.Fatalf("chat shows the clipboard write escaped fewer than 11 times (%d):\n%s", strings.Count(got, want), got)
	}
	if !strings.Contains(got, "\x1b[32m◆ \x1b[0m") {
		t.Fatalf("chat lost its own colours:\n%q", got)
	}
}

// TestDevConsoleEscapes runs the binary: what clients send — an unauthenticated
// connection's path, a token holder's frames whose type and fields hold escape
// sequences — shows on terret dev's console escaped, in the text and the JSON format.
func TestDevConsoleEscapes(t *testing.T) {
	t.Parallel()
	endpoint := dynamotest.Endpoint(t)
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			state := t.TempDir()
			ready := filepath.Join(state, "ready.json")
			cmd := exec.Command(terretBin(t), "dev", "--addr", "127.0.0.1:0", "--ready-file", ready, "--log-format", format,
				"--dynamodb-endpoint", endpoint, "--table-prefix", dynamotest.UniqueName("esc")+"-")
			cmd.Env = append(os.Environ(), "TERRET_STATE_DIR="+state)
			stdout, stderr := &syncBuf{}, &syncBuf{}
			cmd.Stdout, cmd.Stderr = stdout, stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			stdout.waitFor(t, "terret dev: listening on")
			p := &devProc{stateDir: state}
			b, err := os.ReadFile(ready)
			if err != nil || json.Unmarshal(b, &p.ready) != nil {
				t.Fatalf("ready file: %v %s", err, b)
			}
			out, errOut, code := p.run(t, "token", "create", "--agent", "a1")
			if code != 0 {
				t.Fatalf("token create: %s %s", out, errOut)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// No token: the path and query are the client's.
			if c, _, err := websocket.Dial(ctx, p.wsURL("a1")+"?x="+"%1B%5D0%3Bpwned%07", nil); err == nil {
				c.CloseNow()
			}
			c, _, err := websocket.Dial(ctx, p.wsURL("a1"), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + strings.TrimSpace(out)}}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			readFrame(t, c) // hello
			a, _ := json.Marshal(attacks)
			for _, f := range []string{
				`{"type":` + string(a) + `}`,
				`{"type":"approve","call_id":` + string(a) + `}`,
				`{"type":"subscribe","from_seq":"` + "\x1b]0;raw\x07" + `"}`, // not JSON: raw bytes
				"\x1b]52;c;eA==\x07",
			} {
				if err := c.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
					t.Fatal(err)
				}
			}
			// The four frames are served concurrently, so they are logged in any order:
			// wait for four lines of the frame message itself (a bad frame's line holds
			// the word several times, and the refused connection's line once).
			hang.UntilNil(t, "four frame lines on the console", func() error {
				if n := frameLines(stderr.String(), format); n < 4 {
					return fmt.Errorf("%d frame lines:\n%s", n, stderr)
				}
				return nil
			})
			got := stderr.String()
			if bad := controlBytes(got); len(bad) > 0 {
				t.Fatalf("console printed control characters %q:\n%q", bad, got)
			}
			if !strings.Contains(got, `]52;c;Y3VybCBldmlsfHNo`) {
				t.Fatalf("console lacks the escaped frame type:\n%s", got)
			}
			if format == "text" {
				chatEscapes(t, p)
			}
		})
	}
}

// frameLines counts the console's lines of the message "frame" (one per client frame
// served) in format: "msg":"frame" in JSON, the message after the time in text.
func frameLines(console, format string) int {
	n := 0
	for _, line := range strings.Split(console, "\n") {
		if format == "json" && strings.Contains(line, `"msg":"frame"`) ||
			format == "text" && len(line) > 13 && strings.HasPrefix(line[12:], " frame ") {
			n++
		}
	}
	return n
}

// chatEscapes runs terret chat against p with piped input whose message holds the
// attacks: the log shows it back twice (the user's message, and the demo model's echo
// of it), and chat prints both escaped.
func chatEscapes(t *testing.T, p *devProc) {
	t.Helper()
	cmd := exec.Command(terretBin(t), "chat", "--agent", "esc-chat")
	cmd.Env = append(os.Environ(), "TERRET_STATE_DIR="+p.stateDir)
	cmd.Stdin = strings.NewReader("hi " + strings.ReplaceAll(attacks, "\r", "") + " end\n")
	var stdout, stderr syncBuf
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var err error
	hang.UntilNil(t, "terret chat to exit at the end of its input", func() error {
		select {
		case err = <-done:
			return nil
		default:
			return fmt.Errorf("still running; it printed:\n%s", stdout.String())
		}
	})
	got := stdout.String()
	if err != nil {
		t.Fatalf("chat: %v\nstdout:\n%s\nstderr:\n%s", err, got, stderr.String())
	}
	if bad := controlBytes(got + stderr.String()); len(bad) > 0 {
		t.Fatalf("chat printed control characters %q:\n%q", bad, got)
	}
	want := `hi \u001b]0;pwned\u0007\u001b[2K\u001b[1G\u001b]52;c;Y3VybCBldmlsfHNo\u001b\\u009b2J\u202e end`
	if !strings.Contains(got, "» "+want+"\n") || !strings.Contains(got, "◆ "+want+"\n") {
		t.Fatalf("chat shows:\n%s\nwant the message and its echo as %s", got, want)
	}
}
