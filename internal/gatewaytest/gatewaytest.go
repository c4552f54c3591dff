// Package gatewaytest is the local API Gateway as handler tests use it: the three
// WebSocket routes and the deliver function bound late — the handlers are built over
// the gateway's own @connections and Invoke endpoints, which exist only once it
// listens — clients of those endpoints, and a WebSocket client that reads its frames on
// one goroutine. The socket and delivery tests share it; what each binds to the routes
// is their own.
package gatewaytest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/invoke"
	"github.com/terret/terret-ws/internal/localgw"
)

// DeliverFunction is the name the deliver function is served under.
const DeliverFunction = "deliver"

// Gateway is a running local gateway whose routes and deliver function the test binds.
type Gateway struct {
	*localgw.Gateway
	Connect, Message, Disconnect localgw.Deferred // the $connect, $default, $disconnect routes
	Deliver                      localgw.Deferred // DeliverFunction, through the Invoke API
	Posts                        *apigatewaymanagementapi.Client
	Invoke                       *invoke.Client
}

// Start starts a gateway on a free local port that logs to logger; it is closed when
// the test ends. A failed asynchronous invocation is retried after 200 ms, not
// Lambda's minute.
// Each option changes the gateway's configuration before it starts (a route's
// deadline, say).
func Start(t testing.TB, logger *slog.Logger, options ...func(*localgw.Config)) *Gateway {
	t.Helper()
	g := &Gateway{}
	cfg := localgw.Config{
		Addr:         "127.0.0.1:0",
		Routes:       map[string]lambda.Handler{localgw.RouteConnect: &g.Connect, localgw.RouteDefault: &g.Message, localgw.RouteDisconnect: &g.Disconnect},
		Functions:    map[string]lambda.Handler{DeliverFunction: &g.Deliver},
		RetryBackoff: 200 * time.Millisecond,
		Logger:       logger,
	}
	for _, o := range options {
		o(&cfg)
	}
	gw, err := localgw.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start the local gateway: %v", err)
	}
	t.Cleanup(func() { gw.Close() })
	g.Gateway = gw
	awsCfg := dynamolocal.Config()
	g.Posts = apigatewaymanagementapi.NewFromConfig(awsCfg, func(o *apigatewaymanagementapi.Options) {
		o.BaseEndpoint = aws.String(gw.ManagementEndpoint())
	})
	invokeCfg := awsCfg
	invokeCfg.BaseEndpoint = aws.String(gw.LambdaEndpoint())
	g.Invoke = invoke.NewFromConfig(invokeCfg)
	return g
}

// Client.Next's errors besides the socket's own.
var (
	ErrNoFrame = errors.New("gatewaytest: no frame in time")
	ErrBinary  = errors.New("gatewaytest: binary message") // the protocol sends text only; reading stops there
)

// Client is one WebSocket to an agent. One goroutine reads it — a Read whose context
// expires would close the socket — and Next hands out what it read, in order.
type Client struct {
	Conn *websocket.Conn
	msgs chan message
}

type message struct {
	data []byte
	err  error
}

// Dial connects to agentID's socket with token in the Authorization header ("" for
// none) and opts (nil for none); it does not wait for hello. Messages of up to 1 MiB are
// read. The socket is closed when the test ends. The handshake waits for the $connect
// handler's DynamoDB requests, which on a loaded machine can take tens of seconds: it
// is bounded at a minute, as a wait for an outcome, not a measure of speed.
func (g *Gateway) Dial(t testing.TB, agentID, token string, opts *websocket.DialOptions) (*Client, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, resp, err := Open(ctx, g.WebSocketURL()+"/agents/"+agentID+"/ws", token, opts, 10000)
	if err != nil {
		t.Fatalf("dial %s: %v", agentID, err)
	}
	t.Cleanup(func() { c.Conn.CloseNow() })
	return c, resp
}

// Open connects to the socket at url (any gateway's: …/agents/{id}/ws) as Dial does,
// within ctx, and returns the handshake's error instead of failing a test; the caller
// closes the socket. Up to buffer messages wait unread before the reader stops reading.
func Open(ctx context.Context, url, token string, opts *websocket.DialOptions, buffer int) (*Client, *http.Response, error) {
	if opts == nil {
		opts = &websocket.DialOptions{}
	}
	if token != "" {
		opts.HTTPHeader = http.Header{"Authorization": {"Bearer " + token}}
	}
	ws, resp, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		return nil, resp, err
	}
	ws.SetReadLimit(1 << 20)
	c := &Client{Conn: ws, msgs: make(chan message, buffer)}
	go func() {
		for {
			typ, b, err := ws.Read(context.Background())
			if err == nil && typ != websocket.MessageText {
				err = ErrBinary
			}
			c.msgs <- message{b, err}
			if err != nil {
				return
			}
		}
	}()
	return c, resp, nil
}

// Next returns the next message, ErrNoFrame if none came within d, or the error that
// ended the socket (again at every later call: websocket.CloseStatus reads its status).
func (c *Client) Next(d time.Duration) ([]byte, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case m := <-c.msgs:
		if m.err != nil {
			c.msgs <- m // keep reporting the end
		}
		return m.data, m.err
	case <-t.C:
		return nil, ErrNoFrame
	}
}

// Ready returns the next message if one has already been read, without waiting: ok is
// false when none has.
func (c *Client) Ready() (data []byte, ok bool, err error) {
	select {
	case m := <-c.msgs:
		if m.err != nil {
			c.msgs <- m // keep reporting the end
		}
		return m.data, true, m.err
	default:
		return nil, false, nil
	}
}

// Send writes one message of typ within 10 s.
func (c *Client) Send(typ websocket.MessageType, b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Conn.Write(ctx, typ, b)
}
