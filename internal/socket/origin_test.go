package socket

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/metrics"
)

// connectReq is a $connect for agent from the source address 198.51.100.7.
func connectReq(agent string, headers map[string]string) events.APIGatewayWebsocketProxyRequest {
	req := events.APIGatewayWebsocketProxyRequest{Headers: headers, QueryStringParameters: map[string]string{"agent_id": agent}}
	req.RequestContext.ConnectionID = "conn-" + agent
	req.RequestContext.Identity.SourceIP = "198.51.100.7"
	return req
}

// TestRefusedConnectionLogsSource: a refused handshake's log line names where it came
// from — source_ip, and behind CloudFront the viewer's address from the header the
// origin request policy forwards — for the refused-connections runbook (a scan, or a
// client retrying a revoked token). Both refusals: no origin header, and no valid token.
func TestRefusedConnectionLogsSource(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	f := newFakes(true)
	f.srv.logger = slog.New(slog.NewJSONHandler(&logs, nil))
	for _, c := range []struct {
		name, msg, viewer string
		origin            bool
	}{
		{"bad token, raw URL", "unauthorized connection", "", false},
		{"bad token through CloudFront", "unauthorized connection", "203.0.113.9:51234", false},
		{"no origin header", "connection without the origin header", "203.0.113.10:4000", true},
	} {
		logs.Reset()
		f.srv.RequireOrigin(map[bool]string{true: "origin-s3cret-value"}[c.origin])
		h := map[string]string{"Authorization": "Bearer tt_not_a_token"}
		if c.viewer != "" {
			h["cloudfront-viewer-address"] = c.viewer
		}
		if _, err := f.srv.Connect(context.Background(), connectReq("s1", h)); err != nil {
			t.Fatal(err)
		}
		var line struct{ Msg, SourceIP, ViewerAddress string }
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var v struct {
				Msg           string `json:"msg"`
				SourceIP      string `json:"source_ip"`
				ViewerAddress string `json:"viewer_address"`
			}
			if json.Unmarshal([]byte(l), &v) == nil && v.Msg == c.msg {
				line.Msg, line.SourceIP, line.ViewerAddress = v.Msg, v.SourceIP, v.ViewerAddress
			}
		}
		if line.Msg == "" || line.SourceIP != "198.51.100.7" || line.ViewerAddress != c.viewer {
			t.Errorf("%s: line %+v, want %q with source_ip 198.51.100.7 and viewer_address %q; log:\n%s", c.name, line, c.msg, c.viewer, logs.String())
		}
	}
}

// TestRequireOrigin: with an origin secret, $connect refuses a handshake whose origin
// header is missing or wrong with 403 before it touches a store (the server below has
// none: any read or write would panic), and never logs the secret; the right header
// (its name in any case) goes on to the token check and the hello. Without a secret
// there is no check.
func TestRequireOrigin(t *testing.T) {
	t.Parallel()
	const secret = "origin-s3cret-value"
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	bare := New(nil, nil, nil, nil, nil, logger)
	bare.RequireOrigin(secret)
	for name, h := range map[string]map[string]string{
		"no header":      {"Authorization": "Bearer tt_x"},
		"wrong value":    {OriginHeader: "guess"},
		"secret as part": {OriginHeader: secret + "x"},
		"empty":          {OriginHeader: ""},
	} {
		resp, err := bare.Connect(context.Background(), connectReq("a1", h))
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: Connect = %d, %v; want 403", name, resp.StatusCode, err)
		}
	}
	if strings.Contains(logs.String(), secret) || strings.Count(logs.String(), `"msg":"connection without the origin header"`) != 4 {
		t.Errorf("log = %s; want one line per refusal, never the secret", logs.String())
	}

	f := newFakes(true)
	f.srv.logger = logger
	f.srv.RequireOrigin(secret)
	for _, c := range []struct {
		agent   string
		headers map[string]string
	}{
		{"o1", map[string]string{"Authorization": "Bearer tok", OriginHeader: secret}},
		{"o2", map[string]string{"authorization": "Bearer tok", strings.ToLower(OriginHeader): secret}},
	} {
		f.j.lines = nil
		resp, err := f.srv.Connect(context.Background(), connectReq(c.agent, c.headers))
		if want := "Welcome " + c.agent; err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(f.j.String(), want) {
			t.Errorf("%s with the origin header: Connect = %d, %v, calls %s; want 200 and %q", c.agent, resp.StatusCode, err, f.j, want)
		}
	}
	f.srv.RequireOrigin("")
	f.j.lines = nil
	if resp, err := f.srv.Connect(context.Background(), connectReq("o3", map[string]string{"Authorization": "Bearer tok"})); err != nil ||
		resp.StatusCode != http.StatusOK || !strings.Contains(f.j.String(), "Welcome o3") {
		t.Errorf("no secret, no header: Connect = %d, %v, calls %s; want 200 and the hello", resp.StatusCode, err, f.j)
	}
}

// TestInternalAnswersCounted: a frame answered internal — the route returned, so
// Lambda's Errors never sees it — counts once in InternalErrors, the metric the
// InternalErrorsAlarm reads; a frame refused otherwise (the connection superseded while
// it was served) does not. Not parallel: the count is
// the process's, and no other test may move it meanwhile.
func TestInternalAnswersCounted(t *testing.T) {
	if metrics.Default() == nil {
		metrics.SetDefault(metrics.New(nil, ""))
	}
	for _, tc := range []struct {
		name  string
		err   error
		want  string // the answer, in the fakes' journal
		count float64
	}{
		{"unexpected", errBoom, "Fail c1", 1},
		{"the agent's owner claim gone", fmt.Errorf("agent: inject: %w", control.ErrNotOwner), "Fail c1", 1},
		{"superseded", fmt.Errorf("agent: inject: %w", connections.ErrNotOwner), "Refuse c1 superseded", 0},
	} {
		f := newFakes(false)
		f.conns.conns["c1"] = connections.Conn{ID: "c1", AgentID: "a1", State: connections.StateAuthorized}
		f.ctrl.FailWith("Inject", tc.err)
		before := internalAnswers(t)
		req := wsReq("c1", nil, nil)
		req.Body = `{"type":"inject","text":"x","wake":false}`
		if _, err := f.srv.Message(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if got := f.j.String(); !strings.Contains(got, tc.want) {
			t.Errorf("%s: calls %s, want %q", tc.name, got, tc.want)
		}
		if got := internalAnswers(t) - before; got != tc.count {
			t.Errorf("%s: InternalErrors grew by %v, want %v", tc.name, got, tc.count)
		}
	}
}

// internalAnswers reads the InternalErrors count of the process's metrics recorder.
func internalAnswers(t *testing.T) float64 {
	t.Helper()
	var b strings.Builder
	if err := metrics.Default().WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "terret_internal_errors_total "); ok {
			var n float64
			if _, err := fmt.Sscan(v, &n); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			return n
		}
	}
	return 0
}
