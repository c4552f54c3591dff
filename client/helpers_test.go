package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// testStack is an in-process `terret dev` with clients of its tables.
type testStack struct {
	st     *devstack.Stack
	db     *dynamodb.Client
	tokens *auth.Store
	log    *sessionlog.Log
}

func newStack(endpoint string, o devstack.Options) (*testStack, error) {
	o.DynamoDBEndpoint = endpoint
	o.Addr = "127.0.0.1:0"
	o.TablePrefix = dynamotest.UniqueName("cl") + "-"
	o.PollInterval = 50 * time.Millisecond
	o.Logger = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, o)
	if err != nil {
		return nil, err
	}
	db := dynamolocal.Client(st.DynamoDBEndpoint)
	return &testStack{st: st, db: db, tokens: auth.New(db, st.Tables["ConnectionsTable"]), log: sessionlog.New(db, st.Tables["LogTable"])}, nil
}

// close stops the stack and drops its tables: a shared DynamoDB Local slows down as
// data piles up.
func (s *testStack) close() {
	s.st.Close()
	for _, name := range s.st.Tables {
		_, _ = s.db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
	}
}

// sharedReplayLimit is the shared stack's replay_limit: above every other test's replay,
// so that one test can reach past it without a stack of its own.
const sharedReplayLimit = 60

// shared is one stack for every test of the package; each uses its own agent ids.
var shared struct {
	once sync.Once
	s    *testStack
	err  error
}

func sharedStack(t *testing.T) *testStack {
	t.Helper()
	ep := dynamotest.Endpoint(t) // skips or fails as the harness decides
	shared.once.Do(func() { shared.s, shared.err = newStack(ep, devstack.Options{ReplayLimit: sharedReplayLimit}) })
	if shared.err != nil {
		t.Fatalf("start shared stack: %v", shared.err)
	}
	return shared.s
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.s != nil {
		shared.s.close()
	}
	os.Exit(code)
}

func (s *testStack) url(agent string) string { return s.st.WebSocketURL() + "/agents/" + agent + "/ws" }

func (s *testStack) token(t *testing.T, agent string) string {
	t.Helper()
	tok, err := s.tokens.Create(context.Background(), agent)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (s *testStack) appendN(t *testing.T, agent, typ string, n int) {
	t.Helper()
	for i := range n {
		if _, err := s.log.Append(context.Background(), agent, typ, map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
}

// seed writes events first..last (first ≥ 1, the log holding first-1) in batches of
// 25: history without a round trip per event. Appends under test use appendN.
func (s *testStack) seed(t *testing.T, agent string, first, last int) {
	t.Helper()
	ctx := context.Background()
	table := s.st.Tables["LogTable"]
	for start := first; start <= last; start += 25 {
		var reqs []types.WriteRequest
		for seq := start; seq < start+25 && seq <= last; seq++ {
			ev := sessionlog.Event{ID: fmt.Sprintf("seed-%d", seq), SessionID: agent, Seq: int64(seq),
				At: time.Now().UTC().Format(sessionlog.TimeFormat), Type: "test/event", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, seq))}
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: ev.Item()}})
		}
		in := &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}}
		for {
			out, err := s.db.BatchWriteItem(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.UnprocessedItems) == 0 {
				break
			}
			in.RequestItems = out.UnprocessedItems
		}
	}
}

// wait bounds a wait for the stack: internal/hang's bound, minutes grown with the
// machine's load — a hang detector, since DynamoDB Local on a loaded machine can take
// seconds per request.
func wait() time.Duration { return hang.Bound() }

func agentID() string { return dynamotest.UniqueName("a") }

// recorder keeps every callback in arrival order and checks the event contract (seq
// order, no duplicate) as events arrive.
type recorder struct {
	mu       sync.Mutex
	events   []client.Event
	notices  []client.Notice
	statuses []client.Status
	trail    []string // "event N", "notice …", "status …", in callback order
	ch       chan client.Event
	hook     func(client.Event) // runs inside OnEvent, before recording
}

func newRecorder() *recorder { return &recorder{ch: make(chan client.Event, 10000)} }

func (r *recorder) options() client.Options {
	return client.Options{
		OnEvent: func(ev client.Event) error {
			if r.hook != nil {
				r.hook(ev)
			}
			r.mu.Lock()
			r.events = append(r.events, ev)
			r.trail = append(r.trail, fmt.Sprintf("event %d", ev.Seq))
			r.mu.Unlock()
			r.ch <- ev
			return nil
		},
		OnNotice: func(n client.Notice) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.notices = append(r.notices, n)
			r.trail = append(r.trail, "notice "+n.Error())
		},
		OnStatus: func(s client.Status) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.statuses = append(r.statuses, s)
			r.trail = append(r.trail, fmt.Sprintf("status %s %d", s.State, s.Attempt))
		},
		MinBackoff: 20 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond,
	}
}

// next returns the next event delivered, within d.
func (r *recorder) next(t *testing.T, d time.Duration) client.Event {
	t.Helper()
	select {
	case ev := <-r.ch:
		return ev
	case <-time.After(d):
		t.Fatalf("no event within %s; trail %v", d, r.snapshotTrail())
		return client.Event{}
	}
}

// until reads events until one of type typ, and returns it.
func (r *recorder) until(t *testing.T, typ string) client.Event {
	t.Helper()
	for {
		if ev := r.next(t, wait()); ev.Type == typ {
			return ev
		}
	}
}

// expectSeqs asserts the next events delivered are exactly from..to.
func (r *recorder) expectSeqs(t *testing.T, from, to int64) {
	t.Helper()
	for want := from; want <= to; want++ {
		if ev := r.next(t, wait()); ev.Seq != want {
			t.Fatalf("event seq %d delivered, want %d; trail %v", ev.Seq, want, r.snapshotTrail())
		}
	}
}

// quiet asserts no event arrives for d.
func (r *recorder) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case ev := <-r.ch:
		t.Fatalf("unexpected event %s", ev.Raw)
	case <-time.After(d):
	}
}

// checkExactlyOnce asserts every event delivered so far ran 0, 1, 2, … with none
// missing or repeated.
func (r *recorder) checkExactlyOnce(t *testing.T) []client.Event {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, ev := range r.events {
		if ev.Seq != int64(i) {
			t.Fatalf("delivery %d has seq %d (trail %v)", i, ev.Seq, r.trail)
		}
	}
	return append([]client.Event(nil), r.events...)
}

func (r *recorder) snapshotTrail() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.trail...)
}

func (r *recorder) snapshotStatuses() []client.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]client.Status(nil), r.statuses...)
}

func (r *recorder) snapshotNotices() []client.Notice {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]client.Notice(nil), r.notices...)
}

func (r *recorder) count(state client.State) int {
	n := 0
	for _, s := range r.snapshotStatuses() {
		if s.State == state {
			n++
		}
	}
	return n
}

// waitNotice waits for the n-th notice (0-based).
func (r *recorder) waitNotice(t *testing.T, n int) client.Notice {
	t.Helper()
	var got client.Notice
	hang.UntilNil(t, fmt.Sprintf("notice %d", n), func() error {
		ns := r.snapshotNotices()
		if len(ns) <= n {
			return fmt.Errorf("trail %v", r.snapshotTrail())
		}
		got = ns[n]
		return nil
	})
	return got
}

func dial(t *testing.T, url, token string, o client.Options) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait())
	defer cancel()
	c, err := client.Dial(ctx, url, token, o)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ctxT bounds a test's operations.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*wait())
	t.Cleanup(cancel)
	return ctx
}

// proxy is a TCP hop between client and gateway that a test can cut, the way a
// network blip or a load balancer drops a connection: both sides see it die, and
// while it is down new connections are accepted and closed at once.
type proxy struct {
	ln       net.Listener
	target   string
	accepted atomic.Int64
	mu       sync.Mutex
	down     bool
	conns    map[net.Conn]bool
	wg       sync.WaitGroup
	swallow  atomic.Bool              // while set, what the client sends is read and dropped
	toClient []byte                   // what the gateway sent, while a watch is pending
	watches  map[string]chan struct{} // closed once toClient holds their key
}

// sent returns a channel closed once the gateway has sent marker to the client
// through the proxy (frames are not compressed). Arm it before the frames are sent.
func (p *proxy) sent(marker string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watches == nil {
		p.watches = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	p.watches[marker] = ch
	return ch
}

// Write records bytes the gateway sent and closes the watches they complete.
func (p *proxy) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.watches) == 0 {
		return len(b), nil
	}
	p.toClient = append(p.toClient, b...)
	for m, ch := range p.watches {
		if bytes.Contains(p.toClient, []byte(m)) {
			close(ch)
			delete(p.watches, m)
		}
	}
	if len(p.watches) == 0 {
		p.toClient = nil
	}
	return len(b), nil
}

func startProxy(t *testing.T, s *testStack) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: strings.TrimPrefix(s.st.WebSocketURL(), "ws://"), conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) url(agent string) string {
	return "ws://" + p.ln.Addr().String() + "/agents/" + agent + "/ws"
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		pipe := func(dst net.Conn, src io.Reader) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			if c, ok := src.(net.Conn); ok {
				c.Close()
			} else {
				up.Close()
			}
		}
		go pipe(up, swallower{c, p})
		go pipe(c, io.TeeReader(up, p))
	}
}

// swallower reads what the client sends and drops it while the proxy swallows: a frame
// the client wrote that never reaches the gateway.
type swallower struct {
	net.Conn
	p *proxy
}

func (s swallower) Read(b []byte) (int, error) {
	for {
		n, err := s.Conn.Read(b)
		if n == 0 || err != nil || !s.p.swallow.Load() {
			return n, err
		}
	}
}

// cut drops every connection and refuses new ones until restore.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *proxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

func payloadText(t *testing.T, ev client.Event) string {
	t.Helper()
	var p struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		t.Fatalf("payload of %s: %v", ev.Raw, err)
	}
	return p.Text
}
