package webui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/sessionlog"
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

// pageStack is the whole local stack serving the page (approvals mounted, replay limit
// 8), with its service logs.
type pageStack struct {
	st       *devstack.Stack
	endpoint string
	url      string // the page, with its key
	logs     *syncWriter
	buf      *bytes.Buffer
	began    time.Time
}

func startPageStack(t *testing.T) *pageStack {
	t.Helper()
	endpoint := dynamotest.Endpoint(t)
	ps := &pageStack{endpoint: endpoint, buf: &bytes.Buffer{}, began: time.Now()}
	ps.logs = &syncWriter{w: ps.buf}
	// The gateway serves the page from the start; the token table is known once the
	// stack is up.
	var tokens atomic.Pointer[auth.Store]
	const pageKey = "00112233445566778899aabbccddeeff" // the page gets it in the address, as terret dev prints it
	pages := webui.Handler(webui.Options{DevToken: func(ctx context.Context, agentID string) (string, error) {
		s := tokens.Load()
		if s == nil {
			return "", errors.New("webui test: stack not up yet")
		}
		return s.Create(ctx, agentID)
	}, DevTokenKey: pageKey})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		DynamoDBEndpoint: endpoint,
		Addr:             "127.0.0.1:0",
		TablePrefix:      dynamotest.UniqueName("w") + "-",
		Pages:            pages,
		Approvals:        true,
		ReplayLimit:      8, // small enough for the page to show a capped replay
		Logger:           service.Logger(ps.logs, "warn"),
	})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	tokens.Store(auth.New(dynamolocal.Client(endpoint), st.Tables["ConnectionsTable"]))
	ps.st = st
	ps.url = "http://" + strings.TrimPrefix(st.WebSocketURL(), "ws://") + "/" + webui.KeyFragment + pageKey
	return ps
}

// run runs one script of web-tests/ against the page; env adds to its environment.
func (ps *pageStack) run(t *testing.T, script string, env ...string) {
	t.Helper()
	node, dir := webTests(t)
	shots := t.TempDir()
	if d := os.Getenv("TERRET_WEBUI_SCREENSHOTS"); d != "" {
		shots = d // kept after the test, to look at
	}
	// About 30 s on a quiet machine; a DynamoDB Local shared with a whole test run is much slower.
	run, stop := context.WithTimeout(context.Background(), 6*time.Minute)
	defer stop()
	cmd := exec.CommandContext(run, node, filepath.Join(dir, script), ps.url)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SCREENSHOT_DIR="+shots, "CHROMIUM="+chromium, "AGENT_ID="+dynamotest.UniqueName("web-"))
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 5 * time.Second
	up := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		ps.logs.mu.Lock()
		logs := ps.buf.String()
		ps.logs.mu.Unlock()
		t.Fatalf("browser test failed (%v); screenshot in %s (set TERRET_WEBUI_SCREENSHOTS=DIR to keep it):\n%s\nservice logs:\n%s",
			err, shots, out, logs)
	}
	t.Logf("%s (stack up in %s, browser run %s)", bytes.TrimSpace(out), up.Sub(ps.began).Round(time.Millisecond), time.Since(up).Round(time.Millisecond))
}

// TestBrowserChat drives the page in headless Chromium against the whole local stack:
// dev token, connect, a streamed reply with raw JSON per event, a forced reconnect (the
// script cuts the socket in a TCP proxy), an approval, the policy and model controls,
// resume from the stored seq and the recent agents, superseded, and a replay capped at
// the replay limit (web-tests/chat.test.mjs).
func TestBrowserChat(t *testing.T) {
	t.Parallel()
	webTests(t)
	startPageStack(t).run(t, "chat.test.mjs")
}

// TestBrowserPage drives the page through what a long session brings
// (web-tests/page.test.mjs): a full chat pane that keeps the newest item in view and a
// new approval's buttons visible, events the page does not know or whose payload is
// null shown raw without stopping, a context/compacted marker, a reconnect after
// those, and the keepalive frame on an idle socket (its interval cut to 1.5 s through
// the page URL). Events the agent cannot append are written to the log table here
// (POST EVENTS_URL?agent=ID&type=TYPE, the payload as the body, raw: null too).
func TestBrowserPage(t *testing.T) {
	t.Parallel()
	webTests(t)
	ps := startPageStack(t)
	writer := &rawEvents{db: dynamolocal.Client(ps.endpoint), table: ps.st.Tables["LogTable"]}
	srv := httptest.NewServer(writer)
	t.Cleanup(srv.Close)
	ps.run(t, "page.test.mjs", "EVENTS_URL="+srv.URL)
}

// rawEvents writes a log item with any payload at the session's tip + 1, as a future
// or faulty appender might: the agent's own appends refuse a payload that is not an
// object. Its answer is {"seq": N}.
type rawEvents struct {
	db    *dynamodb.Client
	table string
	mu    sync.Mutex // one write at a time: each takes the tip it read
}

func (r *rawEvents) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	agent, typ := req.URL.Query().Get("agent"), req.URL.Query().Get("type")
	payload, err := io.ReadAll(req.Body)
	if err != nil || agent == "" || typ == "" || !json.Valid(payload) {
		http.Error(w, "want POST ?agent=ID&type=TYPE with a JSON body", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx := req.Context()
	tip, err := sessionlog.New(r.db, r.table).Tip(ctx, agent)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	ev := sessionlog.Event{ID: fmt.Sprintf("raw-%s-%d", agent, tip+1), SessionID: agent, Seq: tip + 1,
		At: time.Now().UTC().Format(sessionlog.TimeFormat), Type: typ, Payload: payload}
	if _, err := r.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(r.table), Item: ev.Item(), ConditionExpression: aws.String("attribute_not_exists(seq)"),
	}); err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			http.Error(w, "seq taken meanwhile", http.StatusConflict)
			return
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"seq":%d}`, ev.Seq)
}
