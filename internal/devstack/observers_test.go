package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/history"
)

// observerToken is a new observer token of agent.
func (e env) observerToken(t *testing.T, agent string) string {
	t.Helper()
	tok, err := e.tokens.CreateRole(context.Background(), agent, 0, auth.RoleObserver)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// reader reads every frame of one client on its own goroutine, recording events in its
// subscription of a history.History, so that no client waits for another.
type reader struct {
	name string
	c    *client
	sub  *history.Sub

	mu     sync.Mutex
	frames []frame
	err    error // the read that ended it (errClosed once the server closed)
	more   chan struct{}
}

// subscribe sends subscribe{from_seq: from} on c and starts reading its frames.
func subscribeReader(h *history.History, name string, c *client, from int64) *reader {
	r := &reader{name: name, c: c, sub: h.Subscribe(name, from), more: make(chan struct{}, 1)}
	c.send(fmt.Sprintf(`{"type":"subscribe","from_seq":%d}`, from))
	go r.run()
	return r
}

func (r *reader) run() {
	for {
		f, err := r.c.next(hang())
		r.mu.Lock()
		if err != nil {
			r.err = err
			r.mu.Unlock()
			r.signal()
			return
		}
		r.frames = append(r.frames, f)
		switch {
		case f.Seq != nil:
			r.sub.Receive(*f.Seq)
		case f.Type == "replay_truncated":
			r.sub.Truncated(f.From)
		}
		r.mu.Unlock()
		r.signal()
	}
}

func (r *reader) signal() {
	select {
	case r.more <- struct{}{}:
	default:
	}
}

// await waits for a frame that ok accepts (looking at every frame read so far), bounded
// by hang(); what names it in the failure.
func (r *reader) await(t *testing.T, what string, ok func(frame) bool) frame {
	t.Helper()
	deadline := time.After(hang())
	seen := 0
	for {
		r.mu.Lock()
		for ; seen < len(r.frames); seen++ {
			if ok(r.frames[seen]) {
				f := r.frames[seen]
				r.mu.Unlock()
				return f
			}
		}
		err := r.err
		r.mu.Unlock()
		if err != nil {
			t.Fatalf("%s: %s ended (%v) before %s", r.name, r.name, err, what)
		}
		select {
		case <-r.more:
		case <-deadline:
			t.Fatalf("%s: no %s within %s", r.name, what, hang())
		}
	}
}

// awaitEnd waits until the server closed r's socket, bounded by hang().
func (r *reader) awaitEnd(t *testing.T) {
	t.Helper()
	deadline := time.After(hang())
	for {
		r.mu.Lock()
		err := r.err
		r.mu.Unlock()
		if err != nil {
			if err != errClosed {
				t.Fatalf("%s: ended with %v, want the server's close", r.name, err)
			}
			return
		}
		select {
		case <-r.more:
		case <-deadline:
			t.Fatalf("%s: not closed within %s", r.name, hang())
		}
	}
}

// errorFrames are the error frames r read so far.
func (r *reader) errorFrames() []frame {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []frame
	for _, f := range r.frames {
		if f.Type == "error" {
			out = append(out, f)
		}
	}
	return out
}

func typed(typ string) func(frame) bool {
	return func(f frame) bool { return f.Seq != nil && typedAs(f, typ) }
}

func typedAs(f frame, typ string) bool { return f.Type == typ }

func atLeast(seq int64) func(frame) bool {
	return func(f frame) bool { return f.Seq != nil && *f.Seq >= seq }
}

func errorCoded(code string) func(frame) bool {
	return func(f frame) bool { return f.Type == "error" && f.Code == code }
}

// helloRole reads the first frame of c, a hello for agent naming role.
func helloRole(t *testing.T, c *client, agent, role string) {
	t.Helper()
	f := c.hello(agent)
	var h struct {
		Role string `json:"role"`
	}
	if err := json.Unmarshal(f.raw, &h); err != nil || h.Role != role {
		t.Fatalf("hello %s, want role %q", f, role)
	}
}

// observerRounds is how many agents TestObservers runs its flow on.
const observerRounds = 3

// TestObservers: a driver and three observers (the cap, MaxObservers 3) on one agent
// through a turn with tool calls and an approval: every reader gets the same gapless
// events (history), each observer's control frames are answered forbidden with nothing
// appended and its socket open, a fourth observer supersedes the oldest and none other,
// and the driver is neither superseded by an observer nor supersedes one. Many rounds,
// each on a fresh agent.
func TestObservers(t *testing.T) {
	t.Parallel()
	e := startRuntimeStack(t, devstack.Options{Approvals: true, MaxObservers: 3})
	rounds := observerRounds
	if emulated() {
		// One round proves the built bootstraps; the many rounds run in process, where
		// a round is not a dozen cold invocations.
		rounds = 1
	}
	for round := range rounds {
		t.Run(fmt.Sprint(round), func(t *testing.T) { e.observerRound(t, fmt.Sprintf("obs-%d", round)) })
	}
}

func (e env) observerRound(t *testing.T, agent string) {
	drvTok, obsTok := e.token(t, agent), e.observerToken(t, agent)
	h := history.New()

	// Observers first, then the driver: neither kind supersedes the other.
	var obs []*reader
	for i := range 3 {
		c := e.dial(t, agent, obsTok)
		helloRole(t, c, agent, "observer")
		obs = append(obs, subscribeReader(h, fmt.Sprintf("observer-%d", i), c, 0))
	}
	dc := e.dial(t, agent, drvTok)
	helloRole(t, dc, agent, "driver")
	drv := subscribeReader(h, "driver", dc, 0)

	// Every control frame of an observer: forbidden, nothing appended, still open.
	control := []string{
		`{"type":"inject","text":"forbidden-inject","wake":true}`,
		`{"type":"cancel"}`,
		`{"type":"approve","call_id":"call_x"}`,
		`{"type":"deny","call_id":"call_x"}`,
		`{"type":"set_model","role":"main","spec":"scripted"}`,
		`{"type":"set_policy","patterns":["*"]}`,
	}
	for _, b := range control {
		obs[1].c.send(b)
	}
	deadline := time.Now().Add(hang())
	for len(obs[1].errorFrames()) < len(control) {
		if time.Now().After(deadline) {
			t.Fatalf("observer's control frames: %d error frames, want %d forbidden", len(obs[1].errorFrames()), len(control))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, f := range obs[1].errorFrames() {
		if f.Code != "forbidden" {
			t.Fatalf("observer's control frame answered %s, want forbidden", f)
		}
	}

	// A turn with tool calls and an approval, driven by the driver.
	script := `{"script":[{"call":[{"tool":"echo","args":{"text":"seen by all"}},{"tool":"guarded_echo","args":{"text":"asked"}}]},{"say":"all watched","chunks":3}]}`
	b, _ := json.Marshal(map[string]any{"type": "inject", "text": script, "wake": true})
	drv.c.send(string(b))
	req := drv.await(t, "approval/requested", typed("approval/requested"))
	var p struct {
		CallID string `json:"call_id"`
	}
	if err := json.Unmarshal(req.Pay, &p); err != nil || p.CallID == "" {
		t.Fatalf("approval/requested %s: no call_id", req)
	}
	for _, o := range obs {
		o.await(t, "the approval request", atLeast(*req.Seq))
	}
	drv.c.send(approveFrame(p.CallID))
	end := drv.await(t, "turn/end", typed("turn/end"))
	// The first turn titles the session, after its end: the log's tip for now.
	titled := drv.await(t, "session/titled", typed("session/titled"))
	tip := max(*end.Seq, *titled.Seq)
	for _, o := range obs {
		o.await(t, "the turn's end", atLeast(tip))
	}
	for _, r := range append(obs, drv) {
		for _, f := range r.errorFrames() {
			if r != obs[1] {
				t.Fatalf("%s got %s", r.name, f)
			}
		}
	}
	h.Check(t, tip)
	evs, err := e.log.Read(context.Background(), agent, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if strings.Contains(string(ev.Payload), "forbidden-inject") || ev.Type == "policy/updated" {
			t.Fatalf("an observer's frame was applied: %s %s", ev.Type, ev.Payload)
		}
	}

	// A fourth observer beyond the cap (3) supersedes the oldest, and only it.
	c := e.dial(t, agent, obsTok)
	helloRole(t, c, agent, "observer")
	obs[0].await(t, "superseded", errorCoded("superseded"))
	obs[0].awaitEnd(t)
	obs[0].sub.Drop()
	obs = append(obs[1:], subscribeReader(h, "observer-3", c, 0))

	// Everyone left follows a second turn.
	drv.c.send(`{"type":"inject","text":"again","wake":true}`)
	var end2 frame
	end2 = drv.await(t, "the second turn/end", func(f frame) bool { return f.Seq != nil && *f.Seq > tip && f.Type == "turn/end" })
	tip = *end2.Seq
	for _, o := range obs {
		o.await(t, "the second turn's end", atLeast(tip))
	}
	for _, r := range append(obs, drv) {
		for _, f := range r.errorFrames() {
			if f.Code != "forbidden" {
				t.Fatalf("%s got %s", r.name, f)
			}
		}
	}
	h.Check(t, tip)
}

// TestObserverLagged: an observer that stops reading falls behind on its own cursor
// and is sent lagged and closed after an exact prefix of the log, while the driver of
// the same agent gets every event — each appended only once the driver has the one
// before, so its progress waits for nothing of the observer's — is never lagged, and
// stays connected.
func TestObserverLagged(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{OutboundQueue: 8})
	const agent = "watched"
	drvTok, obsTok := e.token(t, agent), e.observerToken(t, agent)
	ctx, cancel := hangContext(t)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, e.stack.WebSocketURL()+"/agents/"+agent+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + obsTok}},
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: slowDial}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	read := func() (string, error) {
		_, b, err := ws.Read(ctx)
		return string(b), err
	}
	if f, err := read(); err != nil || !strings.Contains(f, `"type":"hello"`) || !strings.Contains(f, `"role":"observer"`) {
		t.Fatalf("observer's first frame %q, %v", f, err)
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"subscribe","from_seq":0}`)); err != nil {
		t.Fatal(err)
	}
	if f, _ := read(); !strings.Contains(f, `"seq":0`) {
		t.Fatalf("observer's replay frame %q", f)
	}
	drv := e.dial(t, agent, drvTok)
	helloRole(t, drv, agent, "driver")
	drv.send(`{"type":"subscribe","from_seq":0}`)
	drv.events(0, 0)

	const n = 30
	big := strings.Repeat("x", 60*1024)
	obsConn := ""
	e.awaitItem(t, "observers#"+agent, "the observer's index entry", func(item map[string]types.AttributeValue) bool {
		for k := range item {
			if c, ok := strings.CutPrefix(k, "o:"); ok {
				obsConn = c
			}
		}
		return obsConn != ""
	})
	isLagged := func() bool {
		out, err := dynamolocal.Client(e.stack.DynamoDBEndpoint).GetItem(context.Background(), &dynamodb.GetItemInput{
			TableName: aws.String(e.stack.Tables["ConnectionsTable"]), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "conn#" + obsConn}},
		})
		if err != nil {
			t.Fatal(err)
		}
		// Recorded lagged, or already closed (the close deletes the record).
		st, _ := out.Item["state"].(*types.AttributeValueMemberS)
		return out.Item == nil || st != nil && st.Value == "lagged"
	}
	slowDone := make(chan int64, 1)
	resume := make(chan struct{}) // the observer reads nothing until the driver has every event
	go func() {
		<-resume
		want := int64(1)
		defer func() { slowDone <- want }()
		for {
			f, err := read()
			if err != nil {
				// A reader paused until its buffers are full may lose the lagged frame
				// with the close (the gateway cannot write it either); the drop must
				// still be the lagged rule's: the connection recorded lagged or closed.
				if !isLagged() {
					t.Errorf("observer's socket ended without lagged after seq %d, and its connection is not recorded lagged: %v", want-1, err)
				}
				return
			}
			if strings.Contains(f, `"type":"error"`) {
				if !strings.Contains(f, `"code":"lagged"`) {
					t.Errorf("observer's error frame %s, want lagged", f)
				}
				if _, err := read(); err == nil {
					t.Error("observer's socket still open after lagged")
				}
				return
			}
			if !strings.Contains(f, `"seq":`+itoa(want)+`,`) {
				t.Errorf("observer's frame %.80s…, want seq %d", f, want)
				return
			}
			want++
		}
	}()
	// Each event is appended once the driver has the one before: the driver keeps up,
	// and its progress waits for nothing of the observer's. The observer reads again
	// once its connection is recorded lagged (before the gateway's 60 s bound on a
	// frame not taken would close it).
	resumed := false
	for i := range n {
		if _, err := e.log.Append(context.Background(), agent, "test/big", map[string]any{"i": i, "pad": big}); err != nil {
			t.Fatal(err)
		}
		drv.events(int64(i+1), int64(i+1))
		if !resumed && isLagged() {
			close(resume)
			resumed = true
		}
	}
	for deadline := time.Now().Add(hang()); !resumed; time.Sleep(20 * time.Millisecond) {
		if isLagged() {
			close(resume)
			resumed = true
		} else if time.Now().After(deadline) {
			t.Fatalf("the observer was never recorded lagged within %s", hang())
		}
	}
	got := <-slowDone
	if t.Failed() {
		return
	}
	if got > n {
		t.Fatalf("all %d events reached the slow observer before lagged: it never lagged", n)
	}
	// The driver is still connected and served: one more event reaches it.
	if _, err := e.log.Append(context.Background(), agent, "test/after", map[string]int{}); err != nil {
		t.Fatal(err)
	}
	drv.events(n+1, n+1)
}
