package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/service/agentservice"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// The handlers package service builds, run as the functions run them: over DynamoDB
// Local, with the Lambda Invoke API and the @connections API served by small servers
// in the test that record what they are sent.

// peer is a test server speaking the Lambda Invoke API (POST
// /2015-03-31/functions/NAME/invocations) and the @connections API (POST and DELETE
// /@connections/ID), recording each request.
type peer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []request
}

// request is one call a peer received.
type request struct {
	Method, Path, InvocationType string
	Body                         []byte
}

func startPeer(t *testing.T) *peer {
	t.Helper()
	p := &peer{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		p.reqs = append(p.reqs, request{Method: r.Method, Path: r.URL.Path, InvocationType: r.Header.Get("X-Amz-Invocation-Type"), Body: body})
		p.mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/2015-03-31/functions/"):
			w.WriteHeader(http.StatusAccepted) // an Event invocation is queued
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *peer) requests() []request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]request(nil), p.reqs...)
}

// env is one deployment's configuration over fresh tables.
type env struct {
	cfg  config.Config
	peer *peer
	logs *bytes.Buffer
	log  *slog.Logger
}

func newEnv(t *testing.T) env {
	t.Helper()
	names := dynamotest.CreateTables(t)
	p := startPeer(t)
	var logs bytes.Buffer
	return env{
		cfg: config.Config{
			LogTable:             names["LogTable"],
			ConnectionsTable:     names["ConnectionsTable"],
			AgentsTable:          names["AgentsTable"],
			ManagementEndpoint:   p.srv.URL,
			DeliverFunction:      "deliver",
			RunnerFunction:       "runner",
			ReplayLimit:          config.DefaultReplayLimit,
			MaxConcurrentReplays: config.DefaultMaxConcurrentReplays,
			OutboundQueue:        config.DefaultOutboundQueue,
			MainModel:            "scripted",
			TitlerModel:          "scripted",
			DynamoDBEndpoint:     dynamotest.Endpoint(t),
			LambdaEndpoint:       p.srv.URL,
			LogLevel:             "info",
		},
		peer: p,
		logs: &logs,
		log:  service.Logger(&logs, "info"),
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLevel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want slog.Level
		ok   bool
	}{
		{"debug", slog.LevelDebug, true},
		{"INFO", slog.LevelInfo, true},
		{"Warn", slog.LevelWarn, true},
		{"error", slog.LevelError, true},
		{"", slog.LevelInfo, false},
		{"warning", slog.LevelInfo, false},
	} {
		if got, ok := service.Level(tc.name); got != tc.want || ok != tc.ok {
			t.Errorf("Level(%q) = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestLogger: one JSON object a line, below the level dropped, an unknown level info.
func TestLogger(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		level string
		want  []string // messages written, of debug, info, warn
	}{
		{"warn", []string{"w"}},
		{"debug", []string{"d", "i", "w"}},
		{"bogus", []string{"i", "w"}},
	} {
		var b bytes.Buffer
		l := service.Logger(&b, tc.level)
		l.Debug("d")
		l.Info("i", "agent_id", "a1")
		l.Warn("w")
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
			var rec struct{ Msg string }
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("level %s: line %q is not JSON: %v", tc.level, line, err)
			}
			got = append(got, rec.Msg)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("level %s: wrote %v, want %v", tc.level, got, tc.want)
		}
	}
}

// TestLoggerRequestID: a line logged with an invocation's context carries its
// request_id once, whether or not the logger was given one with With; a line without
// such a context has none.
func TestLoggerRequestID(t *testing.T) {
	t.Parallel()
	inv := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	for _, tc := range []struct {
		name string
		log  func(l *slog.Logger)
		want string // the line's request_id; "" for none
	}{
		{"with the invocation's context", func(l *slog.Logger) { l.InfoContext(inv, "m", "agent_id", "a1") }, "req-1"},
		{"with a context of none", func(l *slog.Logger) { l.InfoContext(context.Background(), "m") }, ""},
		{"without a context", func(l *slog.Logger) { l.Info("m") }, ""},
		{"given other attributes with With", func(l *slog.Logger) { l.With("connection_id", "c1").InfoContext(inv, "m") }, "req-1"},
		{"given one with With", func(l *slog.Logger) { l.With("request_id", "req-0").WarnContext(inv, "m") }, "req-0"},
		{"in a group", func(l *slog.Logger) { l.WithGroup("g").InfoContext(inv, "m") }, "req-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			tc.log(service.Logger(&b, "info"))
			line := strings.TrimSpace(b.String())
			if n := strings.Count(line, `"request_id"`); n > 1 {
				t.Fatalf("line %s has %d request_id keys; want at most one", line, n)
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("line %q is not JSON: %v", line, err)
			}
			got, _ := rec["request_id"].(string)
			if g, ok := rec["g"].(map[string]any); ok && got == "" {
				got, _ = g["request_id"].(string)
			}
			if got != tc.want {
				t.Errorf("request_id = %q; want %q (line %s)", got, tc.want, line)
			}
		})
	}
}

// TestDeliverHandlerSweep: the scheduled SweepInput revokes the tokens that have expired
// and only those; an unknown sweep is an error naming it.
func TestDeliverHandlerSweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	tokens := service.Tokens(e.cfg, dynamolocal.Config())
	expiring, err := tokens.CreateExpiring(ctx, "a1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lasting, err := tokens.Create(ctx, "a2")
	if err != nil {
		t.Fatal(err)
	}
	later := tokens.WithClock(func() time.Time { return time.Now().Add(3 * time.Minute) })
	h := service.DeliverHandler(service.Deliverer(e.cfg, dynamolocal.Config(), e.log, service.Tuning{}), later, e.log)

	if out, err := h(ctx, json.RawMessage(service.SweepInput)); err != nil || out != nil {
		t.Fatalf("sweep = %v, %v; want nil, nil", out, err)
	}
	// Read at the real time: revoked, not merely expired.
	if _, err := tokens.Check(ctx, "a1", expiring); !errors.Is(err, auth.ErrUnauthorized) {
		t.Errorf("expired token after the sweep: Check = %v, want %v", err, auth.ErrUnauthorized)
	}
	if _, err := tokens.Check(ctx, "a2", lasting); err != nil {
		t.Errorf("token without expiry after the sweep: Check = %v, want nil", err)
	}
	if !strings.Contains(e.logs.String(), `"msg":"expired tokens revoked","tokens":1`) {
		t.Errorf("log %s, want the line expired tokens revoked with tokens 1", e.logs)
	}

	_, err = h(ctx, json.RawMessage(`{"sweep":"sessions"}`))
	if err == nil || !strings.Contains(err.Error(), `unknown sweep "sessions"`) {
		t.Errorf("unknown sweep = %v, want an error naming %q", err, "sessions")
	}
}

// TestDeliverHandlerKick: anything but a sweep is delivery's: a drop kick posts the
// error frame to the connection and deletes it.
func TestDeliverHandlerKick(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := service.DeliverHandler(service.Deliverer(e.cfg, dynamolocal.Config(), e.log, service.Tuning{}), service.Tokens(e.cfg, dynamolocal.Config()), e.log)
	if _, err := h(ctxT(t), json.RawMessage(`{"kind":"drop","agent_id":"a1","connection_id":"c1","code":"unauthorized"}`)); err != nil {
		t.Fatalf("drop kick: %v", err)
	}
	reqs := e.peer.requests()
	if len(reqs) != 2 {
		t.Fatalf("got %d @connections requests %v, want a post and a delete", len(reqs), reqs)
	}
	var f struct{ Type, Code string }
	if err := json.Unmarshal(reqs[0].Body, &f); err != nil || reqs[0].Method != http.MethodPost || reqs[0].Path != "/@connections/c1" ||
		f.Type != "error" || f.Code != "unauthorized" {
		t.Errorf("first request %s %s %s, want POST /@connections/c1 of an unauthorized error frame", reqs[0].Method, reqs[0].Path, reqs[0].Body)
	}
	if reqs[1].Method != http.MethodDelete || reqs[1].Path != "/@connections/c1" {
		t.Errorf("second request %s %s, want DELETE /@connections/c1", reqs[1].Method, reqs[1].Path)
	}

	if _, err := h(ctxT(t), json.RawMessage(`{"kind":"nonsense"}`)); err == nil || !strings.Contains(err.Error(), "nonsense") {
		t.Errorf("unknown kick = %v, want an error naming it", err)
	}
}

// TestRuntimeWakeRunsTurn: the message function's inject (wake) queues the text and
// invokes the runner function asynchronously with the agent's id; the runner
// function's handler, given that event, runs the turn to its end.
func TestRuntimeWakeRunsTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t)
	log := sessionlog.New(e.cfg.DynamoDB(dynamolocal.Config()), e.cfg.LogTable)
	if _, err := log.Create(ctx, "a1"); err != nil { // as the first connect does
		t.Fatal(err)
	}
	rt, err := agentservice.Agent(e.cfg, dynamolocal.Config(), service.Deliverer(e.cfg, dynamolocal.Config(), e.log, service.Tuning{}), e.log)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Inject(ctx, "a1", "hello there", true); err != nil {
		t.Fatalf("inject: %v", err)
	}
	reqs := e.peer.requests()
	if len(reqs) != 1 || reqs[0].Path != "/2015-03-31/functions/runner/invocations" || reqs[0].InvocationType != "Event" {
		t.Fatalf("got requests %v, want one Event invocation of runner", reqs)
	}
	var ev agent.RunnerEvent
	if err := json.Unmarshal(reqs[0].Body, &ev); err != nil || ev.AgentID != "a1" {
		t.Fatalf("runner payload %s, want agent_id a1", reqs[0].Body)
	}
	if tip, err := log.Tip(ctx, "a1"); err != nil || tip != 0 {
		t.Fatalf("log tip after the inject = %d, %v; want 0, session/created alone (the runner logs the turn)", tip, err)
	}

	// The runner function's own deadline (15 minutes): a shorter one would make the
	// runner hand the turn over to a fresh invocation on a slow machine.
	runCtx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := rt.HandleRunner(runCtx, ev); err != nil {
		t.Fatalf("runner: %v", err)
	}
	evs, err := log.Read(ctx, "a1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range evs {
		if len(types) == 0 || types[len(types)-1] != ev.Type {
			types = append(types, ev.Type)
		}
	}
	want := "session/created user/message turn/start assistant/chunk turn/end session/titled"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("log holds %s, want %s", got, want)
	}
	if !strings.Contains(string(evs[len(evs)-2].Payload), `"status":"completed"`) {
		t.Errorf("turn/end %s, want status completed", evs[len(evs)-2].Payload)
	}
}
