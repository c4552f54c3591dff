package localgw_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/localgw"
)

// waitTimeout bounds every wait in these tests: it only catches a hang, so it is long
// enough that no load outlasts it.
const waitTimeout = 2 * time.Minute

// syncBuffer collects log output written from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// recorder is a set of route handlers that record every event they get.
type recorder struct {
	mu     sync.Mutex
	events map[string][]events.APIGatewayWebsocketProxyRequest
	notify chan struct{}
	// connect decides the $connect response; nil accepts with 200.
	connect func(events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error)
}

func newRecorder() *recorder {
	return &recorder{events: map[string][]events.APIGatewayWebsocketProxyRequest{}, notify: make(chan struct{}, 1)}
}

func (r *recorder) handler(route string) lambda.Handler {
	return lambda.NewHandler(func(ctx context.Context, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		r.mu.Lock()
		r.events[route] = append(r.events[route], ev)
		r.mu.Unlock()
		select {
		case r.notify <- struct{}{}:
		default:
		}
		if route == localgw.RouteConnect && r.connect != nil {
			return r.connect(ev)
		}
		return events.APIGatewayProxyResponse{StatusCode: 200}, nil
	})
}

func (r *recorder) routes() map[string]lambda.Handler {
	return map[string]lambda.Handler{
		localgw.RouteConnect:    r.handler(localgw.RouteConnect),
		localgw.RouteDefault:    r.handler(localgw.RouteDefault),
		localgw.RouteDisconnect: r.handler(localgw.RouteDisconnect),
	}
}

func (r *recorder) get(route string) []events.APIGatewayWebsocketProxyRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]events.APIGatewayWebsocketProxyRequest(nil), r.events[route]...)
}

// waitFor waits until route has at least n events and returns them.
func (r *recorder) waitFor(t *testing.T, route string, n int) []events.APIGatewayWebsocketProxyRequest {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		if evs := r.get(route); len(evs) >= n {
			return evs
		}
		select {
		case <-r.notify:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s: got %d events, want %d", route, len(r.get(route)), n)
		}
	}
}

// startGateway starts a gateway on a free loopback port, logging into logs (when
// non-nil) and closed at the end of the test.
func startGateway(t *testing.T, cfg localgw.Config, logs *syncBuffer) *localgw.Gateway {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	var out interface{ Write([]byte) (int, error) } = t.Output()
	if logs != nil {
		out = logs
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g, err := localgw.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// dial opens a client socket to agent's endpoint; the socket is closed at test end.
func dial(t *testing.T, g *localgw.Gateway, agent string, opts *websocket.DialOptions) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, g.WebSocketURL()+"/agents/"+agent+"/ws", opts)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial: %v (status %d)", err, status)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

func awsConfig() aws.Config {
	return aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
	}
}

func managementClient(g *localgw.Gateway) *apigatewaymanagementapi.Client {
	return apigatewaymanagementapi.NewFromConfig(awsConfig(), func(o *apigatewaymanagementapi.Options) {
		o.BaseEndpoint = aws.String(g.ManagementEndpoint())
	})
}

func lambdaClient(g *localgw.Gateway) *awslambda.Client {
	return awslambda.NewFromConfig(awsConfig(), func(o *awslambda.Options) {
		o.BaseEndpoint = aws.String(g.LambdaEndpoint())
	})
}

// readText reads one frame and fails unless it is a text frame.
func readText(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	typ, data, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		t.Fatalf("frame type %v, want text", typ)
	}
	return string(data)
}

// readClose reads until the socket closes and returns the close status.
func readClose(t *testing.T, c *websocket.Conn) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for {
		if _, _, err := c.Read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("socket not closed within %v", waitTimeout)
			}
			return websocket.CloseStatus(err)
		}
	}
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func httpStatus(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}
