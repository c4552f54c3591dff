package localgw_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/localgw"
)

func TestConnectStatusDecidesUpgrade(t *testing.T) {
	tests := []struct {
		name       string
		resp       events.APIGatewayProxyResponse
		err        error
		wantStatus int // 0: accepted
	}{
		{name: "200 accepts", resp: events.APIGatewayProxyResponse{StatusCode: 200}},
		{name: "204 accepts", resp: events.APIGatewayProxyResponse{StatusCode: 204}},
		{name: "zero status (null response) accepts", resp: events.APIGatewayProxyResponse{}},
		{name: "401 rejects", resp: events.APIGatewayProxyResponse{StatusCode: 401}, wantStatus: 401},
		{name: "403 rejects", resp: events.APIGatewayProxyResponse{StatusCode: 403}, wantStatus: 403},
		{name: "302 rejects", resp: events.APIGatewayProxyResponse{StatusCode: 302}, wantStatus: 302},
		{name: "handler error rejects with 500", err: errors.New("boom"), wantStatus: 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			rec.connect = func(events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
				return tt.resp, tt.err
			}
			g := startGateway(t, localgw.Config{Routes: rec.routes()}, nil)
			ctx := ctxT(t)
			c, resp, err := websocket.Dial(ctx, g.WebSocketURL()+"/agents/a1/ws", nil)
			if tt.wantStatus == 0 {
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				defer c.CloseNow()
				if err := c.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
					t.Fatalf("write after accept: %v", err)
				}
				rec.waitFor(t, localgw.RouteDefault, 1)
				return
			}
			if err == nil {
				c.CloseNow()
				t.Fatalf("dial succeeded, want rejection with %d", tt.wantStatus)
			}
			if resp == nil || resp.StatusCode != tt.wantStatus {
				t.Fatalf("dial error %v, response %+v; want status %d", err, resp, tt.wantStatus)
			}
			// A rejected connection never existed: no $disconnect (as on API Gateway).
			if err := g.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if n := len(rec.get(localgw.RouteDisconnect)); n != 0 {
				t.Fatalf("$disconnect invoked %d times for a rejected connection", n)
			}
		})
	}
}

func TestConnectEventIsAPIGatewayShaped(t *testing.T) {
	const token = "Bearer s3cret-token-value"
	var lc atomic.Pointer[lambdacontext.LambdaContext]
	var deadline atomic.Int64
	rec := newRecorder()
	routes := rec.routes()
	inner := routes[localgw.RouteConnect]
	routes[localgw.RouteConnect] = handlerFunc(func(ctx context.Context, p []byte) ([]byte, error) {
		if l, ok := lambdacontext.FromContext(ctx); ok {
			lc.Store(l)
		}
		if d, ok := ctx.Deadline(); ok {
			deadline.Store(time.Until(d).Milliseconds())
		}
		return inner.Invoke(ctx, p)
	})
	logs := &syncBuffer{}
	g := startGateway(t, localgw.Config{Routes: routes, Timeouts: map[string]time.Duration{localgw.RouteConnect: 7 * time.Second}}, logs)

	ctx := ctxT(t)
	h := http.Header{}
	h.Set("Authorization", token)
	h.Set("User-Agent", "terret-test/1")
	c, _, err := websocket.Dial(ctx, g.WebSocketURL()+"/agents/agent-7/ws?agent_id=evil&since=5", &websocket.DialOptions{HTTPHeader: h, Subprotocols: []string{"terret.v1"}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.CloseNow()

	ev := rec.waitFor(t, localgw.RouteConnect, 1)[0]
	rc := ev.RequestContext
	checks := []struct {
		what      string
		got, want any
	}{
		{"query agent_id (path wins)", ev.QueryStringParameters["agent_id"], "agent-7"},
		{"multi-value agent_id", strings.Join(ev.MultiValueQueryStringParameters["agent_id"], ","), "agent-7"},
		{"client query kept", ev.QueryStringParameters["since"], "5"},
		{"Authorization header", ev.Headers["Authorization"], token},
		{"Authorization multi-value", strings.Join(ev.MultiValueHeaders["Authorization"], ","), token},
		{"Sec-WebSocket-Protocol header", ev.Headers["Sec-WebSocket-Protocol"], "terret.v1"},
		{"Host header", ev.Headers["Host"], strings.TrimPrefix(g.WebSocketURL(), "ws://")},
		{"routeKey", rc.RouteKey, "$connect"},
		{"eventType", rc.EventType, "CONNECT"},
		{"messageDirection", rc.MessageDirection, "IN"},
		{"stage", rc.Stage, "local"},
		{"apiId", rc.APIID, "local"},
		{"sourceIp", rc.Identity.SourceIP, "127.0.0.1"},
		{"userAgent", rc.Identity.UserAgent, "terret-test/1"},
		{"domainName", rc.DomainName, strings.TrimPrefix(g.WebSocketURL(), "ws://")},
		{"connectionId length", len(rc.ConnectionID), 16},
		{"connectionId padding", strings.HasSuffix(rc.ConnectionID, "="), true},
		{"requestId set", rc.RequestID != "" && rc.ExtendedRequestID != "", true},
		{"connectedAt ms", rc.ConnectedAt > 1e12 && rc.ConnectedAt <= time.Now().UnixMilli(), true},
		{"requestTimeEpoch ms", rc.RequestTimeEpoch >= rc.ConnectedAt, true},
		{"isBase64Encoded", ev.IsBase64Encoded, false},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %v, want %v", ck.what, ck.got, ck.want)
		}
	}
	l := lc.Load()
	if l == nil || len(l.AwsRequestID) != 36 || l.InvokedFunctionArn != "arn:aws:lambda:us-east-1:000000000000:function:connect" {
		t.Errorf("lambda context = %+v, want a UUID request id and the connect function ARN", l)
	}
	if d := deadline.Load(); d <= 6000 || d > 7000 {
		t.Errorf("deadline %dms ahead, want the configured 7s", d)
	}
	c.CloseNow()
	if err := g.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if out := logs.String(); strings.Contains(out, "s3cret") || !strings.Contains(out, `"connection_id":"`+rc.ConnectionID+`"`) {
		t.Errorf("logs leak the token or miss connection_id:\n%s", out)
	}
}

func TestSubprotocolFromConnectResponse(t *testing.T) {
	rec := newRecorder()
	rec.connect = func(events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		return events.APIGatewayProxyResponse{StatusCode: 200, Headers: map[string]string{"Sec-WebSocket-Protocol": "terret.v1"}}, nil
	}
	g := startGateway(t, localgw.Config{Routes: rec.routes()}, nil)
	c := dial(t, g, "a1", &websocket.DialOptions{Subprotocols: []string{"other", "terret.v1"}})
	if got := c.Subprotocol(); got != "terret.v1" {
		t.Fatalf("negotiated subprotocol %q, want terret.v1", got)
	}
}

func TestMessagesReachDefaultRoute(t *testing.T) {
	rec := newRecorder()
	g := startGateway(t, localgw.Config{Routes: rec.routes()}, nil)
	c := dial(t, g, "a1", nil)
	ctx := ctxT(t)
	frames := []struct {
		typ  websocket.MessageType
		data string
	}{
		{websocket.MessageText, `{"type":"subscribe","from_seq":0}`},
		{websocket.MessageBinary, "\x00\x01binary"},
	}
	for _, f := range frames {
		if err := c.Write(ctx, f.typ, []byte(f.data)); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	connID := rec.waitFor(t, localgw.RouteConnect, 1)[0].RequestContext.ConnectionID
	got := rec.waitFor(t, localgw.RouteDefault, 2)
	byBody := map[string]events.APIGatewayWebsocketProxyRequest{}
	for _, ev := range got {
		byBody[ev.Body] = ev
		rc := ev.RequestContext
		if rc.ConnectionID != connID || rc.RouteKey != "$default" || rc.EventType != "MESSAGE" || rc.MessageID == nil {
			t.Errorf("message context %+v, want connection %s, $default, MESSAGE, a messageId", rc, connID)
		}
	}
	if ev, ok := byBody[frames[0].data]; !ok || ev.IsBase64Encoded {
		t.Errorf("text frame not delivered verbatim: %+v", got)
	}
	bin := base64.StdEncoding.EncodeToString([]byte(frames[1].data))
	if ev, ok := byBody[bin]; !ok || !ev.IsBase64Encoded {
		t.Errorf("binary frame not delivered base64-encoded: %+v", got)
	}
}

func TestMessagesInvokeConcurrently(t *testing.T) {
	const n = 3
	var arrived sync.WaitGroup
	arrived.Add(n)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	var timedOut atomic.Int32
	routes := map[string]lambda.Handler{
		localgw.RouteDefault: lambda.NewHandler(func(ev events.APIGatewayWebsocketProxyRequest) error {
			arrived.Done()
			// Each invocation waits for all n: only concurrent invocations get through.
			select {
			case <-all:
			case <-time.After(waitTimeout):
				timedOut.Add(1)
			}
			return nil
		}),
	}
	g := startGateway(t, localgw.Config{Routes: routes}, nil)
	c := dial(t, g, "a1", nil)
	for i := range n {
		if err := c.Write(ctxT(t), websocket.MessageText, []byte{'0' + byte(i)}); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	select {
	case <-all:
	case <-time.After(waitTimeout):
		t.Fatal("messages of one connection were not invoked concurrently")
	}
	if timedOut.Load() != 0 {
		t.Fatal("an invocation timed out waiting for its siblings")
	}
}

func TestDefaultRouteFailureIsReportedToClient(t *testing.T) {
	tests := []struct {
		name   string
		routes map[string]lambda.Handler
		want   string
	}{
		{"handler error", map[string]lambda.Handler{localgw.RouteDefault: lambda.NewHandler(func() error { return errors.New("boom") })}, `"message":"Internal server error"`},
		{"no $default route", map[string]lambda.Handler{}, `"message":"Forbidden"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := startGateway(t, localgw.Config{Routes: tt.routes}, nil)
			c := dial(t, g, "a1", nil)
			if err := c.Write(ctxT(t), websocket.MessageText, []byte(`{}`)); err != nil {
				t.Fatalf("write: %v", err)
			}
			if got := readText(t, c); !strings.Contains(got, tt.want) || !strings.Contains(got, `"connectionId":"`) {
				t.Fatalf("frame %s, want API Gateway's %s error", got, tt.want)
			}
		})
	}
}

func TestClientCloseInvokesDisconnectOnce(t *testing.T) {
	rec := newRecorder()
	g := startGateway(t, localgw.Config{Routes: rec.routes()}, nil)
	c := dial(t, g, "a1", nil)
	connID := rec.waitFor(t, localgw.RouteConnect, 1)[0].RequestContext.ConnectionID
	if err := c.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatalf("close: %v", err)
	}
	ev := rec.waitFor(t, localgw.RouteDisconnect, 1)[0]
	rc := ev.RequestContext
	if rc.ConnectionID != connID || rc.EventType != "DISCONNECT" || rc.RouteKey != "$disconnect" || rc.DisconnectStatusCode != 1000 {
		t.Fatalf("disconnect context %+v, want connection %s, DISCONNECT, status 1000", rc, connID)
	}
	// Posting is refused from now on, and closing the gateway adds no second $disconnect.
	_, err := managementClient(g).PostToConnection(ctxT(t), postInput(connID, "late"))
	assertGone(t, err)
	if err := g.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := len(rec.get(localgw.RouteDisconnect)); n != 1 {
		t.Fatalf("$disconnect invoked %d times, want 1", n)
	}
}

func TestPingFrames(t *testing.T) {
	t.Run("answered pings keep the socket open", func(t *testing.T) {
		rec := newRecorder()
		g := startGateway(t, localgw.Config{Routes: rec.routes(), PingInterval: 20 * time.Millisecond}, nil)
		var pings atomic.Int32
		c := dial(t, g, "a1", &websocket.DialOptions{OnPingReceived: func(context.Context, []byte) bool {
			pings.Add(1)
			return true
		}})
		// coder/websocket handles control frames only inside Read.
		readCtx, stop := context.WithCancel(context.Background())
		defer stop()
		go func() { _, _, _ = c.Read(readCtx) }()
		hang.Until(t, "five pings", func() bool { return pings.Load() >= 5 })
		if n := len(rec.get(localgw.RouteDisconnect)); n != 0 {
			t.Fatalf("answered pings closed the socket (%d disconnects)", n)
		}
	})
	t.Run("an unanswered ping closes the socket", func(t *testing.T) {
		rec := newRecorder()
		g := startGateway(t, localgw.Config{Routes: rec.routes(), PingInterval: 20 * time.Millisecond}, nil)
		c := dial(t, g, "a1", &websocket.DialOptions{OnPingReceived: func(context.Context, []byte) bool {
			return false // swallow the ping: no pong
		}})
		readCtx, stop := context.WithCancel(context.Background())
		defer stop()
		go func() { _, _, _ = c.Read(readCtx) }()
		ev := rec.waitFor(t, localgw.RouteDisconnect, 1)[0]
		if ev.RequestContext.DisconnectStatusCode != int64(websocket.StatusPolicyViolation) {
			t.Fatalf("disconnect status %d, want 1008", ev.RequestContext.DisconnectStatusCode)
		}
	})
}

func TestOversizedFrameClosesWith1009(t *testing.T) {
	rec := newRecorder()
	g := startGateway(t, localgw.Config{Routes: rec.routes()}, nil)
	c := dial(t, g, "a1", nil)
	c.SetReadLimit(-1)
	ctx := ctxT(t)
	go func() { _ = c.Write(ctx, websocket.MessageText, make([]byte, localgw.ReadLimit+1)) }()
	if got := readClose(t, c); got != websocket.StatusMessageTooBig {
		t.Fatalf("close status %v, want 1009", got)
	}
	ev := rec.waitFor(t, localgw.RouteDisconnect, 1)[0]
	if ev.RequestContext.DisconnectStatusCode != 1009 {
		t.Fatalf("disconnect status %d, want 1009", ev.RequestContext.DisconnectStatusCode)
	}
	if n := len(rec.get(localgw.RouteDefault)); n != 0 {
		t.Fatalf("oversized frame reached $default (%d invocations)", n)
	}
}

// TestInvalidUTF8ClosesWith1007: a text frame that is not UTF-8 fails the connection
// with 1007 (RFC 6455 §8.1) and reaches no handler, nor does a frame sent after it.
func TestInvalidUTF8ClosesWith1007(t *testing.T) {
	rec := newRecorder()
	g := startGateway(t, localgw.Config{Routes: rec.routes()}, nil)
	c := dial(t, g, "a1", nil)
	ctx := ctxT(t)
	go func() {
		_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"set_policy","patterns":["`+"\xff\xfe"+`"]}`))
		_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"cancel"}`))
	}()
	if got := readClose(t, c); got != websocket.StatusInvalidFramePayloadData {
		t.Fatalf("close status %v, want 1007", got)
	}
	ev := rec.waitFor(t, localgw.RouteDisconnect, 1)[0]
	if ev.RequestContext.DisconnectStatusCode != 1007 {
		t.Fatalf("disconnect status %d, want 1007", ev.RequestContext.DisconnectStatusCode)
	}
	if n := len(rec.get(localgw.RouteDefault)); n != 0 {
		t.Fatalf("frames after invalid UTF-8 reached $default (%d invocations)", n)
	}
}

func TestCloseDisconnectsEverySocket(t *testing.T) {
	rec := newRecorder()
	g := startGateway(t, localgw.Config{Routes: rec.routes()}, nil)
	clients := []*websocket.Conn{dial(t, g, "a1", nil), dial(t, g, "a2", nil)}
	rec.waitFor(t, localgw.RouteConnect, 2)
	statuses := make(chan websocket.StatusCode, len(clients))
	for _, c := range clients {
		go func() {
			_, _, err := c.Read(context.Background())
			statuses <- websocket.CloseStatus(err)
		}()
	}
	if err := g.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close waited for the $disconnect invocations: they are recorded already.
	if n := len(rec.get(localgw.RouteDisconnect)); n != 2 {
		t.Fatalf("$disconnect invoked %d times, want 2", n)
	}
	for range clients {
		if s := <-statuses; s != websocket.StatusGoingAway {
			t.Fatalf("client saw close status %v, want 1001", s)
		}
	}
	ctx := ctxT(t)
	if _, resp, err := websocket.Dial(ctx, g.WebSocketURL()+"/agents/a3/ws", nil); err == nil {
		t.Fatal("dial after Close succeeded")
	} else if resp != nil && resp.StatusCode < 500 {
		t.Fatalf("dial after Close answered %d", resp.StatusCode)
	}
}

func TestStartRejectsUnknownRoute(t *testing.T) {
	_, err := localgw.Start(context.Background(), localgw.Config{Addr: "127.0.0.1:0", Routes: map[string]lambda.Handler{"sendMessage": lambda.NewHandler(func() error { return nil })}})
	if !errors.Is(err, localgw.ErrUnknownRoute) {
		t.Fatalf("Start error %v, want ErrUnknownRoute", err)
	}
}

// handlerFunc adapts a function to lambda.Handler.
type handlerFunc func(ctx context.Context, payload []byte) ([]byte, error)

func (f handlerFunc) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	return f(ctx, payload)
}
