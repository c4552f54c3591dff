package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/history"
)

// Frame order (docs/protocol.md, "Ordering"): bursts of frames on one socket, sent
// the three ways the protocol distinguishes, against the local gateway's concurrent
// dispatch of $default:
//
//   - spaced: plain v1 frames 1–3 ms apart (tier 1: the receive time orders them);
//   - ordered: frames numbered with the order field, sent back to back (tier 2);
//   - burst: plain frames back to back (same-millisecond frames: the documented
//     weaker outcome).
//
// Each kind of burst plays orderRounds rounds per way, one after another on one socket
// of an agent of its own; the fifteen sockets run at once, so bursts on many agents
// overlap. What a round leaves behind is checked again after the stack has shut down,
// which waits for every handler still running: a late handler cannot undo a round
// after it was checked.

// orderRounds defaults to 50; ORDER_ROUNDS overrides it (scripts/test.sh runs 20 to
// keep CI within its time budget).
var orderRounds = 50

type sendWay struct {
	name    string
	spaced  bool // 1–3 ms between frames
	ordered bool // the order field
}

var (
	waySpaced  = sendWay{name: "spaced", spaced: true}
	wayOrdered = sendWay{name: "ordered", ordered: true}
	wayBurst   = sendWay{name: "burst"}
	sendWays   = []sendWay{waySpaced, wayOrdered, wayBurst}
)

// orderConn is one socket: frames go out as the way says, frames in are read by one
// goroutine. Its methods return errors: sockets run on goroutines of their own.
type orderConn struct {
	way    sendWay
	agent  string
	ws     *websocket.Conn
	frames chan read
	n      int64 // order of the last numbered frame
	sent   int64 // frames sent: the gateway numbers them the same way
	hist   *history.History
	recv   *receiveLog
}

// tie reports whether the gateway received frames i and j (numbered from 1, as sent)
// in the same millisecond: plain frames that tie are not ordered (tier 1 orders by
// receive time only), so a round whose frames tied may end either way.
func (c *orderConn) tie(ctx context.Context, i, j int64) (bool, error) {
	a, err := c.recv.epoch(ctx, c.agent, i)
	if err != nil {
		return false, err
	}
	b, err := c.recv.epoch(ctx, c.agent, j)
	return a == b, err
}

// receiveLog follows the stack's logs for the receive time the gateway stamped on each
// frame ("frame received", debug) and the agent each connection serves ("connected").
type receiveLog struct {
	mu     sync.Mutex
	agents map[string]string  // connection id → agent
	epochs map[string][]int64 // connection id → requestTimeEpoch of frame 1, 2, …
}

func newReceiveLog() *receiveLog {
	return &receiveLog{agents: map[string]string{}, epochs: map[string][]int64{}}
}

// epoch waits for the receive time of the agent's frame i.
func (l *receiveLog) epoch(ctx context.Context, agent string, i int64) (int64, error) {
	for {
		l.mu.Lock()
		for conn, a := range l.agents {
			if es := l.epochs[conn]; a == agent && int64(len(es)) >= i {
				l.mu.Unlock()
				return es[i-1], nil
			}
		}
		l.mu.Unlock()
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return 0, fmt.Errorf("receive time of frame %d of %s never logged: %w", i, agent, err)
		}
	}
}

// handler is the slog.Handler feeding a receiveLog; it keeps nothing else.
func (l *receiveLog) handler() slog.Handler { return receiveHandler{l: l} }

type receiveHandler struct {
	l     *receiveLog
	attrs []slog.Attr
}

func (h receiveHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h receiveHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return receiveHandler{l: h.l, attrs: append(slices.Clip(h.attrs), as...)}
}
func (h receiveHandler) WithGroup(string) slog.Handler { return h }
func (h receiveHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "frame received" && r.Message != "connected" {
		return nil
	}
	vals := map[string]slog.Value{}
	for _, a := range h.attrs {
		vals[a.Key] = a.Value
	}
	r.Attrs(func(a slog.Attr) bool { vals[a.Key] = a.Value; return true })
	conn := vals["connection_id"].String()
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	switch {
	case r.Message == "connected" && vals["agent_id"].Kind() == slog.KindString:
		h.l.agents[conn] = vals["agent_id"].String()
	case r.Message == "frame received":
		h.l.epochs[conn] = append(h.l.epochs[conn], vals["request_time_epoch"].Int64())
	}
	return nil
}

func dialOrder(ctx context.Context, e env, agent, token string, way sendWay) (*orderConn, error) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	ws, _, err := websocket.Dial(ctx, e.stack.WebSocketURL()+"/agents/"+agent+"/ws", &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(1 << 20)
	c := &orderConn{way: way, agent: agent, ws: ws, frames: make(chan read, 100000)}
	go func() {
		for {
			_, b, err := ws.Read(context.Background())
			c.frames <- read{b, err}
			if err != nil {
				return
			}
		}
	}()
	f, err := c.next(ctx)
	if err != nil {
		return nil, err
	}
	if f.Type != "hello" {
		return nil, fmt.Errorf("first frame %s, want hello", f)
	}
	return c, nil
}

// send writes frames one after another: numbered when the way is ordered, 1–3 ms apart
// when it is spaced.
func (c *orderConn) send(ctx context.Context, frames ...map[string]any) error {
	for i, m := range frames {
		if c.way.ordered {
			c.n++
			m["order"] = c.n
		}
		b, _ := json.Marshal(m)
		if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
			return err
		}
		c.sent++
		if c.way.spaced && i < len(frames)-1 {
			time.Sleep(time.Millisecond + rand.N(2*time.Millisecond))
		}
	}
	return nil
}

func (c *orderConn) next(ctx context.Context) (frame, error) {
	select {
	case r := <-c.frames:
		if r.err != nil {
			c.frames <- r
			return frame{}, r.err
		}
		var f frame
		if err := json.Unmarshal(r.b, &f); err != nil {
			return frame{}, err
		}
		f.raw = r.b
		return f, nil
	case <-ctx.Done():
		return frame{}, ctx.Err()
	}
}

// barrier ends an ordered burst: a frame the server refuses, numbered after the burst,
// is answered only once every frame before it has taken effect (the turnstile).
func (c *orderConn) barrier(ctx context.Context) error {
	if err := c.send(ctx, map[string]any{"type": "barrier"}); err != nil {
		return err
	}
	for {
		f, err := c.next(ctx)
		if err != nil {
			return fmt.Errorf("waiting for the barrier's bad_frame: %w", err)
		}
		if f.Type == "error" {
			if f.Code != "bad_frame" || !strings.Contains(f.Msg, "barrier") {
				return fmt.Errorf("error frame %s before the barrier's answer", f)
			}
			return nil
		}
	}
}

// untilEvent reads frames until an event for which stop returns true; error frames
// fail.
func (c *orderConn) untilEvent(ctx context.Context, stop func(f frame) bool) error {
	for {
		f, err := c.next(ctx)
		if err != nil {
			return err
		}
		if f.Type == "error" {
			return fmt.Errorf("error frame %s", f)
		}
		if f.Seq != nil && stop(f) {
			return nil
		}
	}
}

// orderBurst is one kind of burst. open runs once on the socket before its rounds,
// round plays round r and checks what the client sees, and final, if set, checks what
// the rounds left in the tables once every handler has returned.
type orderBurst struct {
	name  string
	setup func(t *testing.T, e env, agent string) // before the socket opens, on the test goroutine
	open  func(ctx context.Context, c *orderConn) error
	round func(ctx context.Context, e env, c *orderConn, r int) error
	final func(ctx context.Context, e env, way sendWay, agent string) error
}

func TestFrameOrder(t *testing.T) {
	// Not parallel: its fifteen sockets are load enough, and its bounds (the steer settle,
	// the turnstile's wait) are about handler latency, which other tests would inflate.
	if n, err := strconv.Atoi(os.Getenv("ORDER_ROUNDS")); err == nil {
		orderRounds = n
	}

	recv := newReceiveLog()
	var h slog.Handler = recv.handler()
	if os.Getenv("DEVSTACK_LOG") == "1" {
		h = slog.NewMultiHandler(h, slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	e := startStack(t, devstack.Options{Logger: slog.New(h)})
	db := dynamolocal.Client(e.stack.DynamoDBEndpoint)
	bursts := []orderBurst{policyBurst(), modelBurst(db), subscribeBurst(), steerBurst(), cancelBurst()}
	if only := os.Getenv("ORDER_BURST"); only != "" {
		bursts = slices.DeleteFunc(bursts, func(b orderBurst) bool { return b.name != only })
	}

	type socket struct {
		burst orderBurst
		way   sendWay
		agent string
		token string
	}
	var sockets []socket
	for _, b := range bursts {
		for _, w := range sendWays {
			agent := b.name + "-" + w.name
			if b.setup != nil {
				b.setup(t, e, agent)
			}
			sockets = append(sockets, socket{b, w, agent, e.token(t, agent)})
		}
	}

	start := time.Now()
	var mu sync.Mutex
	failures := map[string][]string{}
	fail := func(k string, err error) {
		mu.Lock()
		defer mu.Unlock()
		failures[k] = append(failures[k], err.Error())
	}
	var wg sync.WaitGroup
	for _, so := range sockets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			c, err := dialOrder(ctx, e, so.agent, so.token, so.way)
			if err != nil {
				fail(so.agent, fmt.Errorf("dial: %w", err))
				return
			}
			defer c.ws.CloseNow()
			c.recv = recv
			if so.burst.open != nil {
				if err := so.burst.open(ctx, c); err != nil {
					fail(so.agent, err)
					return
				}
			}
			began := time.Now()
			defer func() {
				t.Logf("%s: %d rounds in %v", so.agent, orderRounds, time.Since(began).Round(time.Millisecond))
			}()
			for r := range orderRounds {
				if err := so.burst.round(ctx, e, c, r); err != nil {
					fail(so.agent, fmt.Errorf("round %d: %w", r, err))
					if ctx.Err() != nil {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	played := time.Since(start)

	// Every handler still running returns before Close does.
	e.stack.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, so := range sockets {
		if so.burst.final == nil {
			continue
		}
		if err := so.burst.final(ctx, e, so.way, so.agent); err != nil {
			fail(so.agent, fmt.Errorf("after every handler returned: %w", err))
		}
	}
	t.Logf("%d sockets × %d rounds played in %v", len(sockets), orderRounds, played.Round(time.Millisecond))
	for _, so := range sockets {
		if fs := failures[so.agent]; len(fs) > 0 {
			t.Errorf("%s: %d failures; first: %s", so.agent, len(fs), strings.Join(fs[:min(3, len(fs))], "; "))
		}
	}
}

func subscribeFrame(from int64) map[string]any {
	return map[string]any{"type": "subscribe", "from_seq": from}
}

// ties records, by agent and round, whether a spaced round's two frames were received
// in the same millisecond.
var ties sync.Map

// policyBurst: set_policy ["first-r"], then set_policy ["second-r"]. The last
// set_policy sent is the policy in force: no round's first is logged after its second.
func policyBurst() orderBurst {
	pat := func(which string, r int) string { return fmt.Sprintf("%s-%d", which, r) }
	return orderBurst{
		name: "policy",
		open: func(ctx context.Context, c *orderConn) error { return c.send(ctx, subscribeFrame(0)) },
		round: func(ctx context.Context, e env, c *orderConn, r int) error {
			if err := c.send(ctx,
				map[string]any{"type": "set_policy", "patterns": []string{pat("first", r)}},
				map[string]any{"type": "set_policy", "patterns": []string{pat("second", r)}},
			); err != nil {
				return err
			}
			if c.way == waySpaced {
				tie, err := c.tie(ctx, c.sent-1, c.sent)
				if err != nil {
					return err
				}
				ties.Store(fmt.Sprint(c.agent, r), tie)
			}
			if err := c.untilEvent(ctx, func(f frame) bool {
				return f.Type == "policy/updated" && strings.Contains(string(f.Pay), `"`+pat("second", r)+`"`)
			}); err != nil {
				return fmt.Errorf("waiting for the second policy: %w", err)
			}
			if c.way.ordered {
				return c.barrier(ctx)
			}
			return nil
		},
		final: func(ctx context.Context, e env, way sendWay, agent string) error {
			evs, err := e.log.Read(ctx, agent, 0, 100000)
			if err != nil {
				return err
			}
			at := map[string]int{}
			for i, ev := range evs {
				if ev.Type == "policy/updated" {
					var p struct{ Patterns []string }
					_ = json.Unmarshal(ev.Payload, &p)
					at[strings.Join(p.Patterns, ",")] = i
				}
			}
			var bad []string
			for r := range orderRounds {
				first, logged := at[pat("first", r)]
				second, ok := at[pat("second", r)]
				switch {
				case !ok:
					bad = append(bad, fmt.Sprintf("round %d: second never logged", r))
				case way == wayOrdered && !logged:
					bad = append(bad, fmt.Sprintf("round %d: first never logged", r))
				case logged && first > second && way == wayOrdered:
					bad = append(bad, fmt.Sprintf("round %d: first logged after second: first in force", r))
				case logged && first > second && way == waySpaced:
					if tie, _ := ties.Load(fmt.Sprint(agent, r)); tie != true {
						bad = append(bad, fmt.Sprintf("round %d: first logged after second though received a millisecond or more before it", r))
					}
				}
			}
			if len(bad) > 0 {
				return fmt.Errorf("%d rounds: %s", len(bad), strings.Join(bad[:min(3, len(bad))], "; "))
			}
			return nil
		},
	}
}

// modelBurst: set_model main to a Bedrock model that does not exist, then to another
// spec. The last one sent is in force: a numbered burst is checked behind its barrier,
// a plain one until the second shows and, for the last round, once every handler
// returned.
func modelBurst(db *dynamodb.Client) orderBurst {
	first := func(r int) string { return fmt.Sprintf("bedrock/nonexistent-%d", r) }
	second := func(r int) string {
		if r == orderRounds-1 {
			return "scripted"
		}
		return fmt.Sprintf("bedrock/second-%d", r)
	}
	return orderBurst{
		name: "model",
		round: func(ctx context.Context, e env, c *orderConn, r int) error {
			if err := c.send(ctx,
				map[string]any{"type": "set_model", "role": "main", "spec": first(r)},
				map[string]any{"type": "set_model", "role": "main", "spec": second(r)},
			); err != nil {
				return err
			}
			if c.way.ordered {
				if err := c.barrier(ctx); err != nil {
					return err
				}
				m, err := modelOf(ctx, db, e, c.agent)
				if err == nil && m != second(r) {
					err = fmt.Errorf("model main %q behind the barrier, want %q", m, second(r))
				}
				return err
			}
			either := c.way == wayBurst
			if !either {
				tie, err := c.tie(ctx, c.sent-1, c.sent)
				if err != nil {
					return err
				}
				either = tie
				ties.Store(fmt.Sprint(c.agent, r), tie)
			}
			// Nothing goes to the client: look at the state item until the second shows
			// (or, for frames received in one millisecond, either).
			for {
				m, err := modelOf(ctx, db, e, c.agent)
				if err != nil {
					return err
				}
				if m == second(r) || (either && m == first(r)) {
					return nil
				}
				if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
					return fmt.Errorf("model main never became %s (is %q)", second(r), m)
				}
			}
		},
		final: func(ctx context.Context, e env, way sendWay, agent string) error {
			m, err := modelOf(ctx, db, e, agent)
			if err != nil {
				return err
			}
			last := orderRounds - 1
			tie, _ := ties.Load(fmt.Sprint(agent, last))
			if m != second(last) && !((way == wayBurst || tie == true) && m == first(last)) {
				return fmt.Errorf("model main %q, want %q", m, second(last))
			}
			return nil
		},
	}
}

func modelOf(ctx context.Context, db *dynamodb.Client, e env, agent string) (string, error) {
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(e.stack.Tables["AgentsTable"]),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "agent#" + agent},
			"sk": &types.AttributeValueMemberS{Value: "state"},
		},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return "", err
	}
	if v, ok := out.Item["model_main"].(*types.AttributeValueMemberS); ok {
		return v.Value, nil
	}
	return "", nil
}

// subscribeTip is the tip of the seeded log the subscribe bursts read, and subscribeFirst
// the from_seq of their first subscribe.
const subscribeTip, subscribeFirst = 20, 15

// subscribeBurst: subscribe{from_seq: 15}, then subscribe{from_seq: 0}. The last one
// sent is in force: a client discarding events until seq == 0 gets 0..tip exactly —
// the history checker follows every subscription of the socket.
func subscribeBurst() orderBurst {
	return orderBurst{
		name: "subscribe",
		setup: func(t *testing.T, e env, agent string) {
			seedPadded(t, e.log, dynamolocal.Client(e.stack.DynamoDBEndpoint), e.stack.Tables["LogTable"], agent, subscribeTip, 0)
		},
		open: func(ctx context.Context, c *orderConn) error {
			c.hist = history.New()
			return nil
		},
		round: func(ctx context.Context, e env, c *orderConn, r int) error {
			if c.way == wayBurst {
				return burstSubscribes(ctx, c)
			}
			earlier := c.hist.Subscribe("c", subscribeFirst)
			last := c.hist.Subscribe("c", 0)
			if err := c.send(ctx, subscribeFrame(subscribeFirst), subscribeFrame(0)); err != nil {
				return err
			}
			tie := false
			if c.way == waySpaced {
				var err error
				if tie, err = c.tie(ctx, c.sent-1, c.sent); err != nil {
					return err
				}
			}
			// Received in one millisecond, either may be in force: the history checker
			// then follows the stream of whichever it is.
			for !last.Reached(subscribeTip) && !(tie && earlier.Reached(subscribeTip)) {
				f, err := c.next(ctx)
				if err != nil {
					return fmt.Errorf("%w; received: %s", err, c.hist.Summary())
				}
				switch {
				case f.Seq != nil:
					last.Receive(*f.Seq)
				default:
					return fmt.Errorf("unexpected %s", f)
				}
				if err := last.Err(); err != nil {
					return err
				}
			}
			if tie {
				return nil // the next round's subscribes replace both
			}
			return c.hist.Verify(subscribeTip)
		},
	}
}

// burstSubscribes: two subscribes in one millisecond may take effect in either order;
// whichever is in force, its replay reaches the tip with no gap.
func burstSubscribes(ctx context.Context, c *orderConn) error {
	if err := c.send(ctx, subscribeFrame(subscribeFirst), subscribeFrame(0)); err != nil {
		return err
	}
	return awaitEitherReplay(ctx, c)
}

// awaitEitherReplay reads until a gapless run from 0 or from 15 reaches the tip.
func awaitEitherReplay(ctx context.Context, c *orderConn) error {
	var run []int64 // the current gapless run
	for {
		f, err := c.next(ctx)
		if err != nil {
			return fmt.Errorf("%w; last run %v", err, run)
		}
		if f.Seq == nil {
			return fmt.Errorf("unexpected %s", f)
		}
		if s := *f.Seq; len(run) == 0 || s != run[len(run)-1]+1 {
			run = []int64{s}
		} else {
			run = append(run, s)
		}
		if run[len(run)-1] == subscribeTip && (run[0] == 0 || run[0] == subscribeFirst) {
			return nil
		}
	}
}

// steerBurst: ten steers (inject wake:false), then a waking inject. The steers are
// logged as context/injected in the order sent.
func steerBurst() orderBurst {
	return orderBurst{
		name: "steer",
		open: func(ctx context.Context, c *orderConn) error { return c.send(ctx, subscribeFrame(0)) },
		round: func(ctx context.Context, e env, c *orderConn, r int) error {
			prefix := fmt.Sprintf("r%d-", r)
			var frames []map[string]any
			var want []string
			for i := range 10 {
				want = append(want, fmt.Sprintf("%ss%d", prefix, i))
				frames = append(frames, map[string]any{"type": "inject", "text": want[i], "wake": false})
			}
			frames = append(frames, map[string]any{"type": "inject", "text": prefix + "go", "wake": true})
			if err := c.send(ctx, frames...); err != nil {
				return err
			}
			var got []string
			received := map[string]string{} // text → receive ms, from the inbox id
			for turns := 1; ; turns++ {
				err := c.untilEvent(ctx, func(f frame) bool {
					switch f.Type {
					case "context/injected":
						var p struct {
							Text    string
							InboxID string `json:"inbox_id"`
						}
						_ = json.Unmarshal(f.Pay, &p)
						if !strings.HasPrefix(p.Text, prefix) {
							return false
						}
						got = append(got, p.Text)
						received[p.Text], _, _ = strings.Cut(p.InboxID, "-")
					case "turn/end":
						return true
					}
					return false
				})
				if err != nil {
					return fmt.Errorf("steers logged %v: %w", got, err)
				}
				if len(got) >= len(want) {
					break
				}
				if c.way != wayBurst {
					return fmt.Errorf("turn ended with steers %v logged, want %v", got, want)
				}
				// Same millisecond: a steer served after the turn ended rides the next.
				if turns > 5 {
					return fmt.Errorf("steers %v still not all logged", got)
				}
				if err := c.send(ctx, map[string]any{"type": "inject", "text": prefix + "again", "wake": true}); err != nil {
					return err
				}
			}
			switch c.way {
			case wayBurst:
				if sorted := slices.Sorted(slices.Values(got)); !slices.Equal(sorted, want) {
					return fmt.Errorf("steers logged %v, want each of %v once", got, want)
				}
			case waySpaced:
				// Tier 1 orders by the gateway's receive time: two steers it received in
				// different milliseconds are logged in send order. (A loaded machine can
				// read frames sent 1–3 ms apart in one millisecond; those tie.)
				for i := range got {
					for j := i + 1; j < len(got); j++ {
						si, sj := slices.Index(want, got[i]), slices.Index(want, got[j])
						if si > sj && received[got[i]] != received[got[j]] {
							return fmt.Errorf("steers logged in the order %v (received at %v), want %v", got, received, want)
						}
					}
				}
			default:
				if !slices.Equal(got, want) {
					return fmt.Errorf("steers logged in the order %v, want %v", got, want)
				}
			}
			return nil
		},
	}
}

// cancelBurst: a waking inject that starts a turn, then cancel. The turn is cancelled,
// and the cancel is never answered not_running.
func cancelBurst() orderBurst {
	return orderBurst{
		name: "cancel",
		open: func(ctx context.Context, c *orderConn) error { return c.send(ctx, subscribeFrame(0)) },
		round: func(ctx context.Context, e env, c *orderConn, r int) error {
			// Fifteen one-second steps: a cancel that lands within them ends the turn at
			// the next step boundary; only one that never lands lets it complete.
			var steps []string
			for range 15 {
				steps = append(steps, `{"call":[{"tool":"sleep","args":{"ms":1000}}]}`)
			}
			script := `{"script":[` + strings.Join(steps, ",") + `,{"say":"ran to completion"}]}`
			if err := c.send(ctx,
				map[string]any{"type": "inject", "text": script, "wake": true},
				map[string]any{"type": "cancel", "reason": "stop"},
			); err != nil {
				return err
			}
			var status string
			err := c.untilEvent(ctx, func(f frame) bool {
				if f.Type != "turn/end" {
					return false
				}
				var p struct{ Status string }
				_ = json.Unmarshal(f.Pay, &p)
				status = p.Status
				return true
			})
			if err != nil {
				return err
			}
			if status != "cancelled" {
				return fmt.Errorf("turn ended %s, want cancelled", status)
			}
			return nil
		},
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// TestSubprotocolWithHeaderToken: a client that authenticates with the Authorization
// header and offers terret.v1 gets terret.v1 echoed (a client offering a subprotocol
// aborts a handshake that answers none), then hello.
func TestSubprotocolWithHeaderToken(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+tok)
	ws, resp, err := websocket.Dial(ctx, e.stack.WebSocketURL()+"/agents/a1/ws", &websocket.DialOptions{
		HTTPHeader: h, Subprotocols: []string{"terret.v1"},
	})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.CloseNow()
	if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != "terret.v1" {
		t.Fatalf("answered subprotocol %q, want terret.v1", got)
	}
	if _, b, err := ws.Read(ctx); err != nil || !strings.Contains(string(b), `"type":"hello"`) {
		t.Fatalf("first frame %s (%v), want hello", b, err)
	}
}

// TestEdgeFrames: frames at the protocol's bounds are accepted, whatever their
// characters ("<" is one byte in an event, as on the wire, not six).
func TestEdgeFrames(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	c := e.dial(t, "a1", e.token(t, "a1"))
	c.hello("a1")

	// last_seq + 1: a plain tail. Nothing comes for it: the next frame is set_policy's.
	c.send(`{"type":"subscribe","from_seq":1}`)

	var patterns []string
	for i := range 128 {
		patterns = append(patterns, fmt.Sprintf("%03d", i)+strings.Repeat("<", 253))
	}
	c.send(map[string]any{"type": "set_policy", "patterns": patterns})
	f := c.must(20 * time.Second)
	if f.Type != "policy/updated" || f.Seq == nil || *f.Seq != 1 {
		t.Fatalf("set_policy of 128 patterns of 256 characters answered %.200s, want policy/updated at seq 1", f)
	}
	if !strings.Contains(string(f.raw), `"000<<<`) {
		t.Fatalf("policy/updated %.200s: want \"<\" unescaped", f)
	}
	// Numbered, so the steer is queued before the wake below starts the turn.
	c.send(map[string]any{"type": "inject", "text": strings.Repeat("<", 10_923), "wake": false, "order": 1})
	c.send(map[string]any{"type": "inject", "text": strings.Repeat("<", 64<<10), "wake": false, "order": 2})
	if f := c.expectError("bad_frame"); !strings.Contains(f.Msg, "65538 bytes JSON-encoded") {
		t.Fatalf("inject over the bound answered %s, want bad_frame measuring 65538 bytes", f)
	}
	c.send(map[string]any{"type": "inject", "text": "go", "wake": true, "order": 3})
	for {
		f := c.must(30 * time.Second)
		if f.Type == "error" {
			t.Fatalf("unexpected %s", f)
		}
		if f.Type == "context/injected" {
			var p struct{ Text string }
			_ = json.Unmarshal(f.Pay, &p)
			if p.Text != strings.Repeat("<", 10_923) {
				t.Fatalf("the steer of 10,923 \"<\" was logged as %d bytes", len(p.Text))
			}
			return
		}
	}
}

// TestGatewayFrameLimits: with API Gateway's limits on, a frame over 32 KB or a message
// over 128 KB closes the connection with 1009, while a 100 KB message in 32 KB frames
// (as the Go client sends it) is served.
func TestGatewayFrameLimits(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{GatewayLimits: true})
	tok := e.token(t, "a1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func() *websocket.Conn {
		t.Helper()
		ws, _, err := websocket.Dial(ctx, e.stack.WebSocketURL()+"/agents/a1/ws", &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}},
		})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		if _, b, err := ws.Read(ctx); err != nil || !strings.Contains(string(b), `"hello"`) {
			t.Fatalf("first frame %s (%v), want hello", b, err)
		}
		return ws
	}
	// send writes msg as frames of at most frame bytes (one Write is one frame).
	send := func(ws *websocket.Conn, msg []byte, frame int) {
		t.Helper()
		w, err := ws.Writer(ctx, websocket.MessageText)
		if err != nil {
			t.Fatal(err)
		}
		for len(msg) > 0 {
			n := min(frame, len(msg))
			if _, err := w.Write(msg[:n]); err != nil {
				return // the server may close before the end
			}
			msg = msg[n:]
		}
		_ = w.Close()
	}
	inject := func(n int) []byte {
		return fmt.Appendf(nil, `{"type":"inject","text":%q,"wake":false}`, strings.Repeat("x", n))
	}
	for _, tc := range []struct {
		name       string
		msg        []byte
		frame      int
		wantClosed bool
	}{
		{"100 KB in 32 KB frames", inject(100_000), 32_000, false},
		{"one 33 KB frame", inject(33 << 10), 64 << 10, true},
		{"130 KB in 32 KB frames", inject(130 << 10), 32_000, true},
	} {
		ws := dial()
		send(ws, tc.msg, tc.frame)
		if !tc.wantClosed {
			// Served: a bad frame after it is answered on the same socket.
			send(ws, []byte(`{"type":"nope"}`), 100)
			_, b, err := ws.Read(ctx)
			if err != nil || !strings.Contains(string(b), "bad_frame") {
				t.Fatalf("%s: then got %s (%v), want the next frame answered", tc.name, b, err)
			}
			ws.CloseNow()
			continue
		}
		_, _, err := ws.Read(ctx)
		if got := websocket.CloseStatus(err); got != websocket.StatusMessageTooBig {
			t.Fatalf("%s: read ended with %v (status %d), want close 1009", tc.name, err, got)
		}
		ws.CloseNow()
	}
}
