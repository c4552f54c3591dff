package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

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
