package socket

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/socket/sockettest"
)

// The routes' decisions, on fakes in memory of the interfaces they use (deps.go,
// turnstile.go): what each route asks of the stores and what it has a client told
// (Outbound). The same routes over DynamoDB Local, the local gateway and the real
// delivery core are devstack's TestRoutes (and every whole-stack test).

// errBoom is an unexpected failure of a store.
var errBoom = errors.New("boom")

var _ Controller = (*sockettest.Recorder)(nil)

// journal is the fakes' shared record of calls, in order.
type journal struct {
	mu    sync.Mutex
	lines []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, fmt.Sprintf(format, args...))
}

func (j *journal) String() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(j.lines, "; ")
}

// fakeTokens admits the token "tok" (role, "" for a driver) with hash "h".
type fakeTokens struct {
	j        *journal
	role     string
	checkErr error
}

func (f *fakeTokens) CheckRole(_ context.Context, agentID, token string) (string, string, error) {
	if f.checkErr != nil {
		return "", "", f.checkErr
	}
	if token != "tok" {
		return "", "", auth.ErrUnauthorized
	}
	role := f.role
	if role == "" {
		role = auth.RoleDriver
	}
	return "h", role, nil
}

func (f *fakeTokens) Condition(agentID, hash string) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{}}
}

func (f *fakeTokens) Used(_ context.Context, agentID, hash string) error {
	f.j.add("Used %s %s", agentID, hash)
	return nil
}

// fakeConns is the connection records: conns by id, read in turn from reads (each
// look of the turnstile takes the next, the last repeats) when set; err[method]
// answers a method.
type fakeConns struct {
	j     *journal
	mu    sync.Mutex
	conns map[string]connections.Conn
	reads []connections.Conn
	owner connections.Owner // what Claim and Observe supersede
	full  bool              // EnterWait finds the wait full
	err   map[string]error
}

func (f *fakeConns) fail(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err[method]
}

func (f *fakeConns) Claim(_ context.Context, agentID, connID, hash string, check *types.ConditionCheck, also ...types.TransactWriteItem) (connections.Owner, error) {
	f.j.add("Claim %s %s %s also=%d", agentID, connID, hash, len(also))
	if check == nil {
		return connections.Owner{}, errors.New("claim without the token's condition")
	}
	return f.owner, f.fail("Claim")
}

func (f *fakeConns) Observe(_ context.Context, agentID, connID, hash string, check *types.ConditionCheck, max int) (connections.Owner, error) {
	f.j.add("Observe %s %s %s", agentID, connID, hash)
	return f.owner, f.fail("Observe")
}

func (f *fakeConns) Conn(_ context.Context, connID string) (connections.Conn, error) {
	if err := f.fail("Conn"); err != nil {
		return connections.Conn{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reads) > 0 {
		c := f.reads[0]
		if len(f.reads) > 1 {
			f.reads = f.reads[1:]
		}
		if c.ID == "" {
			return connections.Conn{}, fmt.Errorf("%w: connection %s", connections.ErrNotFound, connID)
		}
		return c, nil
	}
	c, found := f.conns[connID]
	if !found {
		return connections.Conn{}, fmt.Errorf("%w: connection %s", connections.ErrNotFound, connID)
	}
	return c, nil
}

func (f *fakeConns) Forget(_ context.Context, connID, key string) error {
	f.j.add("Forget %s %s", connID, key)
	return f.fail("Forget")
}

func (f *fakeConns) Depart(_ context.Context, connID string) error {
	f.j.add("Depart %s", connID)
	return f.fail("Depart")
}

func (f *fakeConns) EnterWait(_ context.Context, connID string, max int64) (bool, error) {
	f.j.add("EnterWait %s %d", connID, max)
	return !f.full, f.fail("EnterWait")
}

func (f *fakeConns) LeaveWait(_ context.Context, connID string) error {
	f.j.add("LeaveWait %s", connID)
	return nil
}

func (f *fakeConns) MarkOrder(_ context.Context, connID string, order int64) error {
	f.j.add("MarkOrder %s %d", connID, order)
	return nil
}

// fakeLog is the session log.
type fakeLog struct {
	j   *journal
	err error
}

func (f *fakeLog) Create(_ context.Context, agentID string) (bool, error) {
	f.j.add("Create %s", agentID)
	return true, f.err
}

// fakeOut is Outbound: it records what a client would be told; err[method] answers.
type fakeOut struct {
	j   *journal
	err map[string]error
}

func (f *fakeOut) Welcome(_ context.Context, agentID string, superseded connections.Owner) error {
	f.j.add("Welcome %s superseding %q", agentID, superseded.ConnID)
	return f.err["Welcome"]
}

func (f *fakeOut) TurnAway(_ context.Context, connID string) error {
	f.j.add("TurnAway %s", connID)
	return f.err["TurnAway"]
}

func (f *fakeOut) SubscribeFrame(_ context.Context, c connections.Conn, sub protocol.Subscribe, recorded func()) error {
	f.j.add("Subscribe %s", c.ID)
	recorded()
	return f.err["SubscribeFrame"]
}

func (f *fakeOut) Reply(_ context.Context, c connections.Conn, e protocol.Error) error {
	f.j.add("Reply %s %s %s", c.ID, e.Code, e.Message)
	return nil
}

func (f *fakeOut) Refuse(_ context.Context, connID string, code protocol.Code) error {
	f.j.add("Refuse %s %s", connID, code)
	return nil
}

func (f *fakeOut) Fail(_ context.Context, connID string) error {
	f.j.add("Fail %s", connID)
	return nil
}

// fakes is a Server over fakes, all recording in j.
type fakes struct {
	j      *journal
	tokens *fakeTokens
	conns  *fakeConns
	log    *fakeLog
	out    *fakeOut
	ctrl   *sockettest.Recorder
	srv    *Server
}

func newFakes(noRuntime bool) *fakes {
	j := &journal{}
	f := &fakes{j: j, tokens: &fakeTokens{j: j}, conns: &fakeConns{j: j, conns: map[string]connections.Conn{}, err: map[string]error{}},
		log: &fakeLog{j: j}, out: &fakeOut{j: j, err: map[string]error{}}, ctrl: sockettest.NewRecorder()}
	var ctrl Controller = f.ctrl
	if noRuntime {
		ctrl = nil
	}
	f.srv = New(f.tokens, f.conns, f.log, f.out, ctrl, sockettest.Logger())
	return f
}

func wsReq(connID string, headers map[string]string, query map[string]string) events.APIGatewayWebsocketProxyRequest {
	req := events.APIGatewayWebsocketProxyRequest{Headers: headers, QueryStringParameters: query}
	req.RequestContext.ConnectionID = connID
	return req
}

func TestConnectDecisions(t *testing.T) {
	bearer := map[string]string{"Authorization": "Bearer tok"}
	tests := []struct {
		name       string
		headers    map[string]string
		setup      func(*fakes)
		wantStatus int
		wantProto  string // the Sec-WebSocket-Protocol answered
		want       string // the journal
	}{
		{name: "driver", headers: bearer, wantStatus: 200,
			want: `Create a1; Claim a1 c1 h also=0; Used a1 h; Welcome a1 superseding ""`},
		{name: "driver supersedes the owner", headers: bearer, wantStatus: 200,
			setup: func(f *fakes) { f.conns.owner = connections.Owner{ConnID: "c0"} },
			want:  `Create a1; Claim a1 c1 h also=0; Used a1 h; Welcome a1 superseding "c0"`},
		{name: "owner claim in the transaction", headers: bearer, wantStatus: 200,
			setup: func(f *fakes) {
				f.srv.WithOwnerClaim(func(a, c string) types.TransactWriteItem { return types.TransactWriteItem{} })
			},
			want: `Create a1; Claim a1 c1 h also=1; Used a1 h; Welcome a1 superseding ""`},
		{name: "token as subprotocol", headers: map[string]string{"Sec-WebSocket-Protocol": auth.Subprotocol + ", " + auth.SubprotocolBearer + "tok"},
			wantStatus: 200, wantProto: auth.Subprotocol,
			want: `Create a1; Claim a1 c1 h also=0; Used a1 h; Welcome a1 superseding ""`},
		{name: "bad token turned away", headers: map[string]string{"Authorization": "Bearer nope"}, wantStatus: 200,
			want: `TurnAway c1`},
		{name: "no token turned away", wantStatus: 200, want: `TurnAway c1`},
		{name: "turn away fails", headers: map[string]string{"Authorization": "Bearer nope"}, wantStatus: 401,
			setup: func(f *fakes) { f.out.err["TurnAway"] = errBoom }, want: `TurnAway c1`},
		{name: "token check fails", headers: bearer, wantStatus: 500,
			setup: func(f *fakes) { f.tokens.checkErr = errBoom }},
		{name: "log create fails", headers: bearer, wantStatus: 500,
			setup: func(f *fakes) { f.log.err = errBoom }, want: `Create a1`},
		{name: "token gone at the claim", headers: bearer, wantStatus: 200,
			setup: func(f *fakes) { f.conns.err["Claim"] = connections.ErrTokenGone },
			want:  `Create a1; Claim a1 c1 h also=0; TurnAway c1`},
		{name: "claim fails", headers: bearer, wantStatus: 500,
			setup: func(f *fakes) { f.conns.err["Claim"] = errBoom }, want: `Create a1; Claim a1 c1 h also=0`},
		{name: "welcome fails", headers: bearer, wantStatus: 500,
			setup: func(f *fakes) { f.out.err["Welcome"] = errBoom },
			want:  `Create a1; Claim a1 c1 h also=0; Used a1 h; Welcome a1 superseding ""`},
		{name: "no origin header", headers: bearer, wantStatus: 403,
			setup: func(f *fakes) { f.srv.RequireOrigin("s3cret") }},
		{name: "origin header", headers: map[string]string{"Authorization": "Bearer tok", OriginHeader: "s3cret"}, wantStatus: 200,
			setup: func(f *fakes) { f.srv.RequireOrigin("s3cret") },
			want:  `Create a1; Claim a1 c1 h also=0; Used a1 h; Welcome a1 superseding ""`},
		{name: "observer", headers: bearer, wantStatus: 200,
			setup: func(f *fakes) { f.tokens.role = auth.RoleObserver },
			want:  `Create a1; Observe a1 c1 h; Welcome ` + connections.ObserverSeat("a1", "c1") + ` superseding ""; Used a1 h`},
		{name: "observer's token gone", headers: bearer, wantStatus: 200,
			setup: func(f *fakes) { f.tokens.role = auth.RoleObserver; f.conns.err["Observe"] = connections.ErrTokenGone },
			want:  `Create a1; Observe a1 c1 h; TurnAway c1`},
		{name: "observer seat fails", headers: bearer, wantStatus: 500,
			setup: func(f *fakes) { f.tokens.role = auth.RoleObserver; f.conns.err["Observe"] = errBoom },
			want:  `Create a1; Observe a1 c1 h`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakes(false)
			if tc.setup != nil {
				tc.setup(f)
			}
			resp, err := f.srv.Connect(context.Background(), wsReq("c1", tc.headers, map[string]string{"agent_id": "a1"}))
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantStatus || resp.Headers["Sec-WebSocket-Protocol"] != tc.wantProto {
				t.Errorf("answered %d %v, want %d with subprotocol %q", resp.StatusCode, resp.Headers, tc.wantStatus, tc.wantProto)
			}
			if got := f.j.String(); got != tc.want {
				t.Errorf("calls\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestDisconnectDecisions(t *testing.T) {
	tests := []struct {
		name       string
		conn       *connections.Conn
		err        map[string]error
		wantStatus int
		want       string
	}{
		{name: "driver", conn: &connections.Conn{ID: "c1", AgentID: "a1"}, wantStatus: 200, want: "Forget c1 a1"},
		{name: "observer", conn: &connections.Conn{ID: "c1", AgentID: "a1", Role: connections.RoleObserver}, wantStatus: 200,
			want: "Forget c1 " + connections.ObserverSeat("a1", "c1")},
		{name: "no record: departure", wantStatus: 200, want: "Depart c1"},
		{name: "departure fails", err: map[string]error{"Depart": errBoom}, wantStatus: 500, want: "Depart c1"},
		{name: "lookup fails", err: map[string]error{"Conn": errBoom}, wantStatus: 500},
		{name: "forget fails", conn: &connections.Conn{ID: "c1", AgentID: "a1"}, err: map[string]error{"Forget": errBoom},
			wantStatus: 500, want: "Forget c1 a1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakes(false)
			if tc.conn != nil {
				f.conns.conns[tc.conn.ID] = *tc.conn
			}
			if tc.err != nil {
				f.conns.err = tc.err
			}
			resp, err := f.srv.Disconnect(context.Background(), wsReq("c1", nil, nil))
			if err != nil || resp.StatusCode != tc.wantStatus {
				t.Errorf("answered %d, %v; want %d", resp.StatusCode, err, tc.wantStatus)
			}
			if got := f.j.String(); got != tc.want {
				t.Errorf("calls\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestMessageDecisions(t *testing.T) {
	authorized := connections.Conn{ID: "c1", AgentID: "a1", State: connections.StateAuthorized}
	with := func(c connections.Conn, edit func(*connections.Conn)) connections.Conn { edit(&c); return c }
	observer := with(authorized, func(c *connections.Conn) { c.Role = connections.RoleObserver })
	at2 := with(authorized, func(c *connections.Conn) { c.Order = 2 })
	revoked := with(authorized, func(c *connections.Conn) { c.State = connections.StateUnauthorized })
	superseded := with(authorized, func(c *connections.Conn) { c.State = connections.StateSuperseded })
	tests := []struct {
		name      string
		conn      *connections.Conn  // nil: no record
		reads     []connections.Conn // the record as read in turn, Message's read first (zero ID: gone)
		body      string
		binary    bool
		noRuntime bool
		setup     func(*fakes)
		wantCall  string // the Controller's call, "" for none
		inOrder   bool   // the call's stamp
		want      string // the journal
	}{
		{name: "inject", conn: &authorized, body: `{"type":"inject","text":"hi","wake":true}`, wantCall: "Inject a1 hi true"},
		{name: "cancel with no turn", conn: &authorized, body: `{"type":"cancel"}`, wantCall: "Cancel a1",
			setup: func(f *fakes) { f.ctrl.FailWith("Cancel", control.ErrNotRunning) }, want: "Reply c1 not_running no turn is running"},
		{name: "inject after the agent was taken over", conn: &authorized, body: `{"type":"inject","text":"x","wake":false}`, wantCall: "Inject a1 x false",
			setup: func(f *fakes) { f.ctrl.FailWith("Inject", control.ErrNotOwner) }, want: "Fail c1"},
		{name: "controller fails", conn: &authorized, body: `{"type":"cancel"}`, wantCall: "Cancel a1",
			setup: func(f *fakes) { f.ctrl.FailWith("Cancel", errBoom) }, want: "Fail c1"},
		{name: "superseded while served", conn: &authorized, body: `{"type":"cancel"}`, wantCall: "Cancel a1",
			setup: func(f *fakes) { f.ctrl.FailWith("Cancel", connections.ErrNotOwner) }, want: "Refuse c1 superseded"},
		{name: "no runtime", conn: &authorized, noRuntime: true, body: `{"type":"cancel"}`,
			want: "Reply c1 unsupported this deployment does not mount the plugin this frame needs"},
		{name: "observer's control frame", conn: &observer, body: `{"type":"cancel"}`,
			want: "Reply c1 forbidden this connection's token is an observer's: it may subscribe and read, and send no control frame"},
		{name: "unknown type", conn: &authorized, body: `{"type":"nope"}`, want: `Reply c1 bad_frame unknown frame type "nope"`},
		{name: "binary", conn: &authorized, binary: true, body: `{"type":"cancel"}`, want: "Reply c1 bad_frame frames must be JSON text frames"},
		{name: "no record", body: `{"type":"cancel"}`, want: "Refuse c1 unauthorized"},
		{name: "lookup fails", body: `{"type":"cancel"}`, setup: func(f *fakes) { f.conns.err["Conn"] = errBoom }, want: "Fail c1"},
		{name: "superseded connection", conn: &superseded, body: `{"type":"cancel"}`, want: "Refuse c1 superseded"},
		{name: "revoked connection", conn: &revoked, body: `{"type":"cancel"}`, want: "Refuse c1 unauthorized"},
		{name: "subscribe", conn: &authorized, body: `{"type":"subscribe","from_seq":1,"order":1}`, want: "Subscribe c1; MarkOrder c1 1"},
		{name: "next in order", conn: &at2, body: `{"type":"cancel","order":3}`, wantCall: "Cancel a1", inOrder: true, want: "MarkOrder c1 3"},
		{name: "duplicate order", conn: &at2, body: `{"type":"cancel","order":2}`, wantCall: "Cancel a1", want: "MarkOrder c1 2"},
		{name: "waits for its predecessor", conn: &authorized, reads: []connections.Conn{authorized, at2}, body: `{"type":"cancel","order":3}`,
			wantCall: "Cancel a1", inOrder: true, want: "EnterWait c1 16; MarkOrder c1 3; LeaveWait c1"},
		{name: "gap: served without its predecessor", conn: &authorized, body: `{"type":"cancel","order":3}`,
			setup:    func(f *fakes) { f.srv.WithOrderWait(20 * time.Millisecond) },
			wantCall: "Cancel a1", want: "EnterWait c1 16; MarkOrder c1 3; LeaveWait c1"},
		{name: "wait full", conn: &authorized, body: `{"type":"cancel","order":3}`, setup: func(f *fakes) { f.conns.full = true },
			want: `EnterWait c1 16; Reply c1 bad_frame order 3: 16 frames of this connection already wait for an earlier order (a gap in the numbering?); this frame is not applied`},
		{name: "wait cannot be entered", conn: &authorized, body: `{"type":"cancel","order":3}`,
			setup: func(f *fakes) { f.conns.err["EnterWait"] = errBoom }, want: "EnterWait c1 16; Fail c1"},
		{name: "record gone while waiting", conn: &authorized, reads: []connections.Conn{authorized, {}}, body: `{"type":"cancel","order":3}`,
			want: "EnterWait c1 16; LeaveWait c1; Refuse c1 unauthorized"},
		{name: "revoked while waiting", conn: &authorized, reads: []connections.Conn{authorized, revoked}, body: `{"type":"cancel","order":3}`,
			want: "EnterWait c1 16; Refuse c1 unauthorized; LeaveWait c1"},
		{name: "superseded while waiting", conn: &authorized, reads: []connections.Conn{authorized, superseded}, body: `{"type":"cancel","order":3}`,
			want: "EnterWait c1 16; Refuse c1 superseded; LeaveWait c1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakes(tc.noRuntime)
			f.srv.WithOrderWait(time.Hour) // a wait the test never lets run out, unless setup shortens it
			if tc.conn != nil {
				f.conns.conns[tc.conn.ID] = *tc.conn
			}
			if tc.setup != nil {
				tc.setup(f)
			}
			req := wsReq("c1", nil, nil)
			req.Body, req.IsBase64Encoded = tc.body, tc.binary
			req.RequestContext.RequestTimeEpoch = time.Now().UnixMilli()
			f.conns.reads = tc.reads
			resp, err := f.srv.Message(context.Background(), req)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("answered %d, %v; want 200", resp.StatusCode, err)
			}
			select {
			case c := <-f.ctrl.Calls:
				if c.What != tc.wantCall || c.Stamp.InOrder != tc.inOrder {
					t.Errorf("Controller call %q in order %v, want %q in order %v", c.What, c.Stamp.InOrder, tc.wantCall, tc.inOrder)
				}
			default:
				if tc.wantCall != "" {
					t.Errorf("no Controller call, want %q", tc.wantCall)
				}
			}
			if got := f.j.String(); got != tc.want {
				t.Errorf("calls\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
