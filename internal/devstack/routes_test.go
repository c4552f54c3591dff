package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/gatewaytest"
	hangbound "github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/localgw"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/socket"
	"github.com/terret/terret-ws/internal/socket/sockettest"
	"github.com/terret/terret-ws/internal/tables"
)

// The socket route handlers as they run: bound to the local gateway's routes over
// DynamoDB Local, with the real delivery core posting through the gateway. Only the
// Controller — socket's interface to the agent runtime — is a recorder. socket's own
// tests check the same routes' decisions on fakes in memory.

type routeRig struct {
	gw     *gatewaytest.Gateway
	srv    *socket.Server
	ctrl   *sockettest.Recorder
	tokens *auth.Store
	conns  *connections.Store
	// disconnected receives the connection id of every $disconnect served.
	disconnected chan string
}

// TestRoutes runs the handler tests on one set of tables (creating them is the slow
// part), each on a gateway and Server of its own.
func TestRoutes(t *testing.T) {
	names := dynamotest.CreateTables(t)
	for _, tc := range []struct {
		name string
		test func(*testing.T, tables.Names)
	}{
		{"Message", testMessage},
		{"MessageCloses", testMessageCloses},
		{"MessageWithoutRuntime", testMessageWithoutRuntime},
		{"Refused", testRefused},
		{"Connect", testConnect},
		{"Disconnect", testDisconnect},
		{"OrderGap", testOrderGap},
		{"OrderWaitCap", testOrderWaitCap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t, names)
		})
	}
}

// newRouteRig serves the three routes of a Server (with the recorder as its Controller,
// or none if noRuntime) and the deliver function on a local gateway, over the tables
// names. Tests sharing tables use agent ids of their own.
func newRouteRig(t *testing.T, names tables.Names, noRuntime bool, orderWait time.Duration) *routeRig {
	t.Helper()
	return newRouteRigWith(t, names, noRuntime, orderWait, nil)
}

// newRouteRigWith is newRouteRig whose Server reads and writes the connection records
// through records(the store) when records is set.
func newRouteRigWith(t *testing.T, names tables.Names, noRuntime bool, orderWait time.Duration, records func(*connections.Store) socket.Records) *routeRig {
	t.Helper()
	db := dynamotest.Client(t)
	logger := sockettest.Logger()
	gw := gatewaytest.Start(t, logger, func(c *localgw.Config) {
		if orderWait > time.Minute {
			// A wait the test never lets run out: nor may the handlers' deadline,
			// which ends a waiting frame's wait too (served without the guarantee).
			c.Timeouts = map[string]time.Duration{localgw.RouteDefault: orderWait + time.Minute}
		}
	})
	r := &routeRig{
		gw: gw, ctrl: sockettest.NewRecorder(),
		tokens:       auth.New(db, names["ConnectionsTable"]),
		conns:        connections.New(db, names["ConnectionsTable"]),
		disconnected: make(chan string, 100),
	}
	log := sessionlog.New(db, names["LogTable"])
	d := delivery.New(delivery.Config{DeliverFunction: gatewaytest.DeliverFunction, Logger: logger}, log, r.conns, gw.Posts, gw.Invoke)
	var ctrl socket.Controller = r.ctrl
	if noRuntime {
		ctrl = nil
	}
	var recs socket.Records = r.conns
	if records != nil {
		recs = records(r.conns)
	}
	r.srv = socket.New(r.tokens, recs, log, d, ctrl, logger)
	if orderWait > 0 {
		r.srv.WithOrderWait(orderWait)
	}
	gw.Connect.Bind(lambda.NewHandler(r.srv.Connect))
	gw.Message.Bind(lambda.NewHandler(r.srv.Message))
	gw.Disconnect.Bind(lambda.NewHandler(func(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		resp, err := r.srv.Disconnect(ctx, req)
		r.disconnected <- req.RequestContext.ConnectionID
		return resp, err
	}))
	gw.Deliver.Bind(lambda.NewHandler(d.Handle))
	return r
}

// routeClient is one socket of the shared routeRig's, read as JSON frames.
type routeClient struct {
	t  *testing.T
	ws *websocket.Conn
	gc *gatewaytest.Client
}

// dial connects to agentID with token ("" for none); it does not wait for hello.
func (r *routeRig) dial(t *testing.T, agentID, token string, opts *websocket.DialOptions) (*routeClient, *http.Response) {
	t.Helper()
	gc, resp := r.gw.Dial(t, agentID, token, opts)
	return &routeClient{t: t, ws: gc.Conn, gc: gc}, resp
}

// connected dials agentID with a fresh token and reads hello.
func (r *routeRig) connected(t *testing.T, agentID string) *routeClient {
	t.Helper()
	tok, err := r.tokens.Create(context.Background(), agentID)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := r.dial(t, agentID, tok, nil)
	if f := c.next(); f["type"] != "hello" {
		t.Fatalf("first frame %v, want hello", f)
	}
	return c
}

// next returns the next frame; it fails the test if the socket ended instead.
func (c *routeClient) next() map[string]any {
	c.t.Helper()
	f, err := c.read()
	if err != nil {
		c.t.Fatalf("read: %v, want a frame", err)
	}
	return f
}

func (c *routeClient) read() (map[string]any, error) {
	b, err := c.gc.Next(hang())
	if err != nil {
		return nil, err
	}
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("frame %q: %w", b, err)
	}
	return f, nil
}

// closed reads the end of the socket and returns its close status.
func (c *routeClient) closed() websocket.StatusCode {
	c.t.Helper()
	f, err := c.read()
	if err == nil {
		c.t.Fatalf("frame %v, want the socket closed", f)
	}
	return websocket.CloseStatus(err)
}

func (c *routeClient) send(typ websocket.MessageType, b []byte) {
	c.t.Helper()
	if err := c.gc.Send(typ, b); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// nextCall returns the Controller's next call.
func (r *routeRig) nextCall(t *testing.T) sockettest.Call {
	t.Helper()
	select {
	case c := <-r.ctrl.Calls:
		return c
	case <-time.After(hang()):
		t.Fatal("no Controller call")
		return sockettest.Call{}
	}
}

// testMessage: each frame reaches the Controller method it names, and the Controller's
// answer reaches the routeClient as the protocol says. Every frame is numbered and followed
// by a numbered bad frame, whose bad_frame answer comes only after the frame took
// effect (the turnstile): so "no reply" is shown, not waited for. The turnstile's wait
// is long: with the default's 3 s, a loaded machine served a barrier without its
// predecessor (the documented bound) and its answer came first.
func testMessage(t *testing.T, names tables.Names) {
	r := newRouteRig(t, names, false, 10*time.Minute)
	long := strings.Repeat("x", agent.MaxTextBytes)
	tests := []struct {
		name     string
		frame    string // JSON without its closing brace: the order field is added
		binary   bool
		ctrlErr  error  // the Controller's answer
		wantCall string // "" for none
		wantCode protocol.Code
		wantMsg  string // the error frame's message, if wantCode
	}{
		{name: "inject", frame: `{"type":"inject","text":"hi","wake":true`, wantCall: "Inject ID hi true"},
		{name: "steer", frame: `{"type":"inject","text":"<b>","wake":false`, wantCall: "Inject ID <b> false"},
		{name: "inject over the event bound", frame: `{"type":"inject","text":"` + long + `x","wake":false`,
			ctrlErr: &agent.TextTooLongError{Bytes: agent.MaxTextBytes + 3}, wantCall: "Inject ID " + long + "x false", wantCode: protocol.CodeBadFrame,
			wantMsg: fmt.Sprintf("inject: field \"text\" is %d bytes JSON-encoded, at most %d allowed in one event", agent.MaxTextBytes+3, agent.MaxTextBytes)},
		{name: "cancel", frame: `{"type":"cancel","reason":"stop"`, wantCall: "Cancel ID stop"},
		{name: "cancel with no turn", frame: `{"type":"cancel"`, ctrlErr: agent.ErrNotRunning, wantCall: "Cancel ID",
			wantCode: protocol.CodeNotRunning, wantMsg: "no turn is running"},
		{name: "approve", frame: `{"type":"approve","call_id":"c1"`, wantCall: "Approve ID c1"},
		{name: "approve a stale call", frame: `{"type":"approve","call_id":"c2"`, ctrlErr: agent.ErrStaleCall, wantCall: "Approve ID c2",
			wantCode: protocol.CodeStaleCall, wantMsg: "no standing approval request for that call_id"},
		{name: "deny without approvals", frame: `{"type":"deny","call_id":"c3","reason":"no"`, ctrlErr: agent.ErrUnsupported, wantCall: "Deny ID c3 no",
			wantCode: protocol.CodeUnsupported, wantMsg: "approvals are not mounted: run terret dev with --approvals, or deploy with Approvals=true"},
		{name: "set_model", frame: `{"type":"set_model","role":"main","spec":"scripted"`, wantCall: "SetModel ID main scripted"},
		{name: "set_model refused", frame: `{"type":"set_model","role":"main","spec":"bedrock/x"`, ctrlErr: agent.ErrBadSpec,
			wantCall: "SetModel ID main bedrock/x", wantCode: protocol.CodeBadFrame, wantMsg: "set_model: invalid role or model spec"},
		{name: "set_policy", frame: `{"type":"set_policy","patterns":["a*","b"]`, wantCall: "SetPolicy ID [a* b]"},
		{name: "set_policy too large for an event", frame: `{"type":"set_policy","patterns":["a"]`, ctrlErr: sessionlog.ErrTooLarge,
			wantCall: "SetPolicy ID [a]", wantCode: protocol.CodeBadFrame, wantMsg: "frame content is too large for one event"},
		{name: "unknown type", frame: `{"type":"nope"`, wantCode: protocol.CodeBadFrame, wantMsg: `unknown frame type "nope"`},
	}
	a1 := agentFor(t, "a1")
	c := r.connected(t, a1)
	order := 0
	for _, tc := range tests {
		r.ctrl.FailWith(strings.Fields(tc.wantCall + " x")[0], tc.ctrlErr)
		order++
		c.send(websocket.MessageText, fmt.Appendf(nil, `%s,"order":%d}`, tc.frame, order))
		order++
		c.send(websocket.MessageText, fmt.Appendf(nil, `{"type":"barrier","order":%d}`, order))
		if tc.wantCall != "" {
			if got, want := r.nextCall(t).What, strings.Replace(tc.wantCall, "ID", a1, 1); got != want {
				t.Errorf("%s: Controller call %q, want %q", tc.name, got, want)
			}
		}
		if tc.wantCode != "" {
			f := c.next()
			if f["type"] != "error" || f["code"] != string(tc.wantCode) || f["message"] != tc.wantMsg {
				t.Errorf("%s: answered %v, want error %s %q", tc.name, f, tc.wantCode, tc.wantMsg)
			}
		}
		if f := c.next(); f["code"] != "bad_frame" || !strings.Contains(fmt.Sprint(f["message"]), "barrier") {
			t.Errorf("%s: answered %v, want only the barrier's bad_frame", tc.name, f)
		}
		select {
		case extra := <-r.ctrl.Calls:
			t.Errorf("%s: unexpected Controller call %q", tc.name, extra.What)
		default:
		}
	}
	// A binary frame is refused, and the socket stays open.
	c.send(websocket.MessageBinary, []byte(`{"type":"cancel"}`))
	if f := c.next(); f["code"] != "bad_frame" || f["message"] != "frames must be JSON text frames" {
		t.Errorf("binary frame answered %v, want bad_frame \"frames must be JSON text frames\"", f)
	}
}

// testMessageCloses: errors that end the connection — the agent taken over (the
// Controller finds the sender no longer owns it) and unexpected failures — send their
// refusal frame, and the socket closes. (socket's TestInternalAnswersCounted checks
// which of them count as InternalErrors.)
func testMessageCloses(t *testing.T, names tables.Names) {
	r := newRouteRig(t, names, false, 0)
	tests := []struct {
		name    string
		err     error
		want    protocol.Code
		wantMsg string
	}{
		{"not the owner", fmt.Errorf("agent: inject: %w", connections.ErrNotOwner), protocol.CodeSuperseded, "a newer connection took over this agent"},
		{"unexpected", errors.New("dynamodb: throttled"), protocol.CodeInternal, "internal error: resubscribe from your last durable seq"},
	}
	for i, tc := range tests {
		c := r.connected(t, agentFor(t, fmt.Sprint(i)))
		r.ctrl.FailWith("Inject", tc.err)
		c.send(websocket.MessageText, []byte(`{"type":"inject","text":"x","wake":false}`))
		r.nextCall(t)
		if f := c.next(); f["type"] != "error" || f["code"] != string(tc.want) || f["message"] != tc.wantMsg {
			t.Errorf("%s: answered %v, want error %s %q", tc.name, f, tc.want, tc.wantMsg)
		}
		if got := c.closed(); got != websocket.StatusNormalClosure {
			t.Errorf("%s: closed with %d, want 1000 after the error frame", tc.name, got)
		}
	}
}

// testMessageWithoutRuntime: with no agent runtime mounted, agent frames answer
// unsupported and the socket stays open; subscribe still works.
func testMessageWithoutRuntime(t *testing.T, names tables.Names) {
	r := newRouteRig(t, names, true, 0)
	c := r.connected(t, agentFor(t, "a1"))
	c.send(websocket.MessageText, []byte(`{"type":"inject","text":"x","wake":true}`))
	if f := c.next(); f["code"] != "unsupported" || f["message"] != "this deployment does not mount the plugin this frame needs" {
		t.Fatalf("inject answered %v, want unsupported", f)
	}
	c.send(websocket.MessageText, []byte(`{"type":"subscribe","from_seq":0}`))
	if f := c.next(); f["seq"] != float64(0) || f["type"] != "session/created" {
		t.Fatalf("subscribe answered %v, want session/created at seq 0", f)
	}
}

// testRefused: frames from a connection that may not send are refused with the
// refusal frame its state calls for, and the socket closes.
func testRefused(t *testing.T, names tables.Names) {
	r := newRouteRig(t, names, false, 0)
	ctx := context.Background()
	tests := []struct {
		name  string
		state connections.State // "" forgets the record
		want  protocol.Code
	}{
		{"no record", "", protocol.CodeUnauthorized},
		{"superseded", connections.StateSuperseded, protocol.CodeSuperseded},
		{"lagged", connections.StateLagged, protocol.CodeUnauthorized},
	}
	for i, tc := range tests {
		agentID := agentFor(t, fmt.Sprint(i))
		c := r.connected(t, agentID)
		conn := r.connOf(t, agentID)
		var err error
		if tc.state == "" {
			err = r.conns.Forget(ctx, conn, agentID)
		} else {
			err = r.conns.SetState(ctx, conn, tc.state)
		}
		if err != nil {
			t.Fatal(err)
		}
		c.send(websocket.MessageText, []byte(`{"type":"inject","text":"x","wake":true}`))
		want := protocol.Refusal(tc.want)
		if f := c.next(); f["type"] != "error" || f["code"] != string(want.Code) || f["message"] != want.Message {
			t.Errorf("%s: answered %v, want error %s %q", tc.name, f, want.Code, want.Message)
		}
		if got := c.closed(); got != websocket.StatusNormalClosure {
			t.Errorf("%s: closed with %d, want 1000", tc.name, got)
		}
		select {
		case got := <-r.ctrl.Calls:
			t.Errorf("%s: Controller called (%q) for a refused frame", tc.name, got.What)
		default:
		}
	}
}

// agentFor is an agent id of the test's own (tests share tables).
func agentFor(t *testing.T, n string) string {
	return strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()) + "-" + n
}

// connOf is the connection that owns agentID.
func (r *routeRig) connOf(t *testing.T, agentID string) string {
	t.Helper()
	o, err := r.conns.Owner(context.Background(), agentID)
	if err != nil {
		t.Fatal(err)
	}
	return o.ConnID
}

// testConnect: the token decides; a refused routeClient is still upgraded, then sent
// unauthorized and closed; a routeClient offering terret.v1 gets it echoed either way it
// authenticates.
func testConnect(t *testing.T, names tables.Names) {
	r := newRouteRig(t, names, false, 0)
	a1, a2 := agentFor(t, "a1"), agentFor(t, "a2")
	tok, err := r.tokens.Create(context.Background(), a1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		agentID      string
		header       string   // the Authorization token
		subprotocols []string // offered
		wantProto    string   // echoed
		wantHello    bool
	}{
		{name: "header token", agentID: a1, header: tok, wantHello: true},
		{name: "header token offering terret.v1", agentID: a1, header: tok, subprotocols: []string{"terret.v1"}, wantProto: "terret.v1", wantHello: true},
		{name: "browser token", agentID: a1, subprotocols: []string{"terret.v1", auth.SubprotocolBearer + tok}, wantProto: "terret.v1", wantHello: true},
		{name: "no token", agentID: a1},
		{name: "wrong token", agentID: a1, header: "tt_nope"},
		{name: "another agent's token", agentID: a2, header: tok},
	}
	for _, tc := range tests {
		c, resp := r.dial(t, tc.agentID, tc.header, &websocket.DialOptions{Subprotocols: tc.subprotocols})
		if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != tc.wantProto {
			t.Errorf("%s: subprotocol %q, want %q", tc.name, got, tc.wantProto)
		}
		f := c.next()
		if tc.wantHello {
			if f["type"] != "hello" || f["session_id"] != tc.agentID {
				t.Errorf("%s: first frame %v, want hello for %s", tc.name, f, tc.agentID)
			}
			c.ws.Close(websocket.StatusNormalClosure, "")
			continue
		}
		want := protocol.Refusal(protocol.CodeUnauthorized)
		if f["code"] != string(want.Code) || f["message"] != want.Message {
			t.Errorf("%s: first frame %v, want error %s %q", tc.name, f, want.Code, want.Message)
		}
		if got := c.closed(); got != websocket.StatusNormalClosure {
			t.Errorf("%s: closed with %d, want 1000", tc.name, got)
		}
	}
}

// testDisconnect: $disconnect forgets the connection's record and records no departure
// for it (an accepted connection's hello loop reads the record itself); a second one
// (API Gateway calls it best-effort, and a refused socket has no record) is harmless,
// and records the departure of the connection it finds no record of, which ends a
// refused connection's unauthorized-frame loop.
func testDisconnect(t *testing.T, names tables.Names) {
	r := newRouteRig(t, names, false, 0)
	a1 := agentFor(t, "a1")
	c := r.connected(t, a1)
	conn := r.connOf(t, a1)
	c.ws.Close(websocket.StatusNormalClosure, "bye")
	for got := range r.disconnected {
		if got == conn {
			break
		}
	}
	if _, err := r.conns.Conn(context.Background(), conn); !errors.Is(err, connections.ErrNotFound) {
		t.Fatalf("record after $disconnect: %v, want ErrNotFound", err)
	}
	if departed, err := r.conns.Departed(context.Background(), conn); err != nil || departed {
		t.Errorf("departure of an accepted connection after $disconnect: %v, %v; want none", departed, err)
	}
	resp, err := r.srv.Disconnect(context.Background(), events.APIGatewayWebsocketProxyRequest{
		RequestContext: events.APIGatewayWebsocketProxyRequestContext{ConnectionID: conn}})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("second $disconnect: %d %v, want 200", resp.StatusCode, err)
	}
	if departed, err := r.conns.Departed(context.Background(), conn); err != nil || !departed {
		t.Errorf("departure after a $disconnect that found no record: %v, %v; want recorded", departed, err)
	}
}

// testOrderGap: a numbered frame whose predecessor never arrives waits OrderWait from
// its receipt, then takes effect without the order guarantee (docs/protocol.md,
// "Ordering"); the predecessor arriving late, its number already passed, takes effect
// at once; the next number is in order again.
func testOrderGap(t *testing.T, names tables.Names) {
	const wait = 300 * time.Millisecond // OrderWait for this Server only
	r := newRouteRig(t, names, false, wait)
	a1 := agentFor(t, "a1")
	c := r.connected(t, a1)
	conn := r.connOf(t, a1)
	mark := func() int64 {
		t.Helper()
		cn, err := r.conns.Conn(context.Background(), conn)
		if err != nil {
			t.Fatal(err)
		}
		return cn.Order
	}
	tests := []struct {
		name        string
		order       int64
		wantInOrder *bool // nil: either (frame 1 has no predecessor, whenever it comes)
		wantWaited  bool  // served no earlier than OrderWait after its receipt
	}{
		{"frame 2 before frame 1", 2, ptr(false), true},
		{"frame 1, late", 1, nil, false},
		{"frame 3", 3, ptr(true), false},
	}
	for _, tc := range tests {
		c.send(websocket.MessageText, fmt.Appendf(nil, `{"type":"set_policy","patterns":["p%d"],"order":%d}`, tc.order, tc.order))
		got := r.nextCall(t)
		if want := fmt.Sprintf("SetPolicy %s [p%d]", a1, tc.order); got.What != want {
			t.Fatalf("%s: Controller call %q, want %q", tc.name, got.What, want)
		}
		if got.Stamp.Order != tc.order || (tc.wantInOrder != nil && got.Stamp.InOrder != *tc.wantInOrder) {
			t.Errorf("%s: served with stamp %+v, want order %d, InOrder %v", tc.name, got.Stamp, tc.order, *tc.wantInOrder)
		}
		if deadline := time.UnixMilli(got.Stamp.At).Add(wait); tc.wantWaited && got.At.Before(deadline) {
			t.Errorf("%s: served %v after its receipt, want no earlier than OrderWait (%v)", tc.name, got.At.Sub(time.UnixMilli(got.Stamp.At)), wait)
		}
		// The mark follows the Controller call; the next frame is sent once it shows, so
		// that the short OrderWait is never what the next frame's outcome depends on.
		hangbound.Until(t, fmt.Sprintf("%s: turnstile mark %d", tc.name, min(tc.order, 2)), func() bool { return mark() >= min(tc.order, 2) })
	}
	// The answer to a numbered bad frame comes once the frame before it took effect.
	c.send(websocket.MessageText, []byte(`{"type":"barrier","order":4}`))
	if f := c.next(); f["code"] != "bad_frame" {
		t.Fatalf("answered %v, want the barrier's bad_frame", f)
	}
	if got := mark(); got < 3 {
		t.Errorf("turnstile mark %d once frame 3 took effect, want at least 3", got)
	}
}

// testOrderWaitCap: behind a gap in the numbering at most socket.MaxWaitingFrames frames of a
// connection wait; each further one is answered bad_frame at once, before any waiting
// one is served, and is never applied. Filling the gap serves the waiting ones in
// order; the wait count is back to zero after.
func testOrderWaitCap(t *testing.T, names tables.Names) {
	entered := make(chan string, 2*socket.MaxWaitingFrames)
	// The wait is long: the test never depends on it running out.
	r := newRouteRigWith(t, names, false, 10*time.Minute, func(s *connections.Store) socket.Records { return waitWatch{s, entered} })
	a1 := agentFor(t, "a1")
	c := r.connected(t, a1)
	policy := func(order int64) []byte {
		return fmt.Appendf(nil, `{"type":"set_policy","patterns":["p%d"],"order":%d}`, order, order)
	}
	// Frame 1 is held back: frames 2 … socket.MaxWaitingFrames+1 all wait.
	for o := int64(2); o <= socket.MaxWaitingFrames+1; o++ {
		c.send(websocket.MessageText, policy(o))
	}
	for range socket.MaxWaitingFrames {
		select {
		case <-entered:
		case <-time.After(hang()):
			t.Fatal("fewer frames than socket.MaxWaitingFrames entered the wait")
		}
	}
	const excess = 3
	for o := int64(socket.MaxWaitingFrames + 2); o < socket.MaxWaitingFrames+2+excess; o++ {
		c.send(websocket.MessageText, policy(o))
	}
	for i := range excess {
		f := c.next()
		if f["code"] != "bad_frame" || !strings.Contains(fmt.Sprint(f["message"]), "already wait for an earlier order") {
			t.Fatalf("answer %d to a frame over the cap: %v, want bad_frame", i, f)
		}
	}
	select {
	case got := <-r.ctrl.Calls:
		t.Fatalf("Controller call %q while frame 1 was missing", got.What)
	default:
	}
	c.send(websocket.MessageText, policy(1))
	for o := int64(1); o <= socket.MaxWaitingFrames+1; o++ {
		if got, want := r.nextCall(t).What, fmt.Sprintf("SetPolicy %s [p%d]", a1, o); got != want {
			t.Fatalf("Controller call %q, want %q (in order)", got, want)
		}
	}
	// A barrier after the last waiting frame: its answer comes once that one took
	// effect; no refused frame was applied meanwhile.
	c.send(websocket.MessageText, fmt.Appendf(nil, `{"type":"barrier","order":%d}`, socket.MaxWaitingFrames+2))
	if f := c.next(); f["code"] != "bad_frame" || !strings.Contains(fmt.Sprint(f["message"]), "unknown frame type") {
		t.Fatalf("barrier answered %v", f)
	}
	select {
	case got := <-r.ctrl.Calls:
		t.Fatalf("Controller call %q: a refused frame was applied", got.What)
	default:
	}
	// The barrier may have waited for the mark of the last frame (written after its
	// Controller call): its entry, made before its answer, is in the channel by now.
	select {
	case <-entered:
	default:
	}
	// The waits were left: a new gap admits a frame into the wait again.
	c.send(websocket.MessageText, policy(socket.MaxWaitingFrames+4))
	select {
	case <-entered:
	case <-time.After(hang()):
		t.Fatal("a frame behind a new gap did not enter the wait")
	}
}

// waitWatch is the connection records, reporting on entered the connection id of each
// frame let into the turnstile's wait.
type waitWatch struct {
	*connections.Store
	entered chan<- string
}

func (w waitWatch) EnterWait(ctx context.Context, connID string, max int64) (bool, error) {
	ok, err := w.Store.EnterWait(ctx, connID, max)
	if ok && err == nil {
		w.entered <- connID
	}
	return ok, err
}

func ptr[T any](v T) *T { return &v }
