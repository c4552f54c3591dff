package devstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/history"
	"github.com/terret/terret-ws/internal/tools"
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
// Each kind of burst plays orderRounds rounds per way. A few sockets, each on an agent
// of its own, share those rounds: each takes the next round as it finishes one. Every
// socket runs at once, so bursts on many agents — of one kind and of others — overlap
// all the time; the protocol orders frames within one connection only, and no amount of
// traffic on other connections may disturb that. A round is checked as soon as what it
// waits for is known, never after a wait for a while: the event it expects, or (through
// frameTrack) every one of its frames' handlers returned, after which nothing it sent
// can still change what it checks.

// orderStacks is how many local stacks the sockets run on; each burst names its stack.
// The sockets of one stack share one in-process runtime and its fast-path notifier, so
// the turns of some agents slow the handlers of the others (on Lambda every invocation
// is alone in its sandbox). The bursts that run turns (steer, cancel) therefore have
// stacks of their own, and the quick ones share one.
const orderStacks = 3

// orderRounds is the rounds of each burst per way (soakRounds: 50 under make soak;
// ORDER_ROUNDS overrides it).
var orderRounds int

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

// orderConn is one agent's socket: frames go out as the way says, frames in are read by
// one goroutine. Its methods return errors: sockets run on goroutines of their own.
type orderConn struct {
	e      env
	track  *frameTrack
	way    sendWay
	agent  string
	token  string
	ws     *websocket.Conn
	frames chan read
	dials  int    // connections opened: the current one is the agent's dials-th
	id     string // the current connection's id, once looked up
	n      int64  // order of the last numbered frame on the current connection
	sent   int64  // frames sent on the current connection: the gateway numbers them the same way
	late   int    // frames of the current connection that outran a bound before the current round

	hist    *history.History // subscribe: what the current connection received
	fresh   bool             // subscribe: the next round needs a connection of its own
	logNext int64            // policy: the first seq of the agent's log not read yet
}

// dial opens a connection for the agent, closing the last one, and reads its hello.
// The order field starts again at 1.
func (c *orderConn) dial(ctx context.Context) error {
	if c.ws != nil {
		c.ws.CloseNow()
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+c.token)
	ws, _, err := websocket.Dial(ctx, c.e.stack.WebSocketURL()+"/agents/"+c.agent+"/ws", &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	ws.SetReadLimit(1 << 20)
	frames := make(chan read, 10000)
	go func() {
		for {
			_, b, err := ws.Read(context.Background())
			frames <- read{b, err}
			if err != nil {
				return
			}
		}
	}()
	c.ws, c.frames, c.dials, c.id, c.n, c.sent, c.late = ws, frames, c.dials+1, "", 0, 0, 0
	f, err := c.next(ctx)
	if err != nil {
		return err
	}
	if f.Type != "hello" {
		return fmt.Errorf("first frame %s, want hello", f)
	}
	return nil
}

// redial is dial for a connection of its own after a round: a handshake answered 500
// because a $connect handler outlasted its deadline (a machine too slow for Lambda's
// bound, see errBeyondDeadline) is tried again; any other failure is returned.
func (c *orderConn) redial(ctx context.Context) error {
	for {
		before := c.track.lateConnects()
		err := c.dial(ctx)
		if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "got 500") || c.track.lateConnects() == before {
			return err
		}
	}
}

// connID returns the current connection's id, as the stack logged it.
func (c *orderConn) connID(ctx context.Context) (string, error) {
	if c.id == "" {
		id, err := c.track.conn(ctx, c.agent, c.dials)
		if err != nil {
			return "", err
		}
		c.id = id
	}
	return c.id, nil
}

// received returns the times the gateway received frames i and j (numbered from 1 on
// the current connection, as sent). Plain frames received in the same millisecond tie:
// tier 1 orders by receive time only, so a round whose frames tied may end either way.
func (c *orderConn) received(ctx context.Context, i, j int64) (a, b int64, err error) {
	id, err := c.connID(ctx)
	if err != nil {
		return 0, 0, err
	}
	if a, err = c.track.epoch(ctx, id, i); err != nil {
		return 0, 0, err
	}
	b, err = c.track.epoch(ctx, id, j)
	return a, b, err
}

// tie reports whether a spaced round's last two frames were received in one
// millisecond (always false for the other ways, which do not look).
func (c *orderConn) tie(ctx context.Context) (bool, error) {
	if c.way != waySpaced {
		return false, nil
	}
	a, b, err := c.received(ctx, c.sent-1, c.sent)
	return a == b, err
}

// settled returns once the handler of every frame sent on the current connection has
// returned: what those frames change is in place, and none of them can change it later.
func (c *orderConn) settled(ctx context.Context) error {
	id, err := c.connID(ctx)
	if err != nil {
		return err
	}
	return c.track.settled(ctx, id, c.sent)
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
			time.Sleep(time.Millisecond + rand.N(2*time.Millisecond)) // the spacing is the traffic under test
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

// noErrors fails on an error frame among the frames already received: a round that
// waits for its handlers rather than for frames still sees an error they answered (by
// the next round at the latest).
func (c *orderConn) noErrors() error {
	for {
		select {
		case r := <-c.frames:
			if r.err != nil {
				c.frames <- r
				return r.err
			}
			var f frame
			if err := json.Unmarshal(r.b, &f); err != nil {
				return err
			}
			if f.Type == "error" {
				return fmt.Errorf("error frame %s", r.b)
			}
		default:
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

// orderBurst is one kind of burst. lanes sockets per way share its rounds; setup runs
// for each lane's agent before the sockets open, open once on each socket before its
// rounds, and round plays round r and checks it.
type orderBurst struct {
	name  string
	stack int // which of the orderStacks stacks its sockets run on
	lanes int
	setup func(t *testing.T, e env, agent string) // on the test goroutine
	open  func(ctx context.Context, c *orderConn) error
	round func(ctx context.Context, c *orderConn, r int) error
}

func TestFrameOrder(t *testing.T) {
	// Not parallel: its sockets are load enough, and the waits the stack bounds (the
	// steer settle, the turnstile's wait, a cancel's wait for an in-flight wake) are
	// about handler latency, which other tests would inflate.
	orderRounds = soakRounds(t, "ORDER_ROUNDS", 8, 50)

	track := newFrameTrack()
	reqs := &requestMeter{}
	var h slog.Handler = track.handler()
	if os.Getenv("DEVSTACK_LOG") == "1" {
		var level slog.Level
		_ = level.UnmarshalText([]byte(testLogLevel()))
		h = slog.NewMultiHandler(h, slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	// The model bursts switch to specs the demo profile's allowed_models refuses.
	anyModel := tools.DefaultProfile()
	anyModel.AllowedModels = []string{"*"}
	profJSON, err := json.Marshal(anyModel)
	if err != nil {
		t.Fatal(err)
	}
	profFile := filepath.Join(t.TempDir(), "profile.json")
	if err := os.WriteFile(profFile, profJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	var stacks []env
	for range orderStacks {
		stacks = append(stacks, startStack(t, devstack.Options{
			Logger:  slog.New(h),
			Profile: profFile,
			// The run outlasts API Gateway's 10-minute idle close, which a lane waiting
			// for its next round would meet: no limit here (TestKeepaliveAndIdleClose
			// tests it).
			IdleTimeout:           24 * time.Hour,
			MaxConnectionDuration: 24 * time.Hour,
			// The stream consumer is only the backstop of what the rounds wait for (the
			// fast path delivers events, the runner is invoked directly): polled less, it
			// leaves DynamoDB Local to the rounds.
			PollInterval: 100 * time.Millisecond,
			// The track sees the handlers return: in-process only.
			LambdaEmulator: inProcess,
			// Every socket's frames dispatched as they arrive: a frame read late, waiting
			// for a $default slot, would tie with the next.
			Measure: devstack.Measure{Wrap: track.wrap, MaxConcurrency: 1024, Clients: reqs.meter, PollerClients: reqs.meter},
		}))
	}
	db := dynamolocal.Client(stacks[0].stack.DynamoDBEndpoint)
	bursts := []orderBurst{policyBurst(), modelBurst(db), subscribeBurst(), steerBurst(), cancelBurst()}
	if only := os.Getenv("ORDER_BURST"); only != "" {
		bursts = slices.DeleteFunc(bursts, func(b orderBurst) bool { return b.name != only })
	}

	type lane struct {
		e       env
		burst   orderBurst
		way     sendWay
		agent   string
		token   string
		rounds  *atomic.Int64 // the next round of the burst and way
		checked *atomic.Int64 // its rounds played within the protocol's bounds
		key     string        // burst-way
	}
	var lanes []*lane
	for _, b := range bursts {
		for _, w := range sendWays {
			next, checked := new(atomic.Int64), new(atomic.Int64)
			for i := range b.lanes {
				ln := &lane{e: stacks[b.stack], burst: b, way: w, agent: fmt.Sprintf("%s-%s-%d", b.name, w.name, i), rounds: next, checked: checked, key: b.name + "-" + w.name}
				if b.setup != nil {
					b.setup(t, ln.e, ln.agent)
				}
				lanes = append(lanes, ln)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(lanes))
	for i, ln := range lanes {
		wg.Go(func() { ln.token, errs[i] = ln.e.tokens.Create(context.Background(), ln.agent) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	type play struct {
		key, burst, agent string
		from, to          time.Time
	}
	start := time.Now()
	var mu sync.Mutex
	var plays []play
	failures := map[string][]string{} // by burst-way
	beyond := map[string][]string{}   // by burst-way: rounds outside the documented bounds
	// fail records a round's failure; it reports whether the round was outside a bound
	// the protocol documents (errBeyond) rather than a failure.
	fail := func(k string, err error) bool {
		mu.Lock()
		defer mu.Unlock()
		if errors.Is(err, errBeyond) {
			beyond[k] = append(beyond[k], err.Error())
			return true
		}
		failures[k] = append(failures[k], err.Error())
		return false
	}
	// The sockets open one after another: every $connect at once would only queue up in
	// DynamoDB Local.
	conns := make([]*orderConn, len(lanes))
	for i, ln := range lanes {
		ctx, cancel := hangContext(t)
		c := &orderConn{e: ln.e, track: track, way: ln.way, agent: ln.agent, token: ln.token}
		err := c.redial(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", ln.agent, err)
		}
		t.Cleanup(func() { c.ws.CloseNow() })
		conns[i] = c
	}
	for i, ln := range lanes {
		c := conns[i]
		wg.Go(func() {
			// Only a hang ends a lane early: a round waits for what it checks, however
			// long a loaded machine takes to get there.
			ctx, cancel := hangContext(t)
			defer cancel()
			if ln.burst.open != nil {
				if err := ln.burst.open(ctx, c); err != nil {
					fail(ln.key, fmt.Errorf("%s: %w", ln.agent, err))
					return
				}
			}
			// orderRounds rounds within the bounds: a round outside them (errBeyond)
			// checks nothing and is played again, under a new number.
			for ln.checked.Load() < int64(orderRounds) {
				r := int(ln.rounds.Add(1) - 1)
				from := time.Now()
				err := ln.burst.round(ctx, c, r)
				if err != nil {
					err = c.beyondDeadline(ctx, err)
				}
				mu.Lock()
				plays = append(plays, play{ln.key, ln.burst.name, ln.agent, from, time.Now()})
				mu.Unlock()
				if err == nil {
					ln.checked.Add(1)
					if c.id != "" {
						c.late = c.track.overruns(c.id) // a later failure is the later round's
					}
					continue
				}
				if !fail(ln.key, fmt.Errorf("%s round %d: %w", ln.agent, r, err)) || ctx.Err() != nil {
					return
				}
				// What the round left in flight is not the next one's: a connection of
				// its own.
				if err := c.redial(ctx); err != nil {
					fail(ln.key, fmt.Errorf("%s: %w", ln.agent, err))
					return
				}
				if ln.burst.open != nil {
					if err := ln.burst.open(ctx, c); err != nil {
						fail(ln.key, fmt.Errorf("%s: %w", ln.agent, err))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d sockets played %d rounds of each of %d bursts × %d ways in %v; %d stacks sent %v", len(lanes), orderRounds,
		len(bursts), len(sendWays), time.Since(start).Round(time.Millisecond), len(stacks), reqs)

	// Every round played, and bursts of each kind on distinct agents at once.
	played := map[string]int{}
	overlaps := map[string]int{}
	took := map[string]time.Duration{}
	for i, p := range plays {
		played[p.key]++
		took[p.key] = max(took[p.key], p.to.Sub(start))
		for _, q := range plays[i+1:] {
			if q.burst == p.burst && q.agent != p.agent && q.from.Before(p.to) && p.from.Before(q.to) {
				overlaps[p.burst]++
			}
		}
	}
	for _, b := range bursts {
		for _, w := range sendWays {
			k := b.name + "-" + w.name
			t.Logf("%s: %d rounds on %d agents, done after %v", k, played[k], b.lanes, took[k].Round(time.Millisecond))
			if fs := failures[k]; len(fs) > 0 {
				t.Errorf("%s: %d failures; first: %s", k, len(fs), strings.Join(fs[:min(3, len(fs))], "; "))
			}
			if bs := beyond[k]; len(bs) > 0 {
				t.Logf("%s: %d rounds outside the protocol's bounds, played again; first: %s", k, len(bs), bs[0])
			}
			if n := played[k] - len(beyond[k]); n < orderRounds && len(failures[k]) == 0 {
				t.Errorf("%s: %d rounds played within the bounds, want %d", k, n, orderRounds)
			}
		}
		if orderRounds > 1 && overlaps[b.name] == 0 {
			t.Errorf("%s: no two rounds on distinct agents overlapped, want bursts on two agents at once", b.name)
		}
	}
}

func subscribeFrame(from int64) map[string]any {
	return map[string]any{"type": "subscribe", "from_seq": from}
}

// policyBurst: set_policy ["first-r"], then set_policy ["second-r"]. The last
// set_policy sent is the policy in force: once both handlers returned, the agent's log
// holds the round's policy/updated events, and "first" is never the last of them
// (frames received a millisecond or more apart, or numbered). A set_policy handled
// after a later one logs nothing, so "first" may be missing unless numbered; one
// logged after a later one has that one repeated after it (agent.Service.SetPolicy).
func policyBurst() orderBurst {
	return orderBurst{
		name:  "policy",
		stack: 0,
		lanes: 2,
		round: func(ctx context.Context, c *orderConn, r int) error {
			first, second := fmt.Sprintf("first-%d", r), fmt.Sprintf("second-%d", r)
			if err := c.send(ctx,
				map[string]any{"type": "set_policy", "patterns": []string{first}},
				map[string]any{"type": "set_policy", "patterns": []string{second}},
			); err != nil {
				return err
			}
			tie, err := c.tie(ctx)
			if err != nil {
				return err
			}
			if err := c.settled(ctx); err != nil {
				return err
			}
			if err := c.noErrors(); err != nil {
				return err
			}
			evs, err := c.e.log.Read(ctx, c.agent, c.logNext, 1000)
			if err != nil {
				return err
			}
			var got []string
			for _, ev := range evs {
				c.logNext = ev.Seq + 1
				if ev.Type == "policy/updated" {
					var p struct{ Patterns []string }
					_ = json.Unmarshal(ev.Payload, &p)
					got = append(got, strings.Join(p.Patterns, ","))
				}
			}
			in := func(wants ...[]string) bool {
				return slices.ContainsFunc(wants, func(w []string) bool { return slices.Equal(got, w) })
			}
			switch {
			case c.way == wayOrdered && !in([]string{first, second}):
				return fmt.Errorf("policies logged %q, want %q then %q", got, first, second)
			case c.way == waySpaced && !tie && !in([]string{first, second}, []string{second}, []string{second, first, second}):
				return fmt.Errorf("policies logged %q (frames received a millisecond or more apart), want %q last and %q, if at all, before it (or repeated over)", got, second, first)
			case !in([]string{first, second}, []string{second}, []string{first}, []string{second, first}, []string{second, first, second}):
				return fmt.Errorf("policies logged %q, want %q and %q, each at most once (or %q repeated over %q)", got, first, second, second, first)
			}
			return nil
		},
	}
}

// modelBurst: set_model main to a Bedrock model that does not exist, then to another
// spec. The last one sent is in force once both handlers returned (either, for frames
// received in one millisecond without the order field).
func modelBurst(db *dynamodb.Client) orderBurst {
	return orderBurst{
		name:  "model",
		stack: 0,
		lanes: 2,
		round: func(ctx context.Context, c *orderConn, r int) error {
			first, second := fmt.Sprintf("bedrock/nonexistent-%d", r), fmt.Sprintf("bedrock/second-%d", r)
			if err := c.send(ctx,
				map[string]any{"type": "set_model", "role": "main", "spec": first},
				map[string]any{"type": "set_model", "role": "main", "spec": second},
			); err != nil {
				return err
			}
			tie, err := c.tie(ctx)
			if err != nil {
				return err
			}
			if err := c.settled(ctx); err != nil {
				return err
			}
			if err := c.noErrors(); err != nil {
				return err
			}
			m, err := modelOf(ctx, db, c.e, c.agent)
			if err != nil {
				return err
			}
			if m != second && !((c.way == wayBurst || tie) && m == first) {
				return fmt.Errorf("model main %q once both set_model were handled, want %q", m, second)
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
const subscribeTip, subscribeFirst = 12, 8

// subscribeBurst: subscribe{from_seq: 8}, then subscribe{from_seq: 0}. The last one
// sent is in force: a client discarding events until seq == 0 gets 0..tip exactly —
// the history checker follows every subscription of the connection, across its rounds.
// Of two subscribes received in one millisecond without the order field either may be
// in force, and the other's replay may come after it: whichever is in force replays to
// the tip with no gap, and the next round takes a connection of its own.
func subscribeBurst() orderBurst {
	return orderBurst{
		name:  "subscribe",
		stack: 0,
		lanes: 2,
		setup: func(t *testing.T, e env, agent string) {
			seedPadded(t, e.log, dynamolocal.Client(e.stack.DynamoDBEndpoint), e.stack.Tables["LogTable"], agent, subscribeTip, 0)
		},
		open: func(ctx context.Context, c *orderConn) error {
			c.hist = history.New()
			return nil
		},
		round: func(ctx context.Context, c *orderConn, r int) (err error) {
			defer func() {
				if err != nil {
					c.fresh = true // what is left in flight is not this round's
				}
			}()
			if c.fresh {
				if err := c.redial(ctx); err != nil {
					return err
				}
				c.hist, c.fresh = history.New(), false
			}
			if c.way == wayBurst {
				c.fresh = true
				if err := c.send(ctx, subscribeFrame(subscribeFirst), subscribeFrame(0)); err != nil {
					return err
				}
				return awaitEitherReplay(ctx, c)
			}
			c.hist.Subscribe("c", subscribeFirst)
			last := c.hist.Subscribe("c", 0)
			if err := c.send(ctx, subscribeFrame(subscribeFirst), subscribeFrame(0)); err != nil {
				return err
			}
			if tie, err := c.tie(ctx); err != nil {
				return err
			} else if tie {
				c.fresh = true
				return awaitEitherReplay(ctx, c)
			}
			for !last.Reached(subscribeTip) {
				f, err := c.next(ctx)
				if err != nil {
					return fmt.Errorf("%w; received: %s", err, c.hist.Summary())
				}
				if f.Seq == nil {
					return fmt.Errorf("unexpected %s", f)
				}
				last.Receive(*f.Seq)
				if err := last.Err(); err != nil {
					return c.subscribeFailed(ctx, err)
				}
			}
			if err := c.hist.Verify(subscribeTip); err != nil {
				return c.subscribeFailed(ctx, err)
			}
			return nil
		},
	}
}

// subscribeFailed adds to a spaced or numbered round's failure when the gateway
// received its two subscribes.
func (c *orderConn) subscribeFailed(ctx context.Context, err error) error {
	a, b, rerr := c.received(ctx, c.sent-1, c.sent)
	if rerr != nil {
		return err
	}
	return fmt.Errorf("%w (subscribes received at %d and %d ms; received: %s)", err, a, b, c.hist.Summary())
}

// awaitEitherReplay reads until a gapless run from 0 or from subscribeFirst reaches the
// tip.
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

// errBeyond marks a round that went outside a bound the protocol documents, which no
// guarantee covers: logged and played again, not a failure. It wraps one of the
// errBeyond… errors below.
var errBeyond = errors.New("outside the protocol's bounds")

var (
	// errBeyondSettle: a spaced steer round whose order was reversed by a steer handled
	// outside tier 1's documented bound (queued more than agent.DrainSettle after its
	// receipt).
	errBeyondSettle = fmt.Errorf("%w: a steer handled beyond the drain settle", errBeyond)
	// errBeyondDeadline: a round one of whose frames' handlers ran to its deadline
	// (Lambda's, 29 s for $default: the server answers internal and closes) or was
	// served without its predecessor once the turnstile's wait (socket.OrderWait) had
	// passed. Only a machine too slow for those bounds gets there.
	errBeyondDeadline = fmt.Errorf("%w: a handler outlasted its deadline or the turnstile's wait", errBeyond)
	// errBeyondInFlight: a cancel answered not_running because the waking inject sent
	// before it was handled more than agent.InFlightBound after the cancel's receipt.
	errBeyondInFlight = fmt.Errorf("%w: the wake was handled beyond the cancel's in-flight wait", errBeyond)
)

// beyondDeadline returns err marked errBeyondDeadline when a handler of a frame sent
// on the current connection outlasted its deadline or the turnstile's wait (it waits
// for every one of them to return), else err as it is.
func (c *orderConn) beyondDeadline(ctx context.Context, err error) error {
	if errors.Is(err, errBeyond) {
		return err
	}
	id, ierr := c.connID(ctx)
	if ierr != nil {
		return err
	}
	if n, lerr := c.track.outran(ctx, id, c.sent); lerr == nil && n > c.late {
		return fmt.Errorf("%w (%v; the stack logged %q)", errBeyondDeadline, err, c.track.logged(id))
	}
	return err
}

// steerBurst: ten steers (inject wake:false), then a waking inject. The steers are
// logged as context/injected in the order sent.
func steerBurst() orderBurst {
	return orderBurst{
		name:  "steer",
		stack: 1,
		lanes: 2,
		open:  func(ctx context.Context, c *orderConn) error { return c.send(ctx, subscribeFrame(0)) },
		round: func(ctx context.Context, c *orderConn, r int) error {
			prefix := fmt.Sprintf("r%d-", r)
			var frames []map[string]any
			var want []string
			for i := range 10 {
				want = append(want, fmt.Sprintf("%ss%d", prefix, i))
				frames = append(frames, map[string]any{"type": "inject", "text": want[i], "wake": false})
			}
			frames = append(frames, map[string]any{"type": "inject", "text": prefix + "go", "wake": true})
			first := c.sent + 1 // the gateway's number for steer 0 on this connection
			if err := c.send(ctx, frames...); err != nil {
				return err
			}
			var got []string
			// A round waits for the end of the turn that logged its waking inject: the
			// turn that inject started, or a turn already running that took it as a
			// steer (one a round outside the bounds left behind, which a round played
			// again right after it meets). A turn/end before the wake is logged is an
			// earlier turn's, and so is every one a connection opened after such a round
			// replays from seq 0: the round's texts carry its own prefix.
			wake := prefix + "go"
			for turns := 1; ; turns++ {
				woke := false
				err := c.untilEvent(ctx, func(f frame) bool {
					var p struct{ Text string }
					_ = json.Unmarshal(f.Pay, &p)
					switch f.Type {
					case "user/message", "context/injected":
						if p.Text == wake {
							woke = true
						} else if f.Type == "context/injected" && slices.Contains(want, p.Text) {
							got = append(got, p.Text)
						}
					case "turn/end":
						return woke
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
					if c.way == waySpaced { // numbered steers have the turnstile: no settle
						if err := c.steersMissed(ctx, first, want, got); err != nil {
							return err
						}
					}
					return fmt.Errorf("turn ended with steers %v logged, want %v", got, want)
				}
				// Same millisecond: a steer served after the turn ended rides the next.
				if turns > 5 {
					return fmt.Errorf("steers %v still not all logged", got)
				}
				wake = fmt.Sprintf("%sagain%d", prefix, turns)
				if err := c.send(ctx, map[string]any{"type": "inject", "text": wake, "wake": true}); err != nil {
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
				// read frames sent 1–3 ms apart in one millisecond; those tie.) The
				// receive times are the gateway's, not what the server made of them.
				for i := range got {
					for j := i + 1; j < len(got); j++ {
						si, sj := int64(slices.Index(want, got[i])), int64(slices.Index(want, got[j]))
						if si < sj || si < 0 || sj < 0 {
							continue
						}
						a, b, err := c.received(ctx, first+sj, first+si)
						if err != nil {
							return err
						}
						if a == b {
							continue
						}
						// The documented bound (docs/protocol.md, tier 1): a steer is
						// ordered if its handler queued it within agent.DrainSettle of its
						// receipt. A straggler whose handler returned later than that is
						// outside it; any other reversal is a failure.
						id, err := c.connID(ctx)
						if err != nil {
							return err
						}
						ret, err := c.track.returnedAt(ctx, id, got[j])
						if err != nil {
							return err
						}
						if late := ret - a; late > agent.DrainSettle.Milliseconds() {
							return fmt.Errorf("%w: %s received at %d ms, its handler returned %d ms later; logged after %s (received at %d ms)", errBeyondSettle, got[j], a, late, got[i], b)
						}
						return fmt.Errorf("steers logged in the order %v, want %v: %s (received at %d ms) before %s (received at %d ms, handler returned %d ms later)", got, want, got[i], b, got[j], a, ret-a)
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

// steersMissed returns errBeyondSettle when a steer the turn did not log (of want, sent
// from the connection's frame first on) was queued outside tier 1's bound: its handler
// returned more than agent.DrainSettle after its receipt, so the turn's drain may have
// come first. Nil when every missing steer was handled within the bound (a failure).
func (c *orderConn) steersMissed(ctx context.Context, first int64, want, got []string) error {
	id, err := c.connID(ctx)
	if err != nil {
		return err
	}
	for k, w := range want {
		if slices.Contains(got, w) {
			continue
		}
		at, err := c.track.epoch(ctx, id, first+int64(k))
		if err != nil {
			return err
		}
		ret, err := c.track.returnedAt(ctx, id, w)
		if err != nil {
			return err
		}
		if late := ret - at; late > agent.DrainSettle.Milliseconds() {
			return fmt.Errorf("%w: %s received at %d ms, its handler returned %d ms later; the turn ended with %v logged", errBeyondSettle, w, at, late, got)
		}
	}
	return nil
}

// cancelBurst: a waking inject that starts a turn, then cancel. The turn is cancelled,
// and the cancel is never answered not_running.
func cancelBurst() orderBurst {
	return orderBurst{
		name:  "cancel",
		stack: 2,
		lanes: 2,
		open:  func(ctx context.Context, c *orderConn) error { return c.send(ctx, subscribeFrame(0)) },
		round: func(ctx context.Context, c *orderConn, r int) error {
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
				if strings.Contains(err.Error(), `"code":"not_running"`) {
					return c.cancelRefused(ctx, script, err)
				}
				return err
			}
			if status != "cancelled" {
				return fmt.Errorf("turn ended %s, want cancelled", status)
			}
			return nil
		},
	}
}

// cancelRefused marks a cancel round's not_running errBeyondInFlight when the handler
// of the waking inject before it returned more than agent.InFlightBound after the
// cancel's receipt: the cancel waited for it as long as the protocol says, and no
// longer. A numbered cancel never waits (the turnstile did): a gap there is
// beyondDeadline's.
func (c *orderConn) cancelRefused(ctx context.Context, script string, err error) error {
	if c.way == wayOrdered {
		return err
	}
	id, ierr := c.connID(ctx)
	if ierr != nil {
		return err
	}
	if serr := c.settled(ctx); serr != nil {
		return err
	}
	at, eerr := c.track.epoch(ctx, id, c.sent) // the cancel's receipt
	if eerr != nil {
		return err
	}
	ret, rerr := c.track.returnedAt(ctx, id, script) // settled: this round's inject
	if rerr != nil {
		return err
	}
	if late := ret - at; late > agent.InFlightBound.Milliseconds() {
		return fmt.Errorf("%w: the inject's handler returned %d ms after the cancel's receipt (%v)", errBeyondInFlight, late, err)
	}
	return fmt.Errorf("%w (the inject's handler returned %d ms after the cancel's receipt)", err, ret-at)
}

// TestSubprotocolWithHeaderToken: a client that authenticates with the Authorization
// header and offers terret.v1 gets terret.v1 echoed (a client offering a subprotocol
// aborts a handshake that answers none), then hello.
func TestSubprotocolWithHeaderToken(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	ctx, cancel := context.WithTimeout(context.Background(), hang())
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
	c.send(unescaped(t, map[string]any{"type": "set_policy", "patterns": patterns}))
	f := c.must(hang())
	if f.Type != "policy/updated" || f.Seq == nil || *f.Seq != 1 {
		t.Fatalf("set_policy of 128 patterns of 256 characters answered %.200s, want policy/updated at seq 1", f)
	}
	if !strings.Contains(string(f.raw), `"000<<<`) {
		t.Fatalf("policy/updated %.200s: want \"<\" unescaped", f)
	}
	// Numbered, so the steer is queued before the wake below starts the turn.
	c.send(unescaped(t, map[string]any{"type": "inject", "text": strings.Repeat("<", 10_923), "wake": false, "order": 1}))
	c.send(unescaped(t, map[string]any{"type": "inject", "text": strings.Repeat("<", 64<<10), "wake": false, "order": 2}))
	if f := c.expectError("bad_frame"); !strings.Contains(f.Msg, "65538 bytes JSON-encoded") {
		t.Fatalf("inject over the bound answered %s, want bad_frame measuring 65538 bytes", f)
	}
	c.send(map[string]any{"type": "inject", "text": "go", "wake": true, "order": 3})
	for {
		f := c.must(hang())
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

// unescaped encodes v as a client would send it, "<" as it is: escaped as \u003c
// (encoding/json's default) a large frame of them passes API Gateway's 128 KB message
// limit, and the gateway closes the socket with 1009.
func unescaped(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// TestGatewayFrameLimits: with API Gateway's limits on, a frame over 32 KB or a message
// over 128 KB closes the connection with 1009, while a 100 KB message in 32 KB frames
// (as the Go client sends it) is served.
func TestGatewayFrameLimits(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{GatewayLimits: true})
	tok := e.token(t, "a1")
	ctx, cancel := context.WithTimeout(context.Background(), hang())
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
