package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
)

func init() {
	binaryTests = append(binaryTests, struct {
		name string
		run  func(*testing.T, *e2e)
	}{"send", testSend})
}

// sendRun runs terret send with args and returns its exit status, stdout and stderr.
func sendRun(t *testing.T, e *e2e, args ...string) (int, string, string) {
	t.Helper()
	cmd := e.command(t, nil, append([]string{"send"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

// testSend: terret send posts a frame over HTTP and prints its client_id; the same
// --idempotency-key again appends nothing; bad input is named with exit 2, a refusal
// is the server's code with exit 1.
func testSend(t *testing.T, e *e2e) {
	agent := dynamotest.UniqueName("s")
	tok := e.token(t, agent)
	target := []string{"--agent", agent, "--url", e.url(agent), "--token", tok}
	frame := `{"type":"inject","text":"over http","wake":true}`
	for range 2 {
		code, out, errOut := sendRun(t, e, append(target, frame, "--idempotency-key", "k-1")...)
		if code != 0 || out != "k-1\n" {
			t.Fatalf("send = exit %d, stdout %q, stderr %q; want 0 and k-1", code, out, errOut)
		}
	}
	code, out, errOut := sendRun(t, e, append(target, `{"type":"inject","text":"after","wake":true}`)...)
	if code != 0 || !strings.HasPrefix(out, "c-") {
		t.Fatalf("send without a key = exit %d, stdout %q, stderr %q; want 0 and a new client_id", code, out, errOut)
	}
	var texts []string
	hang.UntilNil(t, "the log to hold the inject after", func() error {
		evs, err := e.log.Read(context.Background(), agent, 0, 1000)
		if err != nil {
			return err
		}
		texts = texts[:0]
		for _, ev := range evs {
			if ev.Type == "user/message" || ev.Type == "context/injected" {
				var p struct {
					Text     string `json:"text"`
					ClientID string `json:"client_id"`
				}
				_ = json.Unmarshal(ev.Payload, &p)
				texts = append(texts, p.Text+"/"+p.ClientID)
			}
		}
		if len(texts) > 0 && strings.HasPrefix(texts[len(texts)-1], "after/") {
			return nil
		}
		return fmt.Errorf("inject events %q", texts)
	})
	if len(texts) != 2 || texts[0] != "over http/k-1" {
		t.Fatalf("inject events %q, want over http (k-1) once, then after", texts)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no frame", target, 2, "the frame is required"},
		{"not JSON", append(target, `{"type":`), 2, "the frame argument is not a JSON object"},
		{"two frames", append(target, `{}`, `{}`), 2, "unexpected argument"},
		{"a bad key", append(target, frame, "--idempotency-key", strings.Repeat("k", 129)), 2, "--idempotency-key is 129 characters"},
		{"subscribe", append(target, `{"type":"subscribe","from_seq":0}`), 1, "refused: bad_frame: subscribe"},
		{"cancel with no turn", append(target, `{"type":"cancel","client_id":"c-9"}`), 1, "refused: not_running"},
		{"a bad token", []string{"--agent", agent, "--url", e.url(agent), "--token", "tt_nope", frame}, 1, "unauthorized"},
	} {
		code, out, errOut := sendRun(t, e, tc.args...)
		if code != tc.code || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d naming %q", tc.name, code, out, errOut, tc.code, tc.want)
		}
	}
}
