package devstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
)

// The agent runtime as a client of a running `terret dev` sees it: every test drives
// agents over real sockets with the scripted model and the demo tools of
// dev-profile.md, and asserts the exact events the log delivers.
//
// A test's agents run concurrently, as flows (runFlows): most of a flow's time is
// spent waiting on the runtime (a sleep tool, a stream poll), and t.Parallel would
// run only GOMAXPROCS flows at once.

// startRuntimeStack is startStack for these tests. Its stream poll is slower than the
// helpers' default, which keeps several stacks off DynamoDB Local's back on a 2-core
// machine; it drops its tables when the test ends, so that a shared DynamoDB Local
// does not pile them up; and it installs a pauser (e.pause) through which flows hold
// the runtime at agent.Pause* points — in process, or in the emulated functions through
// the stack's pause server (package pausehook).
func startRuntimeStack(t *testing.T, o devstack.Options) env {
	t.Helper()
	o.PollInterval = 50 * time.Millisecond
	p := newPauser()
	o.Pause = p.hook
	calls := newInvocations()
	wrap := calls.wrap
	if outer := o.Measure.Wrap; outer != nil {
		wrap = func(name string, h lambda.Handler) lambda.Handler { return outer(name, calls.wrap(name, h)) }
	}
	o.Measure.Wrap = wrap
	e := startStack(t, o)
	e.pause, e.calls = p, calls
	t.Cleanup(func() {
		p.close()       // first: a handler held at a pause point would keep Close waiting
		e.stack.Close() // idempotent: stop the pollers and handlers before their tables go
		db := dynamolocal.Client(e.stack.DynamoDBEndpoint)
		for _, name := range e.stack.Tables {
			if _, err := db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name}); err != nil {
				t.Logf("drop table %s: %v", name, err)
			}
		}
	})
	return e
}

// windowMS is the sleep tool run a flow acts during (steer, cancel, set_policy, drop).
// The flow holds the runner at agent.PauseRun while it acts (runWindow), so the sleep's
// length does not matter and it is short.
const windowMS = 20

var (
	windowArgs   = fmt.Sprintf(`{"ms":%d}`, windowMS)
	windowResult = fmt.Sprintf(`{"slept_ms":%d}`, windowMS)
)

// sleepThenSay is a script: a sleep tool of windowMS, then say text.
func sleepThenSay(text string) string {
	return fmt.Sprintf(`{"script":[{"call":[{"tool":"sleep","args":%s}]},{"say":%q}]}`, windowArgs, text)
}

// flow is one agent's part of a test.
type flow struct {
	name string
	run  func(a *agentConn)
}

// flowFailure stops a flow; runFlows reports it.
type flowFailure string

// maxFlows bounds the flows running at once on one stack: beyond a few, a slow
// DynamoDB Local only queues their requests (connects and replays come in a burst).
const maxFlows = 6

// runFlows runs each flow against its own agent of e, maxFlows at once, and waits
// for them. A failing flow stops there and fails the test with its name; the others
// run on. Flows never call t.Fatal (they are not the test goroutine): agentConn fails
// by panicking with a flowFailure, which runFlows recovers.
func runFlows(t *testing.T, e env, flows ...flow) {
	t.Helper()
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxFlows)
	for i, f := range flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			defer func() {
				switch r := recover().(type) {
				case nil:
				case flowFailure:
					t.Errorf("%s: %s", f.name, r)
				default:
					t.Errorf("%s: panic: %v\n%s", f.name, r, debug.Stack())
				}
			}()
			a := &agentConn{t: t, e: e, agent: fmt.Sprintf("flow%d", i)}
			a.open()
			f.run(a)
		}()
	}
	wg.Wait()
}

// event is one session event as a client received it.
type event struct {
	Seq     int64
	Type    string
	At      time.Time
	Payload json.RawMessage
	fields  map[string]json.RawMessage
	raw     string
}

func (e event) String() string { return e.raw }

func (e event) has(k string) bool { _, ok := e.fields[k]; return ok }

func (e event) str(k string) string {
	var s string
	_ = json.Unmarshal(e.fields[k], &s)
	return s
}

var atFormat = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)

// agentConn follows one agent's log over the socket. Every event must arrive exactly
// once, in seq order, with nothing between events but the frames a flow expects.
type agentConn struct {
	t            *testing.T
	e            env
	agent, token string
	c            *client
	next         int64          // seq of the next event
	seen         []event        // every event received, over all connections
	calls        []string       // ids of tool/call events still without a tool/result, in log order
	sent         map[string]int // frames sent, by body (handled waits for their handling)
}

func (a *agentConn) failf(format string, args ...any) {
	panic(flowFailure(fmt.Sprintf(format, args...)))
}

// fatalf fails the flow, listing the events received so far and those that follow
// within a second, so a failure shows the whole sequence.
func (a *agentConn) fatalf(format string, args ...any) {
	var b strings.Builder
	for _, ev := range a.seen {
		fmt.Fprintf(&b, "\n  %d %s %s %s", ev.Seq, ev.At.Format("15:04:05.000"), ev.Type, ev.Payload)
	}
	b.WriteString("\n  then:")
	for {
		f, err := a.c.next(time.Second)
		if err != nil {
			break
		}
		fmt.Fprintf(&b, "\n  %s", f)
	}
	a.failf("%s\nevents received:%s", fmt.Sprintf(format, args...), b.String())
}

// open creates the agent's token, connects, subscribes from 0 and reads
// session/created.
func (a *agentConn) open() {
	tok, err := a.e.tokens.Create(context.Background(), a.agent)
	if err != nil {
		a.failf("token: %v", err)
	}
	a.token = tok
	a.connect(0)
	if ev := a.read(); ev.Type != "session/created" || ev.Seq != 0 {
		a.failf("first event %s, want session/created at seq 0", ev)
	}
}

// connect opens a new connection, reads hello and subscribes from `from`.
func (a *agentConn) connect(from int64) {
	c, err := a.e.tryDial(a.agent, a.token)
	if err != nil {
		a.failf("dial: %v", err)
	}
	a.t.Cleanup(func() { c.c.CloseNow() })
	a.c = c
	h := a.frame(hang())
	if h.Type != "hello" || h.Seq != nil || h.Sess != a.agent || !strings.Contains(string(h.raw), `"proto":1`) {
		a.failf("first frame %s, want hello", h)
	}
	if h.Last < from-1 {
		a.failf("hello last_seq %d, but the client has seen seq %d", h.Last, from-1)
	}
	a.send(map[string]any{"type": "subscribe", "from_seq": from})
	a.next = from
}

// send writes one frame: a string as is, anything else as JSON.
func (a *agentConn) send(v any) {
	b, ok := v.(string)
	if !ok {
		raw, err := json.Marshal(v)
		if err != nil {
			a.failf("marshal %v: %v", v, err)
		}
		b = string(raw)
	}
	ctx, cancel := context.WithTimeout(a.c.ctx, hang())
	defer cancel()
	if err := a.c.c.Write(ctx, websocket.MessageText, []byte(b)); err != nil {
		a.failf("send %.80s: %v", b, err)
	}
	if a.sent == nil {
		a.sent = map[string]int{}
	}
	a.sent[b]++
}

func (a *agentConn) inject(text string, wake bool) {
	a.send(map[string]any{"type": "inject", "text": text, "wake": wake})
}

// frame reads the next frame of any kind.
func (a *agentConn) frame(d time.Duration) frame {
	f, err := a.c.next(d)
	if err != nil {
		a.failf("read frame (expecting seq %d): %v", a.next, err)
	}
	return f
}

// read reads the next event and checks its envelope.
func (a *agentConn) read() event {
	return a.event(a.frame(hang()))
}

func (a *agentConn) event(f frame) event {
	if f.Seq == nil {
		a.fatalf("protocol frame %s while expecting the event at seq %d", f, a.next)
	}
	var env struct {
		ID        string          `json:"id"`
		SessionID string          `json:"session_id"`
		Seq       int64           `json:"seq"`
		At        string          `json:"at"`
		Type      string          `json:"type"`
		Payload   json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(f.raw, &env); err != nil {
		a.failf("event %s: %v", f, err)
	}
	if env.Seq != a.next {
		a.fatalf("got seq %d, want %d (gap or duplicate): %s", env.Seq, a.next, f)
	}
	if env.ID == "" || env.SessionID != a.agent || env.Type == "" || !atFormat.MatchString(env.At) {
		a.failf("malformed envelope %s", f)
	}
	ev := event{Seq: env.Seq, Type: env.Type, Payload: env.Payload, raw: string(f.raw)}
	ev.At, _ = time.Parse(time.RFC3339Nano, env.At)
	if err := json.Unmarshal(env.Payload, &ev.fields); err != nil || ev.fields == nil {
		a.failf("payload of %s is not a JSON object", f)
	}
	a.next++
	a.seen = append(a.seen, ev)
	return ev
}

// expect reads one event of type typ.
func (a *agentConn) expect(typ string) event {
	ev := a.read()
	if ev.Type != typ {
		a.fatalf("got %s, want a %s event", ev, typ)
	}
	return ev
}

// startTurn reads the waking user/message carrying text and its turn/start, and
// returns the turn id.
func (a *agentConn) startTurn(text string) string {
	um := a.expect("user/message")
	if um.str("text") != text {
		a.fatalf("user/message %s, want text %q", um, text)
	}
	ts := a.expect("turn/start")
	id := ts.str("turn_id")
	if id == "" || um.str("turn_id") != id {
		a.fatalf("turn/start %s after user/message %s: want the same non-empty turn_id", ts, um)
	}
	return id
}

// want is one expected step of a turn, matched by follow.
type want struct {
	typ     string                                     // an event type, or "answer": one model answer's chunks
	name    string                                     // tool/call, approval/requested: the tool
	json    string                                     // tool/call, approval/requested: args; tool/result: result; policy/updated: patterns
	text    string                                     // answer, context/injected, session/titled: the text; tool/result: the error
	errPart string                                     // tool/result: an error containing this
	status  string                                     // turn/end
	reason  string                                     // turn/end, approval/resolved: "" means the payload has no reason
	verdict string                                     // approval/resolved
	chunks  int                                        // answer: exactly this many chunks; 0: at least two
	span    time.Duration                              // answer: at least this long from its first chunk to its last
	check   func(a *agentConn, result json.RawMessage) // tool/result: checks the result instead of json
}

func callW(name, args string) want         { return want{typ: "tool/call", name: name, json: args} }
func resultW(result string) want           { return want{typ: "tool/result", json: result} }
func errorW(text string) want              { return want{typ: "tool/result", text: text} }
func clockW() want                         { return want{typ: "tool/result", check: checkClock} }
func errorPartW(part string) want          { return want{typ: "tool/result", errPart: part} }
func injectedW(text string) want           { return want{typ: "context/injected", text: text} }
func answerW(text string, chunks int) want { return want{typ: "answer", text: text, chunks: chunks} }
func endW(status, reason string) want      { return want{typ: "turn/end", status: status, reason: reason} }
func titledW(title string) want            { return want{typ: "session/titled", text: title} }
func policyW(patterns string) want         { return want{typ: "policy/updated", json: patterns} }
func requestedW(name, args string) want {
	return want{typ: "approval/requested", name: name, json: args}
}
func resolvedW(verdict, reason string) want {
	return want{typ: "approval/resolved", verdict: verdict, reason: reason}
}

// follow reads events of turn turnID matching wants exactly, in order, and returns
// them (an answer as its final chunk). tool/result and approval events must name the
// oldest tool/call still without a result.
func (a *agentConn) follow(turnID string, wants ...want) []event {
	var out []event
	for _, w := range wants {
		if w.typ == "answer" {
			out = append(out, a.answer(w))
			continue
		}
		ev := a.expect(w.typ)
		out = append(out, ev)
		bad := func(format string, args ...any) { a.fatalf("%s: %s", ev, fmt.Sprintf(format, args...)) }
		oldest := func() string {
			if len(a.calls) == 0 {
				bad("no tool/call is waiting for a result")
			}
			return a.calls[0]
		}
		switch w.typ {
		case "tool/call":
			if ev.str("id") == "" || ev.str("name") != w.name || !jsonEqual(ev.fields["args"], w.json) {
				bad("want a call of %s with args %s and an id", w.name, w.json)
			}
			a.calls = append(a.calls, ev.str("id"))
		case "tool/result":
			if ev.str("call_id") != oldest() {
				bad("want call_id %s", a.calls[0])
			}
			a.calls = a.calls[1:]
			switch {
			case w.text != "":
				if ev.str("error") != w.text || ev.has("result") {
					bad("want error %q and no result", w.text)
				}
			case w.errPart != "":
				if !strings.Contains(ev.str("error"), w.errPart) || ev.has("result") {
					bad("want an error containing %q and no result", w.errPart)
				}
			case ev.has("error") || !ev.has("result"):
				bad("want a result and no error")
			case w.check != nil:
				w.check(a, ev.fields["result"])
			case !jsonEqual(ev.fields["result"], w.json):
				bad("want result %s", w.json)
			}
		case "context/injected":
			if ev.str("text") != w.text {
				bad("want text %q", w.text)
			}
		case "approval/requested":
			if ev.str("call_id") != oldest() || ev.str("name") != w.name || !jsonEqual(ev.fields["args"], w.json) {
				bad("want a request for call %s of %s with args %s", a.calls[0], w.name, w.json)
			}
		case "approval/resolved":
			if ev.str("call_id") != oldest() || ev.str("verdict") != w.verdict || ev.str("reason") != w.reason || (w.reason == "" && ev.has("reason")) {
				bad("want verdict %s on %s, reason %q", w.verdict, a.calls[0], w.reason)
			}
		case "policy/updated":
			if !jsonEqual(ev.fields["patterns"], w.json) {
				bad("want patterns %s", w.json)
			}
		case "session/titled":
			if ev.str("title") != w.text {
				bad("want title %q", w.text)
			}
		case "turn/end":
			if ev.str("turn_id") != turnID || ev.str("status") != w.status || ev.str("reason") != w.reason || (w.reason == "" && ev.has("reason")) {
				bad("want turn %s to end %s with reason %q", turnID, w.status, w.reason)
			}
			if len(a.calls) > 0 {
				bad("the turn ended with calls %v without a tool/result", a.calls)
			}
		default:
			a.failf("follow: unknown want %q", w.typ)
		}
	}
	return out
}

// answer reads one model answer: chunks with index 0, 1, …, the last one final and
// carrying usage, whose texts concatenate to w.text.
func (a *agentConn) answer(w want) event {
	var text strings.Builder
	var chunks []event
	for {
		ev := a.expect("assistant/chunk")
		var c struct {
			Text  string          `json:"text"`
			Index *int            `json:"index"`
			Final bool            `json:"final"`
			Usage json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal(ev.Payload, &c); err != nil || c.Index == nil || *c.Index != len(chunks) {
			a.fatalf("chunk %s: want index %d", ev, len(chunks))
		}
		text.WriteString(c.Text)
		chunks = append(chunks, ev)
		if c.Final {
			if len(c.Usage) == 0 {
				a.fatalf("final chunk %s carries no usage", ev)
			}
			break
		}
	}
	n := len(chunks)
	if text.String() != w.text {
		a.fatalf("answer %q, want %q", text.String(), w.text)
	}
	if (w.chunks > 0 && n != w.chunks) || (w.chunks == 0 && n < 2) {
		a.fatalf("answer %q in %d chunks, want %d (0: at least 2)", w.text, n, w.chunks)
	}
	if got := chunks[n-1].At.Sub(chunks[0].At); got < w.span {
		a.fatalf("answer streamed over %v, want at least %v", got, w.span)
	}
	return chunks[n-1]
}

// titled reads the session/titled that follows a session's first turn. The scripted
// titler is the scripted model: given a script as the first message, it runs the
// script's first step, so its title is a say step's text or, for a call step (no
// text), the message's first line.
func (a *agentConn) titled() {
	if ev := a.expect("session/titled"); ev.str("title") == "" {
		a.fatalf("session/titled %s has no title", ev)
	}
}

// maybeTitled accepts a session/titled, or nothing, once the flow's n runner
// invocations have returned.
func (a *agentConn) maybeTitled(n int) {
	a.ran(n)
	if a.tip() >= a.next {
		a.titled()
	}
}

// runWindow is how a flow acts while a run of tools is under way. Open it before the
// inject that starts the turn; wait for the run; act; release it. The runner is held at
// agent.PauseRun (its calls logged, the state read, no tool executed) until release,
// and act waits until its frame has taken effect, so the frame is seen at the boundary
// after the run whatever the machine's load, in process or emulated.
type runWindow struct {
	a   *agentConn
	run *hold
}

func (a *agentConn) window() *runWindow {
	return &runWindow{a: a, run: a.arm(agent.PauseRun)}
}

// wait returns once the turn's first run of tools is under way, every call of its
// batch logged.
func (w *runWindow) wait() { w.run.wait(w.a) }

// act sends frame and returns once the message function reached point (an
// agent.Pause* point of the frame's effect; "" waits for nothing).
func (w *runWindow) act(point string, frame any) {
	var h *hold
	if point != "" {
		h = w.a.arm(point)
	}
	w.a.send(frame)
	if h != nil {
		h.wait(w.a)
		h.release()
	}
}

func (w *runWindow) release() { w.run.release() }

// arm holds the next arrival of the flow's agent at point.
func (a *agentConn) arm(point string) *hold { return a.e.pause.arm(point, a.agent) }

// tip is the newest seq in the log, read from the store.
func (a *agentConn) tip() int64 {
	tip, err := a.e.log.Tip(context.Background(), a.agent)
	if err != nil {
		a.failf("tip: %v", err)
	}
	return tip
}

// refused sends frames (at once: the server serves a connection's frames
// concurrently) and asserts each is answered by an error frame with code, that
// nothing was appended, and that no event came meanwhile. The socket staying open is
// proven by whatever the flow does next.
func (a *agentConn) refused(code string, frames ...any) {
	before := a.tip()
	for _, f := range frames {
		a.send(f)
	}
	for range frames {
		f := a.frame(hang())
		if f.Type != "error" || f.Code != code || f.Seq != nil || f.Msg == "" {
			a.fatalf("answer to %v: %s, want an error frame with code %s", frames, f, code)
		}
	}
	if after := a.tip(); after != before {
		evs, _ := a.e.log.Read(context.Background(), a.agent, before+1, 10)
		a.failf("refused frames %v appended %d events: %v", frames, after-before, evs)
	}
}

// matchLog asserts the client received the whole log, byte for byte, and nothing else.
func (a *agentConn) matchLog() {
	evs, err := a.e.log.Read(context.Background(), a.agent, 0, 10000)
	if err != nil {
		a.failf("read log: %v", err)
	}
	if len(evs) != len(a.seen) {
		a.fatalf("the log holds %d events, the client received %d", len(evs), len(a.seen))
	}
	for i, ev := range evs {
		got := a.seen[i]
		if ev.Seq != got.Seq || ev.Type != got.Type || !bytes.Equal(ev.Payload, got.Payload) {
			a.failf("log event %d is %s %s, the client received %s", i, ev.Type, ev.Payload, got)
		}
	}
}

// count is how many received events have type typ.
func (a *agentConn) count(typ string) int {
	n := 0
	for _, ev := range a.seen {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// usage decodes turn/end's usage: model calls and tool calls.
func (a *agentConn) usage(end event) (modelCalls, toolCalls int64) {
	var u struct {
		ModelCalls *int64 `json:"model_calls"`
		ToolCalls  *int64 `json:"tool_calls"`
	}
	if err := json.Unmarshal(end.fields["usage"], &u); err != nil || u.ModelCalls == nil || u.ToolCalls == nil {
		a.failf("turn/end %s has no usage", end)
	}
	return *u.ModelCalls, *u.ToolCalls
}

func jsonEqual(got json.RawMessage, want string) bool {
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}

// checkClock checks the clock tool's result: the current UTC time.
func checkClock(a *agentConn, result json.RawMessage) {
	var r struct {
		UTC string `json:"utc"`
	}
	if err := json.Unmarshal(result, &r); err != nil || !strings.HasSuffix(r.UTC, "Z") {
		a.failf("clock result %s, want {\"utc\": a UTC time}", result)
	}
	at, err := time.Parse(time.RFC3339Nano, r.UTC)
	if err != nil || time.Since(at).Abs() > time.Minute {
		a.failf("clock result %s is not the current UTC time", result)
	}
}

// TestRuntimePlainTextWake: a plain-text waking inject starts a turn whose reply is
// the text, streamed as at least two chunks; the socket delivers exactly the log.
func TestRuntimePlainTextWake(t *testing.T) {
	t.Parallel()
	e := startRuntimeStack(t, devstack.Options{})
	runFlows(t, e, flow{"plain text", func(a *agentConn) {
		a.inject("hello there", true)
		id := a.startTurn("hello there")
		evs := a.follow(id, answerW("hello there", 0), endW("completed", ""), titledW("hello there"))
		if m, c := a.usage(evs[1]); m != 1 || c != 0 {
			a.failf("turn/end usage: %d model calls, %d tool calls; want 1, 0", m, c)
		}
		a.settled(1)
	}})
}

// TestRuntimeScriptSteps: each step of a dev-profile.md script behaves as written.
func TestRuntimeScriptSteps(t *testing.T) {
	t.Parallel()
	e := startRuntimeStack(t, devstack.Options{})
	tests := []struct {
		name   string
		script string
		want   []want
		usage  [2]int64 // when set: model calls and tool calls of the turn
		// mayBeUntitled: the scripted titler names the session after its first
		// message; given an empty text, there is nothing to title.
		mayBeUntitled bool
	}{
		{name: "say in one chunk", script: `{"script":[{"say":"one piece","chunks":1}]}`,
			want: []want{answerW("one piece", 1), endW("completed", "")}},
		{name: "say with the default two chunks", script: `{"script":[{"say":"two halves"}]}`,
			want: []want{answerW("two halves", 2), endW("completed", "")}},
		// Fewer runes than chunks: still exactly N chunk events.
		{name: "say in more chunks than runes", script: `{"script":[{"say":"ab","chunks":4}]}`,
			want: []want{answerW("ab", 4), endW("completed", "")}},
		// Chunk k is written when delta k+1 arrives and the last one at the end, so the
		// first and last chunks are at least (N-2)·delay apart.
		{name: "say in five chunks 60 ms apart", script: `{"script":[{"say":"abcdefghij","chunks":5,"delay_ms":60}]}`,
			want: []want{{typ: "answer", text: "abcdefghij", chunks: 5, span: 170 * time.Millisecond}, endW("completed", "")}},
		{name: "call a batch then say",
			script: `{"script":[{"call":[{"tool":"echo","args":{"text":"ping"}},{"tool":"clock","args":{}},{"tool":"sleep","args":{"ms":50}}]},{"say":"tools done"}]}`,
			want: []want{callW("echo", `{"text":"ping"}`), callW("clock", `{}`), callW("sleep", `{"ms":50}`),
				resultW(`{"text":"ping"}`), clockW(), resultW(`{"slept_ms":50}`),
				answerW("tools done", 2), endW("completed", "")},
			usage: [2]int64{2, 3}},
		{name: "each model call takes the next step",
			script: `{"script":[{"call":[{"tool":"echo","args":{"text":"a"}}]},{"call":[{"tool":"echo","args":{"text":"b"}}]},{"say":"third","chunks":3}]}`,
			want: []want{callW("echo", `{"text":"a"}`), resultW(`{"text":"a"}`), callW("echo", `{"text":"b"}`), resultW(`{"text":"b"}`),
				answerW("third", 3), endW("completed", "")},
			usage: [2]int64{3, 2}},
		{name: "fail", script: `{"script":[{"fail":"model exploded"}]}`,
			want: []want{endW("failed", "model exploded")}},
		{name: "fail after a call", script: `{"script":[{"call":[{"tool":"echo","args":{"text":"x"}}]},{"fail":"second call broke"}]}`,
			want: []want{callW("echo", `{"text":"x"}`), resultW(`{"text":"x"}`), endW("failed", "second call broke")}},
		// An addition to the dev profile (docs/lifecycle.md): the model declines.
		{name: "refuse", script: `{"script":[{"refuse":"not this one"}]}`,
			want: []want{answerW("not this one", 1), endW("rejected", "not this one")}},
		{name: "unknown tool", script: `{"script":[{"call":[{"tool":"nope","args":{}}]},{"say":"after"}]}`,
			want: []want{callW("nope", `{}`), errorW("unknown tool: nope"), answerW("after", 2), endW("completed", "")}},
		// A tool's own failure is its call's error result, not the turn's.
		{name: "a failing tool", script: `{"script":[{"call":[{"tool":"sleep","args":{"ms":-5}}]},{"say":"after"}]}`,
			want: []want{callW("sleep", `{"ms":-5}`), errorPartW("sleep wants"), answerW("after", 2), endW("completed", "")}},
		// Plain text (not a script): the reply is the text, split on rune boundaries.
		{name: "plain text of multibyte runes", script: "héllo ☃ wörld 😀",
			want: []want{answerW("héllo ☃ wörld 😀", 0), endW("completed", "")}},
		// An empty text is no reply, and no title.
		{name: "empty plain text", script: "",
			want: []want{endW("empty", "")}, mayBeUntitled: true},
		{name: "empty script", script: `{"script":[]}`,
			want: []want{endW("empty", "")}},
		{name: "script used up after a call", script: `{"script":[{"call":[{"tool":"echo","args":{"text":"last"}}]}]}`,
			want: []want{callW("echo", `{"text":"last"}`), resultW(`{"text":"last"}`), endW("empty", "")}},
	}
	var flows []flow
	for _, tc := range tests {
		flows = append(flows, flow{tc.name, func(a *agentConn) {
			a.inject(tc.script, true)
			id := a.startTurn(tc.script)
			evs := a.follow(id, tc.want...)
			if tc.usage != [2]int64{} {
				if m, c := a.usage(evs[len(evs)-1]); m != tc.usage[0] || c != tc.usage[1] {
					a.failf("turn/end usage: %d model calls, %d tool calls; want %d, %d", m, c, tc.usage[0], tc.usage[1])
				}
			}
			if tc.mayBeUntitled {
				a.maybeTitled(1)
			} else {
				a.titled()
			}
			a.settled(1)
			if n := a.count("turn/start"); n != 1 {
				a.failf("%d turns started, want 1", n)
			}
		}})
	}
	runFlows(t, e, flows...)
}

// TestRuntimeSteering: injects reach a running turn as context/injected, never as a
// second turn; a non-waking inject on an idle agent waits for the next turn.
func TestRuntimeSteering(t *testing.T) {
	t.Parallel()
	e := startRuntimeStack(t, devstack.Options{})
	steer := func(wake bool) func(a *agentConn) {
		return func(a *agentConn) {
			script := sleepThenSay("after the steer")
			w := a.window()
			a.inject(script, true)
			w.wait()
			w.act(agent.PauseQueued, map[string]any{"type": "inject", "text": "steer text", "wake": wake})
			w.release()
			id := a.startTurn(script)
			a.follow(id, callW("sleep", windowArgs), resultW(windowResult), injectedW("steer text"),
				answerW("after the steer", 2), endW("completed", ""))
			a.titled()
			// With wake, the runner the steer started found the agent busy and waited
			// for the holder's lease (up to a heartbeat, 5 s): it must start nothing.
			if wake {
				a.settled(2)
			} else {
				a.settled(1)
			}
			if n := a.count("turn/start"); n != 1 {
				a.failf("%d turns started, want 1", n)
			}
		}
	}
	runFlows(t, e,
		flow{"inject wake false while a turn runs", steer(false)},
		flow{"inject wake true while a turn runs", steer(true)},
		flow{"inject wake false on an idle agent", func(a *agentConn) {
			// Queued, with no runner invoked: once its handler has returned, nothing
			// is appended for it.
			a.inject("queued text", false)
			a.settled(0)
			a.inject("go", true)
			id := a.startTurn("go")
			// The newest user message is the injected context: the scripted reply is it.
			a.follow(id, injectedW("queued text"), answerW("queued text", 0), endW("completed", ""), titledW("go"))
			a.settled(1)
		}},
		flow{"inject while the final answer streams", func(a *agentConn) {
			// The steer lands while "abc" streams: the turn does not end after that
			// answer but takes another step for it. In process the runner is held
			// after the answer's first chunk until the steer is queued. (The first step
			// is a call so that the scripted titler, which runs it, does not sleep.)
			delay := 300 // over the chunker's flush age (200 ms): one chunk per delta
			script := fmt.Sprintf(`{"script":[{"call":[{"tool":"echo","args":{"text":"x"}}]},{"say":"abc","chunks":3,"delay_ms":%d},{"say":"again"}]}`, delay)
			chunk := a.arm(agent.PauseChunk)
			a.inject(script, true)
			// The first chunk is logged when the second delta arrives: the last one
			// comes a delay later, and no step boundary comes before it.
			chunk.wait(a)
			queued := a.arm(agent.PauseQueued)
			a.inject("late steer", false)
			queued.wait(a)
			queued.release()
			chunk.release()
			id := a.startTurn(script)
			a.follow(id, callW("echo", `{"text":"x"}`), resultW(`{"text":"x"}`), answerW("abc", 3),
				injectedW("late steer"), answerW("again", 2), endW("completed", ""))
			a.titled()
			a.settled(1) // the late steer does not wake
		}},
		flow{"two wakes at once: one turn, the other rides it", func(a *agentConn) {
			a.inject("wake one", true)
			a.inject("wake two", true)
			um := a.expect("user/message")
			first, other := um.str("text"), "wake two"
			switch first {
			case "wake one":
			case "wake two":
				other = "wake one"
			default:
				a.fatalf("user/message %s, want one of the two wakes", um)
			}
			a.expect("turn/start")
			// The other wake is drained at a step boundary as context/injected, before
			// or after the first answer; each answer is the newest text before it.
			newest, injected := first, 0
			var answer strings.Builder
			for done := false; !done; {
				ev := a.read()
				switch ev.Type {
				case "context/injected":
					if ev.str("text") != other || answer.Len() > 0 {
						a.fatalf("%s: want %q between answers", ev, other)
					}
					newest, injected = other, injected+1
				case "assistant/chunk":
					answer.WriteString(ev.str("text"))
					if string(ev.fields["final"]) == "true" {
						if answer.String() != newest {
							a.fatalf("answer %q, want %q", answer.String(), newest)
						}
						answer.Reset()
					}
				case "turn/end":
					if ev.str("status") != "completed" || newest != other || answer.Len() > 0 {
						a.fatalf("%s: want completed after answering %q", ev, other)
					}
					done = true
				default:
					a.fatalf("unexpected %s", ev)
				}
			}
			if injected != 1 {
				a.failf("the other wake was injected %d times, want 1", injected)
			}
			a.follow("", titledW(first))
			a.settled(2)
			if n := a.count("turn/start"); n != 1 {
				a.failf("%d turns started, want 1", n)
			}
		}},
		flow{"a wake resumes an open turn", func(a *agentConn) {
			// A runner died mid-turn: the log holds a turn/start with no turn/end and
			// a call without its result.
			for _, ev := range []struct {
				typ     string
				payload string
			}{
				{"user/message", `{"text":"before the crash","turn_id":"turn_dead"}`},
				{"turn/start", `{"turn_id":"turn_dead"}`},
				{"tool/call", `{"id":"call_owed","name":"echo","args":{"text":"owed"}}`},
			} {
				if _, err := a.e.log.Append(context.Background(), a.agent, ev.typ, json.RawMessage(ev.payload)); err != nil {
					a.failf("append %s: %v", ev.typ, err)
				}
			}
			id := a.startTurn("before the crash")
			a.follow(id, callW("echo", `{"text":"owed"}`))
			a.inject("after the crash", true)
			// No second turn/start: the owed call runs, then the wake text rides the
			// resumed turn's next step.
			a.follow(id, resultW(`{"text":"owed"}`), injectedW("after the crash"), answerW("after the crash", 0),
				endW("completed", ""), titledW("before the crash"))
			a.settled(1)
		}},
	)
}

// TestRuntimeCancel: cancel answers not_running without a turn, stops a running turn
// at the next step boundary with the frame's reason, and truncates a batch between
// runs — every call still gets its tool/result.
func TestRuntimeCancel(t *testing.T) {
	t.Parallel()
	e := startRuntimeStack(t, devstack.Options{})
	flows := []flow{{"no turn", func(a *agentConn) {
		a.refused("not_running", `{"type":"cancel","reason":"nothing to stop"}`, `{"type":"cancel"}`)
		// The socket stays open: a new subscribe replays, once: the next event after
		// session/created is the next turn's.
		a.send(`{"type":"subscribe","from_seq":0}`)
		a.next, a.seen = 0, nil
		a.expect("session/created")
		a.inject("after the replay", true)
		id := a.startTurn("after the replay")
		a.follow(id, answerW("after the replay", 0), endW("completed", ""), titledW("after the replay"))
		a.settled(1)
	}}}
	for _, tc := range []struct{ name, frame, reason string }{
		{"during a tool run", `{"type":"cancel","reason":"user pressed stop"}`, "user pressed stop"},
		{"during a tool run, no reason", `{"type":"cancel"}`, ""},
	} {
		flows = append(flows, flow{tc.name, func(a *agentConn) {
			script := sleepThenSay("never said")
			w := a.window()
			a.inject(script, true)
			w.wait()
			w.act(agent.PauseCancelRecorded, tc.frame)
			w.release()
			// A run is not interruptible: its result is logged, then the turn stops
			// before the next model call.
			id := a.startTurn(script)
			a.follow(id, callW("sleep", windowArgs), resultW(windowResult), endW("cancelled", tc.reason))
			a.titled()
			a.refused("not_running", `{"type":"cancel"}`)
			a.matchLog()
		}})
	}
	for _, tc := range []struct {
		name  string
		calls string // the rest of a batch that starts with a sleep of windowMS
		want  []want // its tool/call events, then the batch's tool/result events
	}{
		{"mid-batch: the serial calls after the run", `{"tool":"echo","args":{"text":"a"}},{"tool":"echo","args":{"text":"b"}}`,
			[]want{callW("echo", `{"text":"a"}`), callW("echo", `{"text":"b"}`),
				resultW(windowResult), errorW("cancelled before execution"), errorW("cancelled before execution")}},
		// clock runs in the sleep's parallel run: the cancel is observed after it.
		{"mid-batch: a parallel run completes", `{"tool":"clock","args":{}},{"tool":"echo","args":{"text":"a"}}`,
			[]want{callW("clock", `{}`), callW("echo", `{"text":"a"}`),
				resultW(windowResult), clockW(), errorW("cancelled before execution")}},
	} {
		flows = append(flows, flow{tc.name, func(a *agentConn) {
			script := `{"script":[{"call":[{"tool":"sleep","args":` + windowArgs + `},` + tc.calls + `]},{"say":"never said"}]}`
			w := a.window()
			a.inject(script, true)
			// All the batch's calls are logged before its first run.
			w.wait()
			w.act(agent.PauseCancelRecorded, `{"type":"cancel","reason":"halt"}`)
			w.release()
			id := a.startTurn(script)
			a.follow(id, append(append([]want{callW("sleep", windowArgs)}, tc.want...), endW("cancelled", "halt"))...)
			a.titled()
			a.matchLog()
		}})
	}
	runFlows(t, e, flows...)
}

// TestRuntimeApprovalsNotMounted: without the approvals row, approve and deny answer
// unsupported and append nothing, and guarded_echo runs without parking.
func TestRuntimeApprovalsNotMounted(t *testing.T) {
	t.Parallel()
	e := startRuntimeStack(t, devstack.Options{})
	runFlows(t, e, flow{"not mounted", func(a *agentConn) {
		a.refused("unsupported", `{"type":"approve","call_id":"call_123"}`, `{"type":"deny","call_id":"call_123","reason":"no"}`)
		script := `{"script":[{"call":[{"tool":"guarded_echo","args":{"text":"free"}}]},{"say":"unguarded"}]}`
		a.inject(script, true)
		id := a.startTurn(script)
		a.follow(id, callW("guarded_echo", `{"text":"free"}`), resultW(`{"text":"free"}`), answerW("unguarded", 2), endW("completed", ""))
		a.titled()
		a.refused("unsupported", `{"type":"approve","call_id":"call_123"}`)
		a.matchLog()
	}})
}

func approveFrame(id string) string { return fmt.Sprintf(`{"type":"approve","call_id":%q}`, id) }

// TestRuntimeApprovals: with the approvals row mounted a guarded call parks until a
// verdict; verdicts are validated against the log; cancel denies a parked call.
func TestRuntimeApprovals(t *testing.T) {
	t.Parallel()
	e := startRuntimeStack(t, devstack.Options{Approvals: true})
	runFlows(t, e,
		flow{"approve and deny", func(a *agentConn) {
			a.refused("stale_call", approveFrame("call_never")) // no turn at all
			script := `{"script":[{"call":[{"tool":"echo","args":{"text":"plain"}},{"tool":"guarded_echo","args":{"text":"first"}}]},{"call":[{"tool":"guarded_echo","args":{"text":"second"}}]},{"say":"all decided"}]}`
			a.inject(script, true)
			id := a.startTurn(script)
			evs := a.follow(id, callW("echo", `{"text":"plain"}`), callW("guarded_echo", `{"text":"first"}`),
				resultW(`{"text":"plain"}`), requestedW("guarded_echo", `{"text":"first"}`))
			plain, first := evs[0].str("id"), a.calls[0]
			// Parked: the runner has returned, and nothing runs without a verdict.
			a.ran(1)
			// A typo, and a call that never asked.
			a.refused("stale_call", approveFrame(first+"x"), `{"type":"deny","call_id":"call_typo"}`, approveFrame(plain))

			a.send(approveFrame(first))
			a.follow(id, resolvedW("approved", ""), resultW(`{"text":"first"}`),
				callW("guarded_echo", `{"text":"second"}`), requestedW("guarded_echo", `{"text":"second"}`))
			second := a.calls[0]
			// Already resolved, as approve and as deny.
			a.refused("stale_call", approveFrame(first), fmt.Sprintf(`{"type":"deny","call_id":%q,"reason":"late"}`, first))

			a.send(fmt.Sprintf(`{"type":"deny","call_id":%q,"reason":"not today"}`, second))
			a.follow(id, resolvedW("denied", "not today"), errorW("denied: not today"), answerW("all decided", 2), endW("completed", ""))
			a.titled()
			a.refused("stale_call", approveFrame(second), approveFrame(first)) // their turn has closed
			a.settled(3)                                                       // the wake's, the approval's, the denial's
		}},
		flow{"a wake while parked waits for the verdict", func(a *agentConn) {
			script := `{"script":[{"call":[{"tool":"guarded_echo","args":{"text":"held"}}]},{"say":"resumed"}]}`
			a.inject(script, true)
			id := a.startTurn(script)
			a.follow(id, callW("guarded_echo", `{"text":"held"}`), requestedW("guarded_echo", `{"text":"held"}`))
			a.ran(1)
			// The wake resumes the open turn, which still owes the parked call: it
			// parks again, with no second turn and no second request (the next event
			// must be the verdict's).
			a.inject("meanwhile", true)
			a.ran(2)
			a.send(approveFrame(a.calls[0]))
			a.follow(id, resolvedW("approved", ""), resultW(`{"text":"held"}`), injectedW("meanwhile"),
				answerW("resumed", 2), endW("completed", ""))
			a.titled()
			a.settled(3)
		}},
		flow{"cancel a parked turn", func(a *agentConn) {
			script := `{"script":[{"call":[{"tool":"guarded_echo","args":{"text":"one"}}]}]}`
			a.inject(script, true)
			id := a.startTurn(script)
			a.follow(id, callW("guarded_echo", `{"text":"one"}`), requestedW("guarded_echo", `{"text":"one"}`))
			old := a.calls[0]
			a.send(fmt.Sprintf(`{"type":"deny","call_id":%q}`, old))
			a.follow(id, resolvedW("denied", ""), errorW("denied"), endW("empty", ""))
			a.titled()

			// The batch's guarded call parks; the echo after it waits its turn.
			script = `{"script":[{"call":[{"tool":"guarded_echo","args":{"text":"two"}},{"tool":"echo","args":{"text":"three"}}]},{"say":"never said"}]}`
			a.inject(script, true)
			id = a.startTurn(script)
			a.follow(id, callW("guarded_echo", `{"text":"two"}`), callW("echo", `{"text":"three"}`), requestedW("guarded_echo", `{"text":"two"}`))
			parked := a.calls[0]
			// A decision never carries across a turn boundary.
			a.refused("stale_call", approveFrame(old))
			a.send(`{"type":"cancel","reason":"user gave up"}`)
			a.follow(id, resolvedW("denied", "user gave up"), errorW("denied: user gave up"), errorW("cancelled before execution"),
				endW("cancelled", "user gave up"))
			// The first wake's, the denial's, the second wake's, the cancel's.
			a.settled(4)
			a.refused("stale_call", approveFrame(parked))
			a.refused("not_running", `{"type":"cancel"}`)
			a.settled(4)
		}},
	)
}

// TestRuntimeSetPolicy: set_policy validates its patterns, appends policy/updated,
// and the newest policy decides the very next tool call.
func TestRuntimeSetPolicy(t *testing.T) {
	t.Parallel()
	e := startRuntimeStack(t, devstack.Options{})
	setPolicy := func(a *agentConn, patterns string) {
		a.send(`{"type":"set_policy","patterns":` + patterns + `}`)
		a.follow("", policyW(patterns))
	}
	runFlows(t, e,
		flow{"shapes and bounds", func(a *agentConn) {
			long := strings.Repeat("p", 256)
			many := make([]string, 129)
			for i := range many {
				many[i] = fmt.Sprintf("t%d", i)
			}
			a.refused("bad_frame",
				`{"type":"set_policy"}`,
				`{"type":"set_policy","patterns":null}`,
				`{"type":"set_policy","patterns":"echo"}`,
				`{"type":"set_policy","patterns":{"0":"echo"}}`,
				`{"type":"set_policy","patterns":[1]}`,
				`{"type":"set_policy","patterns":["echo",null]}`,
				`{"type":"set_policy","patterns":[["echo"]]}`,
				map[string]any{"type": "set_policy", "patterns": many},
				map[string]any{"type": "set_policy", "patterns": []string{"echo", long + "p"}},
			)
			// At both bounds a policy is accepted.
			bounds := make([]string, 128)
			for i := range bounds {
				bounds[i] = long[:255] + fmt.Sprint(i%10)
			}
			b, _ := json.Marshal(bounds)
			setPolicy(a, string(b))
			setPolicy(a, `["echo","clock"]`)
			a.settled(0) // a policy starts no turn
		}},
		flow{"a call outside the policy is not executed", func(a *agentConn) {
			setPolicy(a, `["echo","clock"]`)
			// sleep is outside: an error result at once, not after 20 s; clock, in the
			// same run, executes.
			script := `{"script":[{"call":[{"tool":"sleep","args":{"ms":20000}},{"tool":"clock","args":{}}]},{"say":"one"}]}`
			a.inject(script, true)
			id := a.startTurn(script)
			evs := a.follow(id, callW("sleep", `{"ms":20000}`), callW("clock", `{}`), errorW("not allowed by policy"), clockW(),
				answerW("one", 2), endW("completed", ""))
			if d := evs[2].At.Sub(evs[0].At); d > 15*time.Second {
				a.failf("the refused sleep's result came %v after its call: it ran", d)
			}
			a.titled()
			// An empty policy refuses everything from the next call on.
			setPolicy(a, `[]`)
			script = `{"script":[{"call":[{"tool":"echo","args":{"text":"no"}}]},{"say":"two"}]}`
			a.inject(script, true)
			id = a.startTurn(script)
			a.follow(id, callW("echo", `{"text":"no"}`), errorW("not allowed by policy"), answerW("two", 2), endW("completed", ""))
			a.settled(2)
		}},
		flow{"a policy set mid-turn decides the next call", func(a *agentConn) {
			// The turn starts under a policy without clock; while its sleep runs a new
			// policy allows clock, and the batch's clock call after the sleep runs.
			setPolicy(a, `["echo","s*"]`)
			script := `{"script":[{"call":[{"tool":"sleep","args":` + windowArgs + `},{"tool":"echo","args":{"text":"mid"}},{"tool":"clock","args":{}}]},{"say":"done"}]}`
			w := a.window()
			a.inject(script, true)
			w.wait()
			// The policy takes effect with its policy/updated, which the flow reads
			// before it lets the run go on.
			w.act("", `{"type":"set_policy","patterns":["echo","s*","clock"]}`)
			id := a.startTurn(script)
			a.follow(id, callW("sleep", windowArgs), callW("echo", `{"text":"mid"}`), callW("clock", `{}`),
				policyW(`["echo","s*","clock"]`))
			w.release()
			a.follow(id, resultW(windowResult), resultW(`{"text":"mid"}`), clockW(),
				answerW("done", 2), endW("completed", ""))
			a.titled()
			a.matchLog()
		}},
	)
}

// TestRuntimeSetModel: set_model accepts the scripted spec for a known role and
// refuses anything else with bad_frame, appending nothing.
func TestRuntimeSetModel(t *testing.T) {
	t.Parallel()
	e := startRuntimeStack(t, devstack.Options{})
	runFlows(t, e, flow{"set_model", func(a *agentConn) {
		a.refused("bad_frame",
			`{"type":"set_model","role":"main"}`,
			`{"type":"set_model","role":"main","spec":7}`,
			`{"type":"set_model","role":"main","spec":""}`,
			`{"type":"set_model","role":"main","spec":"noslash"}`,
			`{"type":"set_model","role":"main","spec":"/model"}`,
			`{"type":"set_model","role":"main","spec":"nope/"}`,
			`{"type":"set_model","role":"main","spec":"has space/x"}`,
			`{"type":"set_model","role":"main","spec":"nope/x"}`, // unknown provider
			`{"type":"set_model","spec":"scripted"}`,
			`{"type":"set_model","role":"","spec":"scripted"}`,
			`{"type":"set_model","role":"painter","spec":"scripted"}`, // unknown role
		)
		// Accepted: once their handlers have returned (an error frame would have been
		// posted by then) the next turn runs on the scripted model with no protocol
		// frame before or between its events.
		a.send(`{"type":"set_model","role":"main","spec":"scripted"}`)
		a.send(`{"type":"set_model","role":"titler","spec":"scripted"}`)
		a.settled(0)
		a.inject("still scripted", true)
		id := a.startTurn("still scripted")
		a.follow(id, answerW("still scripted", 0), endW("completed", ""), titledW("still scripted"))
		a.settled(1)
	}})
}

// TestRuntimeSetModelNotAllowed: over the socket, a set_model the profile's default
// allowed_models refuses — scripted for main where the profile names it for the titler
// only, a model of a configured provider the profile does not name — is answered
// bad_frame and changes nothing; one it allows is accepted.
func TestRuntimeSetModelNotAllowed(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "terret.json")
	prof := `{"providers": {"acme": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1"}},
	  "models": {"main": "acme/m", "titler": "scripted"}}`
	if err := os.WriteFile(file, []byte(prof), 0o600); err != nil {
		t.Fatal(err)
	}
	e := startRuntimeStack(t, devstack.Options{Profile: file})
	runFlows(t, e, flow{"set_model", func(a *agentConn) {
		a.refused("bad_frame",
			`{"type":"set_model","role":"main","spec":"scripted"}`,
			`{"type":"set_model","role":"main","spec":"acme/other"}`,
		)
		a.send(`{"type":"set_model","role":"titler","spec":"acme/m"}`)
		a.send(`{"type":"set_model","role":"titler","spec":"scripted"}`)
		a.settled(0)
	}})
}

// TestRuntimeLiveness: a dropped socket does not stop a turn; a new connection that
// subscribes from its last seq + 1 sees the rest, every event exactly once.
func TestRuntimeLiveness(t *testing.T) {
	t.Parallel()
	e := startRuntimeStack(t, devstack.Options{})
	runFlows(t, e, flow{"drop and resume", func(a *agentConn) {
		script := `{"script":[{"call":[{"tool":"sleep","args":` + windowArgs + `}]},{"say":"finished without you","chunks":3}]}`
		w := a.window()
		a.inject(script, true)
		id := a.startTurn(script)
		// Drop the socket while the sleep runs: the client has recorded up to turn/start
		// (a tool/call already on its way is lost with the socket, as a real drop
		// loses it).
		w.wait()
		last := a.next - 1
		a.c.c.CloseNow()
		evs, err := a.e.log.Read(context.Background(), a.agent, last+1, 100)
		if err != nil {
			a.failf("read log: %v", err)
		}
		for _, ev := range evs {
			if ev.Type == "turn/end" {
				a.failf("the turn ended before the socket was dropped: %v", evs)
			}
		}

		// The turn carries on with no socket: once its runner has returned, its end is
		// in the log.
		w.release()
		a.ran(1)
		evs, err = a.e.log.Read(context.Background(), a.agent, last+1, 100)
		if err != nil {
			a.failf("read log: %v", err)
		}
		if n := len(evs); n < 2 || evs[n-1].Type != "session/titled" || evs[n-2].Type != "turn/end" {
			a.failf("the runner returned with no socket; the log after seq %d is %v, want it to end with turn/end and session/titled", last, evs)
		}

		a.connect(last + 1)
		a.follow(id, callW("sleep", windowArgs), resultW(windowResult), answerW("finished without you", 3), endW("completed", ""))
		a.titled()
		if got, tip := a.next-1, a.tip(); got != tip {
			a.failf("received up to seq %d, the log's tip is %d", got, tip)
		}
		a.settled(1)
	}})
}
