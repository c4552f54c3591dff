package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	gwtypes "github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/coder/websocket"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/gatewaytest"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/history"
	"github.com/terret/terret-ws/internal/invoke"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/socket"
	"github.com/terret/terret-ws/internal/tables"
)

// patience bounds each wait for a frame or an outcome: generous, as DynamoDB Local
// on a loaded 2-core machine can stall delivery for seconds; only a failing run waits
// it out.
const patience = 45 * time.Second

// rig serves agents' sockets with a Deliverer built here: the real socket routes on the
// local API Gateway, over real DynamoDB Local tables, but no stream poller — so the
// Deliverer under test is the only sender, and a fault it does not handle is not
// papered over by a backstop. Appends are handed to a Notifier, as the runner's are.
type rig struct {
	gw     *gatewaytest.Gateway
	db     *dynamodb.Client
	names  tables.Names
	log    *sessionlog.Log
	conns  *connections.Store
	tokens *auth.Store
	d      *delivery.Deliverer
	fast   *delivery.Notifier
	kicks  *kickTracker
}

// kickTracker counts the asynchronous deliver invocations the Deliverer asked for and
// the gateway has not finished yet: one is counted from the Invoke call on (before the
// gateway even queues it) until its handler returns nil (an error is retried).
type kickTracker struct {
	delivery.InvokeAPI
	mu       sync.Mutex
	inflight int
	pumps    int // KickPump invocations asked for so far: hand-overs, hellos
}

func (k *kickTracker) Invoke(ctx context.Context, in *invoke.Input) (*invoke.Output, error) {
	var kick delivery.Kick
	_ = json.Unmarshal(in.Payload, &kick)
	k.mu.Lock()
	k.inflight++
	if kick.Kind == delivery.KickPump {
		k.pumps++
	}
	k.mu.Unlock()
	out, err := k.InvokeAPI.Invoke(ctx, in)
	if err != nil {
		k.done()
	}
	return out, err
}

// handovers returns how many pump invocations were asked for so far: a sender that ran
// out of its budget (a loaded machine) hands its work over through one, whose holder
// is a retried one.
func (k *kickTracker) handovers() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.pumps
}

func (k *kickTracker) done() {
	k.mu.Lock()
	k.inflight--
	k.mu.Unlock()
}

// settled waits until every deliver invocation asked for has finished: after it, no
// handed-over sender is still at work.
func (k *kickTracker) settled(t *testing.T) {
	t.Helper()
	hang.UntilNil(t, "every deliver invocation finished", func() error {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.inflight > 0 {
			return fmt.Errorf("%d still running", k.inflight)
		}
		return nil
	})
}

type rigConfig struct {
	db    *dynamodb.Client                            // default: the shared DynamoDB Local
	names tables.Names                                // default: fresh tables there
	posts func(delivery.PostAPI) delivery.PostAPI     // wraps the @connections client
	logs  func(delivery.LogReader) delivery.LogReader // wraps the log the Deliverer reads
	cfg   delivery.Config
	// served, if set, receives the connection id of each frame once the message
	// function has served it: a barrier for "it did not post".
	served chan<- string
	// agent serves the frames other than subscribe; nil: none (unsupported).
	agent socket.Controller
	// disconnected, if set, receives the connection id of each $disconnect once the
	// disconnect function has served it.
	disconnected chan<- string
}

func startRig(t *testing.T, rc rigConfig) *rig {
	t.Helper()
	if rc.db == nil {
		rc.db = dynamotest.Client(t)
	}
	if rc.names == nil {
		rc.names = dynamotest.CreateTables(t)
	}
	logger := service.Logger(logOut(), "info")
	gw := gatewaytest.Start(t, logger)
	var posts delivery.PostAPI = gw.Posts
	if rc.posts != nil {
		posts = rc.posts(posts)
	}
	invoke := &kickTracker{InvokeAPI: gw.Invoke}
	rc.cfg.DeliverFunction, rc.cfg.Logger = gatewaytest.DeliverFunction, logger
	r := &rig{
		gw: gw, db: rc.db, names: rc.names,
		log:    sessionlog.New(rc.db, rc.names["LogTable"]),
		conns:  connections.New(rc.db, rc.names["ConnectionsTable"]),
		tokens: auth.New(rc.db, rc.names["ConnectionsTable"]),
		kicks:  invoke,
	}
	var logs delivery.LogReader = r.log
	if rc.logs != nil {
		logs = rc.logs(logs)
	}
	r.d = delivery.New(rc.cfg, logs, r.conns, posts, invoke)
	r.fast = delivery.NewNotifier(r.d, time.Second)
	t.Cleanup(r.fast.FlushAll)
	var agent socket.Controller // a nil *T would not be a nil interface
	if rc.agent != nil {
		agent = rc.agent
	}
	sock := socket.New(r.tokens, r.conns, r.log, r.d, agent, logger)
	gw.Connect.Bind(lambda.NewHandler(sock.Connect))
	gw.Message.Bind(lambda.NewHandler(sock.Message))
	if rc.served != nil {
		gw.Message.Bind(lambda.NewHandler(func(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
			defer func() { rc.served <- req.RequestContext.ConnectionID }()
			return sock.Message(ctx, req)
		}))
	}
	gw.Disconnect.Bind(lambda.NewHandler(sock.Disconnect))
	if rc.disconnected != nil {
		gw.Disconnect.Bind(lambda.NewHandler(func(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
			defer func() { rc.disconnected <- req.RequestContext.ConnectionID }()
			return sock.Disconnect(ctx, req)
		}))
	}
	gw.Deliver.Bind(lambda.NewHandler(func(ctx context.Context, raw json.RawMessage) (any, error) {
		out, err := r.d.Handle(ctx, raw)
		if err == nil {
			invoke.done()
		}
		return out, err
	}))
	return r
}

// logOut is where the rig's logs go: FAULTS_LOG=1 shows them.
func logOut() io.Writer {
	if os.Getenv("FAULTS_LOG") == "1" {
		return os.Stderr
	}
	return io.Discard
}

// appendN appends n events to session through l and hands each to the fast path, as
// the runner does.
func (r *rig) appendN(t *testing.T, l *sessionlog.Log, session string, n int, tag string) {
	t.Helper()
	for i := range n {
		ev, err := l.Append(context.Background(), session, "test/event", map[string]any{"tag": tag, "i": i})
		if err != nil {
			t.Errorf("append %s %d: %v", tag, i, err)
			return
		}
		r.fast.OnAppend(context.Background(), ev)
	}
}

func (r *rig) token(t *testing.T, agent string) string {
	t.Helper()
	tok, err := r.tokens.Create(context.Background(), agent)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// wsFrame is any server frame: events have seq, protocol frames do not.
type wsFrame struct {
	raw  string
	Type string `json:"type"`
	Seq  *int64 `json:"seq"`
	ID   string `json:"id"`
	Code string `json:"code"`
	From int64  `json:"from_seq"`
}

// wsClient is one socket of the shared rig's, read as wsFrames.
type wsClient struct {
	c  *websocket.Conn
	gc *gatewaytest.Client
}

var errNoFrame = gatewaytest.ErrNoFrame

func (r *rig) dial(t *testing.T, agent, token string) *wsClient {
	t.Helper()
	gc, _ := r.gw.Dial(t, agent, token, nil)
	return &wsClient{c: gc.Conn, gc: gc}
}

// next returns the next frame within d; a batch (events separated by newlines) comes
// whole in raw, for the test to split.
func (c *wsClient) next(d time.Duration) (wsFrame, error) {
	b, err := c.gc.Next(d)
	if err != nil {
		return wsFrame{}, err
	}
	if strings.Contains(string(b), "\n") {
		return wsFrame{raw: string(b)}, nil
	}
	var f wsFrame
	if err := json.Unmarshal(b, &f); err != nil {
		return wsFrame{}, fmt.Errorf("frame %q: %w", b, err)
	}
	f.raw = string(b)
	return f, nil
}

func (c *wsClient) send(t *testing.T, frame string) {
	t.Helper()
	if err := c.gc.Send(websocket.MessageText, []byte(frame)); err != nil {
		t.Fatalf("send: %v", err)
	}
}

func (c *wsClient) hello(t *testing.T) {
	t.Helper()
	f, err := c.next(patience)
	if err != nil || f.Type != "hello" || f.Seq != nil {
		t.Fatalf("first frame %s (%v), want hello", f.raw, err)
	}
}

// subscribe sends subscribe{from_seq} and records it in h.
func (c *wsClient) subscribe(t *testing.T, h *history.History, name string, from int64) *history.Sub {
	t.Helper()
	s := h.Subscribe(name, from)
	c.send(t, fmt.Sprintf(`{"type":"subscribe","from_seq":%d}`, from))
	return s
}

// follow records c's events into s until s has every event up to tip; each frame must
// come within gap. Any protocol frame is an error.
func (c *wsClient) follow(s *history.Sub, tip int64, gap time.Duration) error {
	for !s.Reached(tip) {
		f, err := c.next(gap)
		if err != nil {
			return fmt.Errorf("waiting for seq %d of %d: %w", s.Next(), tip, err)
		}
		if f.Seq == nil {
			return fmt.Errorf("protocol frame %s while expecting seq %d", f.raw, s.Next())
		}
		s.ReceiveID(*f.Seq, f.ID)
		if err := s.Err(); err != nil {
			return err
		}
	}
	return nil
}

// settle shows that nothing more comes to c for s, which has reached agent's tip: it
// appends one more event (tip+1, tagged "marker") and follows s to it. A connection's
// frames arrive in the order they were posted, so a duplicate or a straggler posted
// before the marker arrives before it and fails s.
func (r *rig) settle(t *testing.T, c *wsClient, s *history.Sub, agent string, tip int64) {
	t.Helper()
	r.appendN(t, r.log, agent, 1, "marker")
	if err := c.follow(s, tip+1, patience); err != nil {
		t.Fatalf("following the marker after seq %d: %v", tip, err)
	}
	r.fast.FlushAll()
}

// nothingReceived asserts that no frame has reached c (a frame still on its way is
// not seen: callers know that nothing was posted).
func (c *wsClient) nothingReceived(t *testing.T) {
	t.Helper()
	if b, ok, err := c.gc.Ready(); ok {
		t.Fatalf("frame %s (%v) where none was due", b, err)
	}
}

func readAll(t *testing.T, l *sessionlog.Log, session string) []sessionlog.Event {
	t.Helper()
	evs, err := l.Read(context.Background(), session, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// limitedPosts answers PostToConnection with LimitExceededException (API Gateway's 429)
// before passing a frame through: the n-th distinct frame is refused n%3 times, so a
// sender that gives up on a 429, or re-posts a frame it already delivered, is caught.
type limitedPosts struct {
	delivery.PostAPI
	mu       sync.Mutex
	refusals map[string]int // refusals still owed per frame
	seen     int
	injected int
	posted   map[string]int // successful posts per frame
}

func (p *limitedPosts) PostToConnection(ctx context.Context, in *apigatewaymanagementapi.PostToConnectionInput, opts ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error) {
	key := aws.ToString(in.ConnectionId) + "\x00" + string(in.Data)
	p.mu.Lock()
	owed, ok := p.refusals[key]
	if !ok {
		owed = p.seen % 3
		p.seen++
	}
	if owed > 0 {
		p.refusals[key] = owed - 1
		p.injected++
		p.mu.Unlock()
		return nil, &gwtypes.LimitExceededException{Message: aws.String("injected: rate exceeded")}
	}
	p.refusals[key] = 0
	p.mu.Unlock()
	out, err := p.PostAPI.PostToConnection(ctx, in, opts...)
	if err == nil {
		p.mu.Lock()
		p.posted[key]++
		p.mu.Unlock()
	}
	return out, err
}

// TestFaultPostLimitExceeded: PostToConnection answering LimitExceeded (429) for
// replay, tail and hello frames alike — the sender backs off and retries the same frame,
// and the client gets hello, then every event exactly once, in order.
func TestFaultPostLimitExceeded(t *testing.T) {
	t.Parallel()
	lp := &limitedPosts{refusals: map[string]int{}, posted: map[string]int{}}
	r := startRig(t, rigConfig{posts: func(p delivery.PostAPI) delivery.PostAPI { lp.PostAPI = p; return lp }})
	const agent = "limited"
	tok := r.token(t, agent)
	if _, err := r.log.Create(context.Background(), agent); err != nil {
		t.Fatal(err)
	}
	r.appendN(t, r.log, agent, 15, "replay") // history: 0..15
	c := r.dial(t, agent, tok)
	c.hello(t)
	h := history.New()
	s := c.subscribe(t, h, "c", 0)
	if err := c.follow(s, 15, patience); err != nil {
		t.Fatal(err)
	}
	r.appendN(t, r.log, agent, 15, "tail") // live: 16..30
	if err := c.follow(s, 30, patience); err != nil {
		t.Fatal(err)
	}
	r.fast.FlushAll()
	r.settle(t, c, s, agent, 30)
	h.CheckLog(t, readAll(t, r.log, agent))
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.injected < 20 {
		t.Fatalf("only %d posts refused: the test did not exercise throttling", lp.injected)
	}
	for k, n := range lp.posted {
		if n != 1 {
			t.Errorf("frame %.80q posted %d times", k[strings.IndexByte(k, 0)+1:], n)
		}
	}
	t.Logf("%d posts refused with LimitExceeded across %d frames", lp.injected, lp.seen)
}

// gonePosts answers GoneException for the connections marked gone, as API Gateway does
// once a client vanished without $disconnect reaching us.
type gonePosts struct {
	delivery.PostAPI
	mu       sync.Mutex
	gone     map[string]bool
	attempts map[string]int // posts to gone connections
}

func (p *gonePosts) PostToConnection(ctx context.Context, in *apigatewaymanagementapi.PostToConnectionInput, opts ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error) {
	id := aws.ToString(in.ConnectionId)
	p.mu.Lock()
	if p.gone[id] {
		p.attempts[id]++
		p.mu.Unlock()
		return nil, &gwtypes.GoneException{Message: aws.String("injected: gone")}
	}
	p.mu.Unlock()
	return p.PostAPI.PostToConnection(ctx, in, opts...)
}

// TestFaultPostGone: a post answering Gone makes the sender forget the connection —
// its conn# record and the agent# ownership record are deleted — and nothing more is
// posted to it; the events keep accumulating in the log for the next subscribe.
func TestFaultPostGone(t *testing.T) {
	t.Parallel()
	gp := &gonePosts{gone: map[string]bool{}, attempts: map[string]int{}}
	r := startRig(t, rigConfig{posts: func(p delivery.PostAPI) delivery.PostAPI { gp.PostAPI = p; return gp }})
	const agent = "vanishing"
	c := r.dial(t, agent, r.token(t, agent))
	c.hello(t)
	h := history.New()
	s := c.subscribe(t, h, "c", 0)
	r.appendN(t, r.log, agent, 5, "before")
	if err := c.follow(s, 5, patience); err != nil {
		t.Fatal(err)
	}
	r.fast.FlushAll()
	ctx := context.Background()
	o, err := r.conns.Owner(ctx, agent)
	if err != nil {
		t.Fatal(err)
	}
	gp.mu.Lock()
	gp.gone[o.ConnID] = true
	gp.mu.Unlock()

	r.appendN(t, r.log, agent, 3, "after") // 6..8: the first post answers Gone
	// The sender may be the fast path or, on a loaded machine, the deliver invocation it
	// handed over to: wait for the outcome rather than for one of them.
	hang.UntilNil(t, "the gone connection's records deleted", func() error {
		_, cerr := r.conns.Conn(ctx, o.ConnID)
		cur, oerr := r.conns.Owner(ctx, agent)
		if errors.Is(cerr, connections.ErrNotFound) && errors.Is(oerr, connections.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("kept: conn# %v, agent# %+v (%v)", cerr, cur, oerr)
	})
	r.appendN(t, r.log, agent, 2, "later")
	r.fast.FlushAll()
	r.kicks.settled(t) // a handed-over sender, if any, has found no owner
	gp.mu.Lock()
	attempts := gp.attempts[o.ConnID]
	gp.mu.Unlock()
	if attempts != 1 {
		t.Errorf("%d posts to the gone connection, want 1 (Gone is final)", attempts)
	}
	// Every post to the connection went through gp, which answered Gone: nothing
	// reached the socket, which is itself still open.
	c.nothingReceived(t)
	s.Drop()
	evs := readAll(t, r.log, agent)
	if len(evs) != 11 {
		t.Errorf("log has %d events, want 11: appends go on without a connection", len(evs))
	}
	h.CheckLog(t, evs)
}

// throttler fails DynamoDB requests before they are sent with the error responses
// DynamoDB throttles with, for the SDK's retryer to handle. It is a Finalize-step
// middleware placed after signing, so each attempt is decided on its own.
type throttler struct {
	mu       sync.Mutex
	rng      *rand.Rand
	p        float64
	injected map[string]int // by operation
	calls    map[string]int
}

var throttleCodes = []string{"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"}

func (th *throttler) decide(op string) string {
	th.mu.Lock()
	defer th.mu.Unlock()
	th.calls[op]++
	// The first attempt of every operation is throttled, so each is exercised however
	// few calls of it a run makes (a connect's single claim transaction).
	if th.calls[op] > 1 && th.rng.Float64() >= th.p {
		return ""
	}
	th.injected[op]++
	return throttleCodes[th.rng.IntN(len(throttleCodes))]
}

func (th *throttler) addTo(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("InjectThrottling",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			if code := th.decide(awsmiddleware.GetOperationName(ctx)); code != "" {
				return middleware.FinalizeOutput{}, middleware.Metadata{}, &smithy.GenericAPIError{Code: code, Message: "injected: throughput exceeded", Fault: smithy.FaultServer}
			}
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}

// TestFaultDynamoDBThrottled: a fifth of all DynamoDB requests — log appends and reads,
// token checks, the claim transaction, lease and cursor writes, replay slots — fail with
// a throttling error before they are sent. Connect, hello, replay, two concurrent
// writers' appends and the live tail still come out exact: each append lands once, the
// log is gapless and the client sees 0..tip once, in order.
func TestFaultDynamoDBThrottled(t *testing.T) {
	t.Parallel()
	th := &throttler{rng: rand.New(rand.NewPCG(4, 2)), p: 0.2, injected: map[string]int{}, calls: map[string]int{}}
	endpoint := dynamotest.Endpoint(t)
	names := dynamotest.CreateTables(t)
	// The functions' client configuration (the SDK's standard retryer,
	// config.DynamoDBMaxAttempts attempts) with the throttling middleware; only the
	// backoff sleeps are shortened so that a hundred throttled requests cost
	// milliseconds, not minutes.
	db := dynamodb.NewFromConfig(dynamolocal.Config(), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.APIOptions = append(o.APIOptions, th.addTo)
		o.RetryMaxAttempts = config.DynamoDBMaxAttempts
		o.Retryer = retry.AddWithMaxBackoffDelay(o.Retryer, 20*time.Millisecond)
	})
	r := startRig(t, rigConfig{db: db, names: names, cfg: delivery.Config{ReplayPage: 4}})
	const agent = "throttled"
	c := r.dial(t, agent, r.token(t, agent))
	c.hello(t)
	r.appendN(t, r.log, agent, 8, "replay")
	h := history.New()
	s := c.subscribe(t, h, "c", 0)
	if err := c.follow(s, 8, patience); err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 2, 12
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.appendN(t, sessionlog.New(db, names["LogTable"]), agent, perWriter, fmt.Sprintf("w%d", w))
		}()
	}
	tip := int64(8 + writers*perWriter)
	err := c.follow(s, tip, patience)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	r.fast.FlushAll()
	r.settle(t, c, s, agent, tip)
	evs := readAll(t, sessionlog.New(dynamotest.Client(t), names["LogTable"]), agent)
	h.CheckLog(t, evs)
	// Each append landed exactly once (the writers' and settle's marker).
	tip++
	seen := map[string]int{}
	for _, ev := range evs[1:] {
		seen[string(ev.Payload)]++
	}
	for p, n := range seen {
		if n != 1 {
			t.Errorf("payload %s logged %d times", p, n)
		}
	}
	if len(seen) != int(tip) {
		t.Errorf("%d distinct appends logged, want %d", len(seen), tip)
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	for _, op := range []string{"PutItem", "Query", "GetItem", "UpdateItem", "TransactWriteItems"} {
		if th.injected[op] == 0 {
			t.Errorf("no %s was throttled (%d calls): the test did not exercise it", op, th.calls[op])
		}
	}
	t.Logf("throttled %v of %v requests", th.injected, th.calls)
}

// TestFaultDynamoDBLocalRestart: DynamoDB itself goes away and comes back (a file-backed
// DynamoDB Local, killed and started again on the same port and path) between appends,
// while a client stays connected. The log continues gapless from where it was (the
// appender's cached tip agrees with what was stored), a fresh reader sees 0..N, and the
// sender resumes the live tail from the cursor stored in the connections table: the
// client sees every event once, in order, across the restart.
func TestFaultDynamoDBLocalRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port := freePort(t)
	srv := startLocal(t, dir, port)
	db := dynamolocal.Client(srv.Endpoint())
	defs, err := tables.Parse(terretws.Template)
	if err != nil {
		t.Fatal(err)
	}
	names := tables.NamesWithPrefix(defs, "restart-")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tables.Ensure(ctx, db, defs, names); err != nil {
		t.Fatal(err)
	}
	r := startRig(t, rigConfig{db: db, names: names})
	const agent = "restarted"
	c := r.dial(t, agent, r.token(t, agent))
	c.hello(t)
	h := history.New()
	s := c.subscribe(t, h, "c", 0)
	r.appendN(t, r.log, agent, 10, "before")
	if err := c.follow(s, 10, patience); err != nil {
		t.Fatal(err)
	}
	r.fast.FlushAll()
	idle(t, r.conns, agent) // between appends: no sender is mid-write

	began := time.Now()
	srv.Close()
	srv = startLocal(t, dir, port)
	t.Logf("DynamoDB Local restarted in %v", time.Since(began).Round(time.Millisecond))

	r.appendN(t, r.log, agent, 10, "after") // the same appender, its tip cached
	if err := c.follow(s, 20, patience); err != nil {
		t.Fatal(err)
	}
	r.fast.FlushAll()
	r.settle(t, c, s, agent, 20)
	evs := readAll(t, sessionlog.New(dynamolocal.Client(srv.Endpoint()), names["LogTable"]), agent)
	if len(evs) != 22 {
		t.Errorf("a fresh reader sees %d events, want 22 (0..20 and the marker)", len(evs))
	}
	h.CheckLog(t, evs)
}

// idle waits until no sender holds agent's lease and none is owed a look.
func idle(t *testing.T, conns *connections.Store, agent string) {
	t.Helper()
	hang.UntilNil(t, "no sender holding "+agent, func() error {
		o, err := conns.Owner(context.Background(), agent)
		if err != nil {
			t.Fatal(err)
		}
		if o.Lease == "" && !o.Pending {
			return nil
		}
		return fmt.Errorf("held: %+v", o)
	})
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := dynamolocal.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// startLocal starts a file-backed DynamoDB Local on port, stopped with the test.
func startLocal(t *testing.T, dir string, port int) *dynamolocal.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := dynamolocal.Start(ctx, dynamolocal.Options{DBPath: dir, Port: port})
	if errors.Is(err, dynamolocal.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skipf("%v", err) // as dynamotest does: never skipped on CI
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}
