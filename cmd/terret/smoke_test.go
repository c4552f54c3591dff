package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/devstate"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
)

// TestSmoke runs `terret smoke` against a running terret dev, found as chat and tail
// find it (the state directory): every step passes, in order, each with a latency. Then
// against a URL where nothing listens: exit status 1, the failed step named.
func TestSmoke(t *testing.T) {
	endpoint := dynamotest.Endpoint(t)
	ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		DynamoDBEndpoint: endpoint, Addr: "127.0.0.1:0", TablePrefix: dynamotest.UniqueName("smoke") + "-",
		PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	db := dynamolocal.Client(st.DynamoDBEndpoint)
	t.Cleanup(func() {
		st.Close()
		for _, name := range st.Tables {
			_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
		}
	})
	dir := t.TempDir()
	if _, err := devstate.Write(dir, devState{
		WSURL: st.WebSocketURL() + "/agents/{agent_id}/ws", DynamoDBEndpoint: st.DynamoDBEndpoint,
		Region: st.Region, Tables: st.Tables, PID: os.Getpid(),
	}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TERRET_STATE_DIR", dir)
	t.Setenv("TERRET_URL", "")
	t.Setenv("TERRET_TOKEN", "")

	for round := range 2 { // a fresh agent each run; the second finds the same terret dev
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"smoke"}, &stdout, &stderr); code != 0 {
			t.Fatalf("round %d: terret smoke exited %d\nstdout:\n%s\nstderr:\n%s", round, code, stdout.String(), stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		steps := []string{"connect", "subscribe", "keepalive", "turn", "replay"}
		if len(lines) != len(steps) {
			t.Fatalf("round %d: output\n%s\nwant one line per step %v", round, stdout.String(), steps)
		}
		for i, step := range steps {
			if !regexp.MustCompile(`^` + step + ` +ok +[0-9.]+(ms|s|µs) `).MatchString(lines[i]) {
				t.Errorf("round %d: line %d = %q, want %s ok with its latency", round, i, lines[i], step)
			}
		}
		if !regexp.MustCompile(`sent, no answer within 3s of the probe's (stale_call|unsupported); the socket stayed open`).MatchString(lines[2]) ||
			!strings.Contains(lines[3], `echo tool call and result, reply "smoke ok"`) || !strings.Contains(lines[4], "gapless") {
			t.Errorf("round %d: keepalive, turn and replay lines:\n%s\n%s\n%s", round, lines[2], lines[3], lines[4])
		}
	}

	// A gateway without the keepalive route (a deployment from before the extension):
	// the keepalive step fails and names the missing route; the steps before it pass.
	ctx2, cancel2 := context.WithTimeout(context.Background(), hang.Bound())
	defer cancel2()
	old, err := devstack.Start(ctx2, devstack.Options{
		DynamoDBEndpoint: endpoint, Addr: "127.0.0.1:0", TablePrefix: dynamotest.UniqueName("smoke") + "-",
		PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), NoKeepaliveRoute: true,
	})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	oldDB := dynamolocal.Client(old.DynamoDBEndpoint)
	t.Cleanup(func() {
		old.Close()
		for _, name := range old.Tables {
			_, _ = oldDB.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
		}
	})
	tok, err := auth.New(oldDB, old.Tables["ConnectionsTable"]).Create(ctx2, "smoke-old")
	if err != nil {
		t.Fatal(err)
	}
	{
		var stdout, stderr bytes.Buffer
		// The step returns as soon as the bad_frame comes; the long wait only makes its
		// arrival certain on a loaded machine.
		code := run(context.Background(), []string{"smoke", "--url", old.WebSocketURL() + "/agents/smoke-old/ws", "--token", tok,
			"--step-timeout", "10m", "--keepalive-wait", "9m"}, &stdout, &stderr)
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if code != 1 || len(lines) != 3 || !strings.HasPrefix(lines[0], "connect ") || !strings.HasPrefix(lines[1], "subscribe ") ||
			!strings.HasPrefix(lines[2], "keepalive  FAILED") || !strings.Contains(lines[2], "no keepalive route") ||
			!strings.Contains(stderr.String(), "step keepalive failed") {
			t.Errorf("without the keepalive route: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1 and the keepalive step failed for the missing route", code, stdout.String(), stderr.String())
		}
	}

	// Nothing listens at the URL: the first step fails, and says so.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "ws://" + l.Addr().String() + "/agents/gone/ws"
	l.Close()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"smoke", "--url", dead, "--token", "t", "--step-timeout", "20s"}, &stdout, &stderr)
	if code != 1 || !strings.HasPrefix(stdout.String(), "connect    FAILED") || !strings.Contains(stderr.String(), "step connect failed") {
		t.Errorf("against %s: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1 and the connect step named", dead, code, stdout.String(), stderr.String())
	}
	if strings.Contains(stdout.String()+stderr.String(), "Bearer") {
		t.Error("the token's header leaked into the output")
	}
}
