package webui_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/webui"
)

// chromium is Debian's Chromium, which scripts/browser.sh installs.
const chromium = "/usr/bin/chromium"

// webTests finds node and web-tests/ with its node_modules, or skips the test — fails it
// under CI=true, where scripts/deps.sh (run by `make test`) has installed them.
func webTests(t *testing.T) (node, dir string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "web-tests"))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	if _, err := os.Stat(chromium); err != nil {
		missing = append(missing, chromium)
	}
	node, err = exec.LookPath("node")
	if err != nil {
		missing = append(missing, "node")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		missing = append(missing, "web-tests/node_modules/playwright-core")
	}
	if len(missing) > 0 {
		msg := "browser test needs " + strings.Join(missing, ", ") + ": run scripts/browser.sh (scripts/deps.sh runs it)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return node, dir
}

// TestBrowserChat drives the page in headless Chromium against the whole local stack:
// dev token, connect, a streamed reply with raw JSON per event, a forced reconnect (the
// script cuts the socket in a TCP proxy), an approval, the policy and model controls,
// resume from the stored seq and the recent agents, superseded, and a replay capped at
// the replay limit (web-tests/chat.test.mjs).
func TestBrowserChat(t *testing.T) {
	t.Parallel()
	node, dir := webTests(t)
	endpoint := dynamotest.Endpoint(t)
	began := time.Now()

	// The gateway serves the page from the start; the token table is known once the
	// stack is up.
	var tokens atomic.Pointer[auth.Store]
	pages := webui.Handler(webui.Options{DevToken: func(ctx context.Context, agentID string) (string, error) {
		s := tokens.Load()
		if s == nil {
			return "", errors.New("webui test: stack not up yet")
		}
		return s.Create(ctx, agentID)
	}})
	var logs bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		DynamoDBEndpoint: endpoint,
		Addr:             "127.0.0.1:0",
		TablePrefix:      dynamotest.UniqueName("w") + "-",
		Pages:            pages,
		Approvals:        true,
		ReplayLimit:      8, // small enough for the page to show a capped replay
		Logger:           service.Logger(&syncWriter{w: &logs}, "warn"),
	})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	tokens.Store(auth.New(dynamolocal.Client(endpoint), st.Tables["ConnectionsTable"]))
	pageURL := "http://" + strings.TrimPrefix(st.WebSocketURL(), "ws://") + "/"

	shots := t.TempDir()
	if d := os.Getenv("TERRET_WEBUI_SCREENSHOTS"); d != "" {
		shots = d // kept after the test, to look at
	}
	// About 30 s on a quiet machine; a DynamoDB Local shared with a whole test run is much slower.
	run, stop := context.WithTimeout(context.Background(), 6*time.Minute)
	defer stop()
	cmd := exec.CommandContext(run, node, filepath.Join(dir, "chat.test.mjs"), pageURL)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SCREENSHOT_DIR="+shots, "CHROMIUM="+chromium, "AGENT_ID="+dynamotest.UniqueName("web-"))
	cmd.WaitDelay = 5 * time.Second
	up := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("browser test failed (%v); screenshot in %s (set TERRET_WEBUI_SCREENSHOTS=DIR to keep it):\n%s\nservice logs:\n%s",
			err, shots, out, logs.String())
	}
	t.Logf("%s (stack up in %s, browser run %s)", bytes.TrimSpace(out), up.Sub(began).Round(time.Millisecond), time.Since(up).Round(time.Millisecond))
}
