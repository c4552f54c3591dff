package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
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
	_, dir := smokeStack(t, "smoke", devstack.Options{})
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
		if !regexp.MustCompile(`sent, no error within 3s of the probe's (stale_call|unsupported); the socket stayed open`).MatchString(lines[2]) ||
			!strings.Contains(lines[3], `echo tool call and result, reply "smoke ok"`) || !strings.Contains(lines[4], "gapless") {
			t.Errorf("round %d: keepalive, turn and replay lines:\n%s\n%s\n%s", round, lines[2], lines[3], lines[4])
		}
	}

	// A gateway without the keepalive route (a deployment from before the extension):
	// the keepalive step fails and names the missing route; the steps before it pass.
	old := testStack(t, "smoke", devstack.Options{NoKeepaliveRoute: true})
	tok, err := stackToken(old, "smoke-old")
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

// TestSmokeOptionalSteps runs `terret smoke` with its optional steps against a terret dev
// that applies CloudFront's idle rule (2 s without a frame to the client closes a
// socket): the stage's throttles as API Gateway's GetStage answers them (an HTTP server
// standing in for the API, reached through AWS_ENDPOINT_URL as the SDK's clients are),
// a turn on a named model, a quiet socket held past several idle windows by answered
// keepalives, and a token rotation answered unauthorized on the live socket. Then the
// failures each step exists to catch: a model the agent may not use, and a quiet socket
// that is closed meanwhile (by a gateway whose connections live 90 s: the close comes
// within the 100 s quiet whatever the load, and the steps before it, each on a
// connection of its own lifetime, are not cut on a loaded machine, as the short
// CloudFront window would cut them).
func TestSmokeOptionalSteps(t *testing.T) {
	const window = 2 * time.Second
	_, dir := smokeStack(t, "smokeopt", devstack.Options{CloudFrontIdleTimeout: window})
	var gotAuth, gotPath atomic.Value
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth.Store(r.Header.Get("Authorization"))
		gotPath.Store(r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"stageName":"prod","defaultRouteSettings":{"throttlingBurstLimit":500,"throttlingRateLimit":1000.0},`+
			`"routeSettings":{"$connect":{"throttlingBurstLimit":100,"throttlingRateLimit":50.0},"keepalive":{"throttlingBurstLimit":2000,"throttlingRateLimit":2000.0}}}`)
	}))
	t.Cleanup(api.Close)
	for k, v := range map[string]string{
		"TERRET_STATE_DIR": dir, "TERRET_URL": "", "TERRET_TOKEN": "",
		"AWS_ENDPOINT_URL": api.URL, "AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKIDSMOKE", "AWS_SECRET_ACCESS_KEY": "smoke-secret",
		"AWS_SESSION_TOKEN": "", "AWS_PROFILE": "", "AWS_CONFIG_FILE": filepath.Join(dir, "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "none"),
		"AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}

	var stdout, stderr bytes.Buffer
	args := []string{"smoke", "--keepalive-interval", "400ms", "--throttles", "a1b2c3d4e5/prod", "--model", "scripted",
		"--idle", (3 * window).String(), "--rotate"}
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("terret smoke %v exited %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	steps := []string{"connect", "subscribe", "keepalive", "turn", "replay", "throttles", "model", "idle", "rotate"}
	if len(lines) != len(steps) {
		t.Fatalf("output\n%s\nwant one line per step %v", stdout.String(), steps)
	}
	for i, step := range steps {
		if !regexp.MustCompile(`^` + step + ` +ok +[0-9.]+(ms|s|µs) `).MatchString(lines[i]) {
			t.Errorf("line %d = %q, want %s ok with its latency", i, lines[i], step)
		}
	}
	for i, want := range map[int]string{
		5: "stage prod of API a1b2c3d4e5: default 1000/s burst 500; $connect 50/s burst 100; keepalive 2000/s burst 2000",
		6: "scripted: seq ",
		7: "quiet for 6s (keepalive every 400ms), never dropped; the probe was answered ",
		8: "the live socket was answered unauthorized and closed",
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d = %q, want it to say %q", i, lines[i], want)
		}
	}
	if a, _ := gotAuth.Load().(string); !strings.HasPrefix(a, "AWS4-HMAC-SHA256 Credential=AKIDSMOKE/") || !strings.Contains(a, "/eu-west-1/apigateway/aws4_request") {
		t.Errorf("GetStage Authorization %q, want SigV4 for apigateway in eu-west-1", a)
	}
	if p, _ := gotPath.Load().(string); p != "/v2/apis/a1b2c3d4e5/stages/prod" {
		t.Errorf("GetStage path %q", p)
	}

	short := testStack(t, "smokeshort", devstack.Options{MaxConnectionDuration: 90 * time.Second})
	shortToken, err := stackToken(short, "smoke-short")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		step string // the failed step, after every earlier one passed
		says string
	}{
		{"a model the agent may not use", []string{"--keepalive-interval", "400ms", "--model", "nope/x"}, "model", "set_model nope/x or the turn was refused"},
		{"a socket closed while quiet", []string{"--url", short.WebSocketURL() + "/agents/smoke-short/ws", "--token", shortToken,
			"--keepalive-interval", "5s", "--keepalive-wait", "0s", "--step-timeout", "3m", "--idle", "100s"}, "idle", "time(s) in 1m40s of quiet"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"smoke"}, c.args...), &stdout, &stderr)
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		last := lines[len(lines)-1]
		if code != 1 || !strings.HasPrefix(last, c.step+" ") || !strings.Contains(last, "FAILED") || !strings.Contains(last, c.says) ||
			!strings.Contains(stderr.String(), "step "+c.step+" failed") {
			t.Errorf("%s: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1 and step %s FAILED saying %q", c.name, code, stdout.String(), stderr.String(), c.step, c.says)
		}
	}

	// Bad flags: a plain message naming the flag, exit status 2.
	for _, bad := range [][]string{{"--idle", "-1s"}, {"--idle", "1s", "--keepalive-interval", "2s"}, {"--throttles", "nonsense"}, {"--throttles", "url"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append([]string{"smoke"}, bad...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), strings.TrimPrefix(bad[len(bad)-2], "")) {
			t.Errorf("smoke %v: exit %d, stderr %q; want 2 naming %s", bad, code, stderr.String(), bad[len(bad)-2])
		}
	}
}

// smokeStack starts a stack (testStack) and records it in a fresh state directory, as
// terret dev does, so that terret smoke finds it; it returns the stack and the directory.
func smokeStack(t *testing.T, prefix string, o devstack.Options) (*devstack.Stack, string) {
	t.Helper()
	st := testStack(t, prefix, o)
	dir := t.TempDir()
	if _, err := devstate.Write(dir, devState{
		WSURL: st.WebSocketURL() + "/agents/{agent_id}/ws", DynamoDBEndpoint: st.DynamoDBEndpoint,
		Region: st.Region, Tables: st.Tables, PID: os.Getpid(),
	}); err != nil {
		t.Fatal(err)
	}
	return st, dir
}

// testStack starts a stack on DynamoDB Local with o's options (the address, tables,
// poll interval and logger set here); it and its tables go when the test ends.
func testStack(t *testing.T, prefix string, o devstack.Options) *devstack.Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
	defer cancel()
	o.DynamoDBEndpoint, o.Addr = dynamotest.Endpoint(t), "127.0.0.1:0"
	o.TablePrefix = dynamotest.UniqueName(prefix) + "-"
	o.PollInterval, o.Logger = 50*time.Millisecond, slog.New(slog.DiscardHandler)
	st, err := devstack.Start(ctx, o)
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
	return st
}

// stackToken creates a token of agentID in st's tables.
func stackToken(st *devstack.Stack, agentID string) (string, error) {
	return auth.New(dynamolocal.Client(st.DynamoDBEndpoint), st.Tables["ConnectionsTable"]).Create(context.Background(), agentID)
}
