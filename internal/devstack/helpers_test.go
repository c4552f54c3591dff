package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/gatewaytest"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// env is one running stack with clients of its tables.
type env struct {
	stack  *devstack.Stack
	tokens *auth.Store
	log    *sessionlog.Log
	pause  *pauser      // the runtime's pause hook; nil when the functions run emulated (runtime_test.go)
	calls  *invocations // the handlers' returns (startRuntimeStack only; invocations_test.go)
}

func startStack(t *testing.T, o devstack.Options) env {
	t.Helper()
	o.DynamoDBEndpoint = dynamotest.Endpoint(t)
	o.Addr = "127.0.0.1:0"
	o.TablePrefix = dynamotest.UniqueName("d") + "-"
	if o.PollInterval == 0 {
		// Still more often than AWS's about four polls a second, and a fifth of the
		// GetRecords a 20 ms poll sent: the suite's stacks share one DynamoDB Local,
		// which runs on one core, and idle polling was most of what it served.
		o.PollInterval = 100 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = service.Logger(testLogOut(), testLogLevel())
	}
	switch {
	case o.LambdaEmulator == inProcess:
		o.LambdaEmulator = nil
	case o.LambdaEmulator == nil && emulated():
		if o.Observer != nil {
			t.Skip("observes replays inside the handlers: in-process only")
		}
		o.LambdaEmulator = emulatorOptions(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang())
	defer cancel()
	st, err := devstack.Start(ctx, o)
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	db := dynamolocal.Client(st.DynamoDBEndpoint)
	t.Cleanup(func() {
		st.Close()
		// A shared DynamoDB Local slows down as tables pile up.
		for _, name := range st.Tables {
			_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
		}
	})
	return env{stack: st, tokens: auth.New(db, st.Tables["ConnectionsTable"]), log: sessionlog.New(db, st.Tables["LogTable"])}
}

func (e env) token(t *testing.T, agent string) string {
	t.Helper()
	tok, err := e.tokens.Create(context.Background(), agent)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// frame is any server frame: events have seq, protocol frames do not.
type frame struct {
	raw  []byte
	Type string          `json:"type"`
	Seq  *int64          `json:"seq"`
	Code string          `json:"code"`
	Msg  string          `json:"message"`
	Sess string          `json:"session_id"`
	Last int64           `json:"last_seq"`
	Req  int64           `json:"requested_from_seq"`
	From int64           `json:"from_seq"`
	Pay  json.RawMessage `json:"payload"`
}

func (f frame) String() string { return string(f.raw) }

// client is one socket to the stack, a gatewaytest.Client read as protocol frames.
type client struct {
	t   *testing.T
	c   *websocket.Conn // ws.Conn
	ctx context.Context // bounds writes
	ws  *gatewaytest.Client
}

// read is one WebSocket message as orderConn's reader hands it on.
type read struct {
	b   []byte
	err error
}

func (e env) dial(t *testing.T, agent, token string) *client {
	t.Helper()
	c, err := e.tryDial(agent, token)
	if err != nil {
		t.Fatalf("dial %s: %v", agent, err)
	}
	t.Cleanup(func() { c.c.CloseNow() })
	c.t = t
	return c
}

func (e env) tryDial(agent, token string) (*client, error) {
	// The handshake waits for the $connect handler: bounded like any wait for the
	// server (hang), which on a loaded machine can take more than 10 s.
	ctx, cancel := context.WithTimeout(context.Background(), hang())
	defer cancel()
	ws, _, err := gatewaytest.Open(ctx, e.stack.WebSocketURL()+"/agents/"+agent+"/ws", token, nil, 100000)
	if err != nil {
		return nil, err
	}
	return &client{c: ws.Conn, ctx: context.Background(), ws: ws}, nil
}

func (c *client) send(v any) {
	c.t.Helper()
	var b []byte
	switch x := v.(type) {
	case string:
		b = []byte(x)
	case []byte:
		b = x
	default:
		b, _ = json.Marshal(v)
	}
	ctx, cancel := context.WithTimeout(c.ctx, hang())
	defer cancel()
	if err := c.c.Write(ctx, websocket.MessageText, b); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

var (
	errClosed  = errors.New("closed")
	errTimeout = errors.New("no frame in time")
)

// next reads one frame within d; errClosed when the server closed the socket.
func (c *client) next(d time.Duration) (frame, error) {
	b, err := c.ws.Next(d) // after the end, the end again
	if errors.Is(err, gatewaytest.ErrNoFrame) {
		return frame{}, errTimeout
	}
	if err != nil {
		if websocket.CloseStatus(err) != -1 || strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "closed") {
			return frame{}, errClosed
		}
		return frame{}, err
	}
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		return frame{}, fmt.Errorf("frame %q is not JSON: %w", b, err)
	}
	f.raw = b
	return f, nil
}

func (c *client) must(d time.Duration) frame {
	c.t.Helper()
	f, err := c.next(d)
	if err != nil {
		c.t.Fatalf("read frame (waited up to %s): %v", d.Round(time.Second), err)
	}
	return f
}

// expectError reads frames until an error frame and checks its code.
func (c *client) expectError(code string) frame {
	c.t.Helper()
	for {
		f := c.must(hang())
		if f.Type == "error" {
			if f.Code != code {
				c.t.Fatalf("error frame %s, want code %s", f, code)
			}
			return f
		}
	}
}

// expectClosed asserts the server closes the socket (after any remaining frames).
func (c *client) expectClosed() {
	c.t.Helper()
	for {
		f, err := c.next(hang())
		if errors.Is(err, errClosed) {
			return
		}
		if err != nil {
			c.t.Fatalf("waiting for close: %v", err)
		}
		c.t.Logf("frame before close: %s", f)
	}
}

// hello reads the first frame and checks it is hello.
func (c *client) hello(agent string) frame {
	c.t.Helper()
	f := c.must(hang())
	if f.Type != "hello" || f.Seq != nil || f.Sess != agent || !strings.Contains(string(f.raw), `"proto":1`) {
		c.t.Fatalf("first frame %s, want hello for %s", f, agent)
	}
	return f
}

// events reads events until it has seen seq `to`, asserting they run from..to exactly.
// Protocol frames in between fail the test.
func (c *client) events(from, to int64) []frame {
	c.t.Helper()
	var out []frame
	want := from
	for want <= to {
		f := c.must(hang())
		if f.Seq == nil {
			c.t.Fatalf("protocol frame %s while expecting seq %d", f, want)
		}
		if *f.Seq != want {
			c.t.Fatalf("got seq %d, want %d (gap or duplicate)", *f.Seq, want)
		}
		out = append(out, f)
		want++
	}
	return out
}

func appendN(t *testing.T, l *sessionlog.Log, session string, n int) {
	t.Helper()
	for i := range n {
		if _, err := l.Append(context.Background(), session, "test/event", map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
}

// seed fills a session that has only session/created with events 1..n in batches of 25
// — setting up history for replay tests without n round trips. Appends under test go
// through sessionlog.Append.
func (e env) seed(t *testing.T, session string, n int) {
	t.Helper()
	seedPadded(t, e.log, dynamolocal.Client(e.stack.DynamoDBEndpoint), e.stack.Tables["LogTable"], session, n, 0)
}

// testLogOut is where the stack's logs go: DEVSTACK_LOG=1 shows them.
func testLogOut() io.Writer {
	if os.Getenv("DEVSTACK_LOG") == "1" {
		return os.Stderr
	}
	return io.Discard
}

func testLogLevel() string {
	if l := os.Getenv("DEVSTACK_LOG_LEVEL"); l != "" {
		return l
	}
	return "info"
}
