package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// TestSessionCommands: export prints the envelopes as JSON lines over a range, reset
// starts the log over with a new epoch and keeps the token, delete erases it and the
// token; bad input is a usage error naming the flag, and nothing is touched.
func TestSessionCommands(t *testing.T) {
	t.Parallel()
	names := dynamotest.CreateTables(t)
	ctx := context.Background()
	db := dynamotest.Client(t)
	log := sessionlog.New(db, names["LogTable"])
	if _, err := log.Create(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 5 {
		ev, err := log.Append(ctx, "a1", "note", map[string]any{"i": i, "t": "<&>"})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := ev.MarshalJSON()
		want = append(want, string(b))
	}
	tok, err := auth.New(db, names["ConnectionsTable"]).Create(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	store := []string{"--dynamodb-endpoint", dynamotest.Endpoint(t), "--log-table", names["LogTable"],
		"--connections-table", names["ConnectionsTable"], "--agents-table", names["AgentsTable"]}
	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := runSession(ctx, append(args, store...), &out, &errOut)
		return out.String(), errOut.String(), err
	}

	out, _, err := run("export", "--agent", "a1", "--from", "2", "--to", "4")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want[1:4], "\n") {
		t.Fatalf("export --from 2 --to 4 =\n%s\nwant\n%s", out, strings.Join(want[1:4], "\n"))
	}
	if out, _, err = run("export", "--agent", "a1"); err != nil || strings.Count(out, "\n") != 6 || !strings.Contains(out, `"t":"<&>"`) {
		t.Fatalf("export of the whole log: %v\n%s", err, out)
	}

	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"export", "--agent", "a1", "--from", "-1"}, "--from"},
		{[]string{"export", "--agent", "a1", "--from", "x"}, "--from"},
		{[]string{"export", "--agent", "a1", "--from", "3", "--to", "2"}, "--to"},
		{[]string{"reset"}, "--agent"},
		{[]string{"delete", "--agent", "bad id"}, "agent id"},
		{[]string{"purge", "--agent", "a1"}, "purge"},
	} {
		if _, _, err := run(c.args...); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%v: %v, want a usage error naming %s", c.args, err, c.flag)
		}
	}
	var o, e bytes.Buffer
	if err := runSession(ctx, []string{"reset", "--agent", "a1", "--region", "us-east-1", "--connections-table", "c"}, &o, &e); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--log-table") {
		t.Errorf("reset against AWS without --log-table: %v", err)
	}
	if _, _, err := run("export", "--agent", "nobody"); err == nil || !strings.Contains(err.Error(), `"nobody" has no session`) {
		t.Errorf("export of a missing agent: %v", err)
	}

	old, _ := log.Epoch(ctx, "a1")
	out, _, err = run("reset", "--agent", "a1")
	if err != nil {
		t.Fatal(err)
	}
	epoch, _ := log.Epoch(ctx, "a1")
	if epoch == old || out != fmt.Sprintf("session of a1 reset: new log from seq 0, epoch %s\n", epoch) {
		t.Fatalf("reset printed %q; epoch %s, before %s", out, epoch, old)
	}
	if tip, err := log.Tip(ctx, "a1"); err != nil || tip != 0 {
		t.Fatalf("tip after reset %d, %v", tip, err)
	}
	if _, err := auth.New(db, names["ConnectionsTable"]).Check(ctx, "a1", tok); err != nil {
		t.Fatalf("token after reset: %v", err)
	}

	out, _, err = run("delete", "--agent", "a1")
	if err != nil || out != "session of a1 deleted: 1 items erased\n" {
		t.Fatalf("delete printed %q, %v", out, err)
	}
	if _, err := log.Tip(ctx, "a1"); !errors.Is(err, sessionlog.ErrNotFound) {
		t.Fatalf("log after delete: %v", err)
	}
	if _, err := auth.New(db, names["ConnectionsTable"]).Check(ctx, "a1", tok); err == nil {
		t.Fatal("token survived the delete")
	}
	if strings.Contains(out, tok) {
		t.Fatal("a token in the output")
	}
}

// helloEpoch opens a connection and returns its hello's epoch.
func helloEpoch(t *testing.T, url, token string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait())
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	defer c.CloseNow()
	_, b, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var h struct{ Type, Epoch string }
	if err := json.Unmarshal(b, &h); err != nil || h.Type != "hello" || h.Epoch == "" {
		t.Fatalf("first frame %s, want hello with an epoch", b)
	}
	return h.Epoch
}

// TestSessionEpochAcrossDevRestart: the epoch a real `terret dev` sends is the same
// across reconnects and across a restart on the same data directory, and new after
// `terret session reset`, which finds the running instance as `terret token` does;
// `terret session export` then prints the new log's session/created, whose id it is.
func TestSessionEpochAcrossDevRestart(t *testing.T) {
	t.Parallel()
	dynamotest.Endpoint(t) // skip (or fail under CI) where DynamoDB Local cannot run
	bin, state := terretBin(t), t.TempDir()
	d := launchDev(t, bin, ".", state, "--addr", "127.0.0.1:0")
	d.waitReady(t)
	out, errOut, code := runIn(t, bin, state, "token", "create", "--agent", "e1")
	if code != 0 {
		t.Fatalf("token create: exit %d, %s", code, errOut)
	}
	tok := strings.TrimSpace(out)
	first := helloEpoch(t, d.url("e1"), tok)
	if again := helloEpoch(t, d.url("e1"), tok); again != first {
		t.Fatalf("epoch %s on reconnect, was %s", again, first)
	}
	d.stop(t)

	d2 := launchDev(t, bin, ".", state, "--addr", "127.0.0.1:0")
	d2.waitReady(t)
	if after := helloEpoch(t, d2.url("e1"), tok); after != first {
		t.Fatalf("epoch %s after the restart on the same data, was %s", after, first)
	}
	out, errOut, code = runIn(t, bin, state, "session", "reset", "--agent", "e1")
	if code != 0 || !strings.HasPrefix(out, "session of e1 reset") {
		t.Fatalf("session reset: exit %d, %q, %s", code, out, errOut)
	}
	second := helloEpoch(t, d2.url("e1"), tok)
	if second == first || !strings.HasSuffix(strings.TrimSpace(out), "epoch "+second) {
		t.Fatalf("epoch after reset %s (was %s); reset printed %q", second, first, out)
	}
	out, errOut, code = runIn(t, bin, state, "session", "export", "--agent", "e1")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"id":"`+second+`"`) || !strings.Contains(out, `"seq":0,`) {
		t.Fatalf("session export after reset: exit %d, %q, %s", code, out, errOut)
	}
	if _, errOut, code = runIn(t, bin, state, "session", "export", "--agent", "e1", "--from", "x"); code != 2 || !strings.Contains(errOut, "--from") {
		t.Fatalf("export --from x: exit %d, stderr %q; want 2 naming --from", code, errOut)
	}
	d2.stop(t)
}
