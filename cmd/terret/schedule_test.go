package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/dynamotest"
)

// TestScheduleCommands: set prints the id alone, list prints JSON lines, cancel
// removes it; a bad spec is a usage error naming its flag, and nothing is stored.
func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	names := dynamotest.CreateTables(t)
	ctx := context.Background()
	store := []string{"--dynamodb-endpoint", dynamotest.Endpoint(t), "--log-table", names["LogTable"],
		"--connections-table", names["ConnectionsTable"], "--agents-table", names["AgentsTable"]}
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := runSchedule(ctx, append(args, store...), &out, &errOut)
		return out.String(), err
	}
	out, err := run("set", "--agent", "a1", "--text", "digest", "--cron", "0 9 * * 1-5", "--tz", "Europe/Paris", "--id", "daily")
	if err != nil || out != "daily\n" {
		t.Fatalf("set: %q, %v; want the id, one line", out, err)
	}
	out, err = run("set", "--agent", "a1", "--text", "later", "--in", "2h")
	if err != nil || !strings.HasPrefix(out, "s_") || strings.Count(out, "\n") != 1 {
		t.Fatalf("set without --id: %q, %v; want a generated id, one line", out, err)
	}
	for _, bad := range []struct {
		args []string
		flag string
	}{
		{[]string{"--text", "x", "--every", "10ms"}, "--every"},
		{[]string{"--text", "x", "--cron", "0 9 * *"}, "--cron"},
		{[]string{"--text", "x", "--cron", "0 9 * * *", "--tz", "Moon/Base"}, "--tz"},
		{[]string{"--text", "x", "--at", "noon"}, "--at"},
		{[]string{"--every", "1h"}, "--text"},
	} {
		_, err := run(append([]string{"set", "--agent", "a1"}, bad.args...)...)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), bad.flag+":") {
			t.Fatalf("set %v: %v, want a usage error naming %s", bad.args, err, bad.flag)
		}
	}
	out, err = run("list", "--agent", "a1")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if err != nil || len(lines) != 2 {
		t.Fatalf("list: %q, %v; want 2 JSON lines", out, err)
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first["id"] != "daily" || first["tz"] != "Europe/Paris" || first["next_at"] == "" {
		t.Fatalf("list's first line %s (%v)", lines[0], err)
	}
	if _, err := run("cancel", "--agent", "a1", "--id", "daily"); err != nil {
		t.Fatal(err)
	}
	if _, err := run("cancel", "--agent", "a1", "--id", "daily"); err == nil || !strings.Contains(err.Error(), `no schedule "daily"`) {
		t.Fatalf("cancel twice: %v", err)
	}
	if out, _ := run("list", "--agent", "a1"); strings.Count(out, "\n") != 1 {
		t.Fatalf("list after cancel: %q", out)
	}
}
