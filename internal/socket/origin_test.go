package socket_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/socket"
)

// invokes counts the asynchronous deliver invocations Connect asks for (the hello or
// the unauthorized drop), standing in for the Lambda Invoke API.
type invokes struct{ n atomic.Int64 }

func (i *invokes) Invoke(context.Context, *lambda.InvokeInput, ...func(*lambda.Options)) (*lambda.InvokeOutput, error) {
	i.n.Add(1)
	return &lambda.InvokeOutput{StatusCode: http.StatusAccepted}, nil
}

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
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	db := dynamotest.Client(t)
	names := dynamotest.CreateTables(t)
	tokens := auth.New(db, names["ConnectionsTable"])
	conns := connections.New(db, names["ConnectionsTable"])
	lg := sessionlog.New(db, names["LogTable"])
	srv := socket.New(tokens, conns, lg, delivery.New(delivery.Config{DeliverFunction: "deliver"}, lg, conns, nil, &invokes{}), nil, logger)
	for _, c := range []struct {
		name, msg, viewer string
		origin            bool
	}{
		{"bad token, raw URL", "unauthorized connection", "", false},
		{"bad token through CloudFront", "unauthorized connection", "203.0.113.9:51234", false},
		{"no origin header", "connection without the origin header", "203.0.113.10:4000", true},
	} {
		logs.Reset()
		srv.RequireOrigin(map[bool]string{true: "origin-s3cret-value"}[c.origin])
		h := map[string]string{"Authorization": "Bearer tt_not_a_token"}
		if c.viewer != "" {
			h["cloudfront-viewer-address"] = c.viewer
		}
		if _, err := srv.Connect(context.Background(), connectReq("s1", h)); err != nil {
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
	bare := socket.New(nil, nil, nil, nil, nil, logger)
	bare.RequireOrigin(secret)
	for name, h := range map[string]map[string]string{
		"no header":      {"Authorization": "Bearer tt_x"},
		"wrong value":    {socket.OriginHeader: "guess"},
		"secret as part": {socket.OriginHeader: secret + "x"},
		"empty":          {socket.OriginHeader: ""},
	} {
		resp, err := bare.Connect(context.Background(), connectReq("a1", h))
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: Connect = %d, %v; want 403", name, resp.StatusCode, err)
		}
	}
	if strings.Contains(logs.String(), secret) || strings.Count(logs.String(), `"msg":"connection without the origin header"`) != 4 {
		t.Errorf("log = %s; want one line per refusal, never the secret", logs.String())
	}

	db := dynamotest.Client(t)
	names := dynamotest.CreateTables(t)
	tokens := auth.New(db, names["ConnectionsTable"])
	conns := connections.New(db, names["ConnectionsTable"])
	lg := sessionlog.New(db, names["LogTable"])
	inv := &invokes{}
	srv := socket.New(tokens, conns, lg, delivery.New(delivery.Config{DeliverFunction: "deliver"}, lg, conns, nil, inv), nil, logger)
	srv.RequireOrigin(secret)
	for i, c := range []struct {
		agent   string
		headers func(token string) map[string]string
	}{
		{"o1", func(tok string) map[string]string {
			return map[string]string{"Authorization": "Bearer " + tok, socket.OriginHeader: secret}
		}},
		{"o2", func(tok string) map[string]string {
			return map[string]string{"authorization": "Bearer " + tok, strings.ToLower(socket.OriginHeader): secret}
		}},
	} {
		tok, err := tokens.Create(context.Background(), c.agent)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Connect(context.Background(), connectReq(c.agent, c.headers(tok)))
		if err != nil || resp.StatusCode != http.StatusOK || inv.n.Load() != int64(i+1) {
			t.Errorf("%s with the origin header: Connect = %d, %v, %d deliver kicks; want 200 and the hello kick", c.agent, resp.StatusCode, err, inv.n.Load())
		}
	}
	srv.RequireOrigin("")
	tok, err := tokens.Create(context.Background(), "o3")
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := srv.Connect(context.Background(), connectReq("o3", map[string]string{"Authorization": "Bearer " + tok})); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("no secret, no header: Connect = %d, %v; want 200", resp.StatusCode, err)
	}
}
