package agent_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/model/openai"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// chatServer is an OpenAI-compatible chat-completions server: it streams every reply
// as server-sent events with a usage chunk (prompt tokens: the request body's bytes
// over four), answers the compactor's requests with a summary naming their number, and
// refuses a request whose body is longer than window bytes (0: none) with HTTP 400
// context_length_exceeded, as OpenAI does. refuseNext refuses the next main requests
// whatever their size. Like OpenAI it refuses (HTTP 400) a conversation whose tool
// messages and tool calls do not pair up (unpaired). toolCalls are the arguments of
// the echo calls the next main requests answer with, one each, before the text reply.
type chatServer struct {
	srv    *httptest.Server
	window int
	reply  string

	mu         sync.Mutex
	reqs       []chatRequest
	refuseNext int
	summaries  int
	toolCalls  []string
	billed     int64 // the tokens of every usage chunk sent (prompt plus completion)
}

type chatRequest struct {
	bytes     int
	compactor bool
	titler    bool
	refused   bool
	invalid   string // why the conversation was refused as malformed
	system    string
	messages  []chatMessage
}

type chatMessage struct {
	Role      string `json:"role"`
	Content   any    `json:"content"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
}

// unpaired is why a provider refuses the conversation, "" if it does not: a tool
// message answering no tool call of the assistant message before it, or a tool call
// that no tool message right after its assistant message answers.
func unpaired(msgs []chatMessage) string {
	open := map[string]bool{}
	for i, m := range msgs {
		if m.Role == "tool" {
			if !open[m.ToolCallID] {
				return fmt.Sprintf("messages[%d]: a tool message for %q answers no tool call before it", i, m.ToolCallID)
			}
			delete(open, m.ToolCallID)
			continue
		}
		if len(open) > 0 {
			return fmt.Sprintf("messages[%d]: tool calls %v have no tool message", i, open)
		}
		for _, c := range m.ToolCalls {
			open[c.ID] = true
		}
	}
	if len(open) > 0 {
		return fmt.Sprintf("tool calls %v have no tool message", open)
	}
	return ""
}

const compactorMarker = "You maintain the running summary"

func newChatServer(t *testing.T, window int, reply string) *chatServer {
	t.Helper()
	s := &chatServer{window: window, reply: reply}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *chatServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var in struct {
		Messages []chatMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	req := chatRequest{bytes: len(body), messages: in.Messages}
	if len(in.Messages) > 0 && in.Messages[0].Role == "system" {
		req.system, _ = in.Messages[0].Content.(string)
	}
	req.compactor = strings.HasPrefix(req.system, compactorMarker)
	req.titler = strings.HasPrefix(req.system, "Reply with a short title")
	req.invalid = unpaired(in.Messages)
	s.mu.Lock()
	refuse := s.window > 0 && len(body) > s.window
	if !req.compactor && s.refuseNext > 0 {
		s.refuseNext--
		refuse = true
	}
	req.refused = refuse
	text := s.reply
	if req.compactor && !refuse {
		s.summaries++
		text = fmt.Sprintf("summary %d of the conversation", s.summaries)
	}
	var call string
	if !req.compactor && !req.titler && !refuse && req.invalid == "" && len(s.toolCalls) > 0 {
		call, s.toolCalls = s.toolCalls[0], s.toolCalls[1:]
	}
	switch {
	case req.invalid != "" || refuse && call == "":
	case call != "":
		s.billed += int64(len(body)/4 + len(call)/4)
	default:
		s.billed += int64(len(body)/4 + len(text)/4)
	}
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	if req.invalid != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		msg, _ := json.Marshal("Invalid parameter: " + req.invalid)
		fmt.Fprintf(w, `{"error":{"message":%s,"type":"invalid_request_error","param":"messages","code":null}}`, msg)
		return
	}
	if call != "" {
		w.Header().Set("Content-Type", "text/event-stream")
		args, _ := json.Marshal(call)
		for _, c := range []string{
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_` + fmt.Sprint(len(s.requests())) + `","type":"function","function":{"name":"echo","arguments":` + string(args) + `}}]},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
			fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, len(body)/4, len(call)/4),
			`[DONE]`,
		} {
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
		return
	}
	if refuse {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, s.window/4, len(body)/4)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	content, _ := json.Marshal(text)
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":` + string(content) + `},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, len(body)/4, len(text)/4),
		`[DONE]`,
	} {
		fmt.Fprintf(w, "data: %s\n\n", c)
		w.(http.Flusher).Flush()
	}
}

func (s *chatServer) requests() []chatRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]chatRequest(nil), s.reqs...)
}

// tokens is what the server billed: the tokens of every usage chunk it sent.
func (s *chatServer) tokens() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.billed
}

func (s *chatServer) refuse(n int) {
	s.mu.Lock()
	s.refuseNext = n
	s.mu.Unlock()
}

// models is a registry serving the server as provider "acme".
func (s *chatServer) models(t *testing.T) *model.Registry {
	t.Helper()
	p, err := openai.NewProvider(http.DefaultClient, openai.Config{BaseURL: s.srv.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	reg := model.NewRegistry()
	if err := reg.Register("acme", p); err != nil {
		t.Fatal(err)
	}
	return reg
}

func withModel(reg *model.Registry) func(*agent.Config) {
	return func(c *agent.Config) { c.Models, c.MainModel = reg, "acme/chat-test" }
}

func compactions(evs []sessionlog.Event) []map[string]any {
	var out []map[string]any
	for _, ev := range ofType(evs, agent.TypeContextCompacted) {
		out = append(out, payload(ev))
	}
	return out
}

// TestCompactionBoundsTheModelRequest: with a model answering 2,000 characters a turn
// and a budget of 2,000 tokens, the request to the model stops growing: before it
// would pass the budget a context/compacted is logged (its summary from the compactor's
// request, which carries the previous summary and the next slice), and the next model
// request carries the system prompt, that summary and only the events after its
// through_seq. The log keeps every event.
func TestCompactionBoundsTheModelRequest(t *testing.T) {
	t.Parallel()
	srv := newChatServer(t, 0, strings.Repeat("x", 2000))
	a := newAged(t, testTables(t), 0, agedProfile(2000), withModel(srv.models(t)))
	var maxMain int
	var all []sessionlog.Event
	for i := range 12 {
		evs := a.turn(fmt.Sprintf("question %d", i))
		all = append(all, evs...)
		if te := lastTurnEndOf(t, evs); te["status"] != agent.StatusCompleted {
			t.Fatalf("turn %d: %v\n%s", i, te, dump(evs))
		}
	}
	cs := compactions(all)
	if len(cs) < 2 {
		t.Fatalf("%d compactions in 12 turns of 2,000 characters on a 2,000-token budget, want at least 2", len(cs))
	}
	var mains, compactors int
	var prevSummary string
	for _, r := range srv.requests() {
		if r.compactor {
			compactors++
			user, _ := r.messages[1].Content.(string)
			if prevSummary != "" && !strings.Contains(user, prevSummary) {
				t.Fatalf("compactor request %d lacks the previous summary %q:\n%.300s", compactors, prevSummary, user)
			}
			prevSummary = fmt.Sprintf("summary %d of the conversation", compactors)
			if r.bytes > 4*2000+4096 {
				t.Fatalf("compactor request of %d bytes on a 2,000-token budget", r.bytes)
			}
			continue
		}
		mains++
		maxMain = max(maxMain, r.bytes)
	}
	if compactors != len(cs) {
		t.Fatalf("%d compactor requests, %d context/compacted", compactors, len(cs))
	}
	// 2,000 tokens of history, plus the system prompt, the tools and the summary (at
	// most 2,000 bytes), in JSON.
	if maxMain > 2000*4+6000 {
		t.Fatalf("largest model request %d bytes, over the budget", maxMain)
	}
	// The last request: system prompt with the newest summary, then only the events
	// after its through_seq — the oldest question it carries is after it.
	last := srv.requests()[len(srv.requests())-1]
	newest := cs[len(cs)-1]
	if !strings.Contains(last.system, newest["summary"].(string)) || !strings.Contains(last.system, tools0System) {
		t.Fatalf("last request's system prompt %q lacks the system prompt or summary %q", last.system, newest["summary"])
	}
	through := int64(newest["through_seq"].(float64))
	full := a.since(0)
	for _, ev := range full {
		if ev.Type != agent.TypeUserMessage {
			continue
		}
		text := str(ev, "text")
		sent := false
		for _, m := range last.messages {
			if c, _ := m.Content.(string); c == text {
				sent = true
			}
		}
		if sent != (ev.Seq > through) {
			t.Fatalf("user message at seq %d (through_seq %d) sent: %v", ev.Seq, through, sent)
		}
	}
	if got := count(full, agent.TypeUserMessage); got != 12 {
		t.Fatalf("log holds %d user messages, want all 12", got)
	}
	// The compactor's calls are metered in the turns' usage.
	u, err := a.svc.Usage(a.ctx, a.id)
	if err != nil {
		t.Fatal(err)
	}
	if u.ModelCalls != int64(mains+compactors) {
		t.Fatalf("usage counts %d model calls, the server got %d main and %d compactor requests", u.ModelCalls, mains, compactors)
	}
}

const tools0System = "You are a helpful agent."

// TestCompactionIncrementalOverALongLog: an agent from before compaction with a
// history many budgets long is compacted a slice at a time, each compactor request
// carrying the previous summary and fitting the budget, and its turn completes.
func TestCompactionIncrementalOverALongLog(t *testing.T) {
	t.Parallel()
	srv := newChatServer(t, 0, "fine")
	a := newAged(t, testTables(t), 3000, agedProfile(1000), withModel(srv.models(t)))
	evs := a.turn("and now?")
	if te := lastTurnEndOf(t, evs); te["status"] != agent.StatusCompleted {
		t.Fatalf("turn: %v\n%s", te, dump(evs))
	}
	var compactors int
	for _, r := range srv.requests() {
		if !r.compactor {
			if r.bytes > 1000*4+6000 {
				t.Fatalf("model request of %d bytes on a 1,000-token budget", r.bytes)
			}
			continue
		}
		compactors++
		user, _ := r.messages[1].Content.(string)
		if compactors > 1 && !strings.Contains(user, fmt.Sprintf("summary %d of the conversation", compactors-1)) {
			t.Fatalf("compactor request %d does not carry summary %d", compactors, compactors-1)
		}
		if r.bytes > 1000*4+4096 {
			t.Fatalf("compactor request %d of %d bytes on a 1,000-token budget", compactors, r.bytes)
		}
	}
	if compactors < 10 {
		t.Fatalf("%d compactor requests for a history of ~30 budgets", compactors)
	}
	cs := compactions(evs)
	if len(cs) != 1 || !strings.Contains(cs[0]["summary"].(string), fmt.Sprintf("summary %d", compactors)) || cs[0]["from_seq"].(float64) != 0 {
		t.Fatalf("compactions %v after %d compactor requests", cs, compactors)
	}
}

// TestContextLengthRefusalRecoveredOnce: with no budget set, a provider refusing the
// step as too long (HTTP 400 context_length_exceeded) makes the runner compact and
// retry the step once, and the turn completes; refused again after the compaction,
// the turn fails with a reason naming it.
func TestContextLengthRefusalRecoveredOnce(t *testing.T) {
	t.Parallel()
	srv := newChatServer(t, 0, strings.Repeat("y", 2000))
	a := newAged(t, testTables(t), 0, agedProfile(0), withModel(srv.models(t)))
	for i := range 4 {
		a.turn(fmt.Sprintf("warm %d", i))
	}
	srv.refuse(1)
	evs := a.turn("refused once")
	if te := lastTurnEndOf(t, evs); te["status"] != agent.StatusCompleted || chunkText(evs) != strings.Repeat("y", 2000) {
		t.Fatalf("turn after one refusal: %v\n%s", te, dump(evs))
	}
	if cs := compactions(evs); len(cs) != 1 {
		t.Fatalf("%d compactions after a refusal, want 1:\n%s", len(cs), dump(evs))
	}
	reqs := srv.requests()
	refused := -1
	for i, r := range reqs {
		if r.refused {
			refused = i
		}
	}
	if refused < 0 || refused+2 >= len(reqs)+1 || !reqs[refused+1].compactor || reqs[len(reqs)-1].compactor || reqs[len(reqs)-1].refused ||
		reqs[len(reqs)-1].bytes*2 > reqs[refused].bytes+4096 {
		for i, r := range reqs {
			t.Logf("request %d: %d bytes, compactor %v, refused %v", i, r.bytes, r.compactor, r.refused)
		}
		t.Fatalf("requests after the refusal: refused, compactor, a retry of about half the size expected")
	}
	srv.refuse(2)
	evs = a.turn("refused twice")
	te := lastTurnEndOf(t, evs)
	if te["status"] != agent.StatusFailed || !strings.Contains(te["reason"].(string), "refused as too long again after compaction") ||
		!strings.Contains(te["reason"].(string), "maximum context length") {
		t.Fatalf("turn after two refusals: %v\n%s", te, dump(evs))
	}
	// A window of ~30 KB: every turn fits after compaction, none fails.
	srv2 := newChatServer(t, 30_000, strings.Repeat("z", 2000))
	b := newAged(t, testTables(t), 0, agedProfile(0), withModel(srv2.models(t)))
	for i := range 24 {
		evs := b.turn(fmt.Sprintf("long-lived %d", i))
		if te := lastTurnEndOf(t, evs); te["status"] != agent.StatusCompleted {
			t.Fatalf("turn %d with a 30 KB window: %v", i, te)
		}
	}
}

// logBuilder builds events from seq 1 on, as a runner from before checkpoints logged
// them (writeEvents writes them).
type logBuilder struct {
	id  string
	evs []sessionlog.Event
}

func (b *logBuilder) add(typ string, p any) int64 {
	raw, _ := json.Marshal(p)
	seq := int64(len(b.evs) + 1)
	b.evs = append(b.evs, sessionlog.Event{ID: fmt.Sprintf("ev_built_%d", seq), SessionID: b.id, Seq: seq,
		At: time.Now().UTC().Format(sessionlog.TimeFormat), Type: typ, Payload: raw})
	return seq
}

// turn adds a completed turn: the user's text, tool calls with their results (args
// and result {"text": …} each), the answer.
func (b *logBuilder) turn(n int, text string, calls [][2]string, answer string) (callSeqs, resultSeqs []int64) {
	id := fmt.Sprintf("turn_built_%d", n)
	b.add(agent.TypeUserMessage, map[string]any{"text": text, "turn_id": id})
	b.add(agent.TypeTurnStart, map[string]any{"turn_id": id})
	for i, c := range calls {
		cid := fmt.Sprintf("call_built_%d_%d", n, i)
		callSeqs = append(callSeqs, b.add(agent.TypeToolCall, map[string]any{"id": cid, "name": "echo", "args": map[string]string{"text": c[0]}}))
		resultSeqs = append(resultSeqs, b.add(agent.TypeToolResult, map[string]any{"call_id": cid, "result": map[string]string{"text": c[1]}}))
	}
	b.add(agent.TypeAssistantChunk, map[string]any{"text": answer, "index": 0, "final": true})
	b.add(agent.TypeTurnEnd, map[string]any{"turn_id": id, "status": agent.StatusCompleted})
	return callSeqs, resultSeqs
}

// mains are the requests for the main model (neither the compactor's nor the titler's).
func mains(reqs []chatRequest) []chatRequest {
	var out []chatRequest
	for _, r := range reqs {
		if !r.compactor && !r.titler {
			out = append(out, r)
		}
	}
	return out
}

func roles(r chatRequest) []string {
	var out []string
	for _, m := range r.messages {
		out = append(out, m.Role)
	}
	return out
}

// TestCompactionNeverSeparatesAToolCallFromItsResult: the history's cut would fall
// right after a tool/call — the events after it fit the tail (half the budget), the
// events after the one before it do not — so the compaction cuts after its tool/result
// instead: context/compacted's through_seq is the result's, the summary request
// carries the call and its result together, and the model request after it carries
// neither (a tool message without its call is what providers refuse; the test's server
// refuses it too).
func TestCompactionNeverSeparatesAToolCallFromItsResult(t *testing.T) {
	t.Parallel()
	names := testTables(t)
	srv := newChatServer(t, 0, "fine")
	a := newAged(t, names, 0, agedProfile(2000), withModel(srv.models(t)))
	b := &logBuilder{id: a.id}
	b.add(agent.TypePolicyUpdated, map[string]any{"patterns": []string{"echo"}})
	b.add(agent.TypeSessionTitled, map[string]any{"title": "built"})
	old := strings.Repeat("o", 2400)
	b.turn(1, "the old question", [][2]string{{old, old}}, "the old answer")
	// About 310 tokens of call, 760 of result: with the ~30 tokens after it the result
	// fits the tail of 1,000 tokens, the call with it does not.
	args, result := strings.Repeat("a", 1200), strings.Repeat("r", 3000)
	calls, results := b.turn(2, "the second question", [][2]string{{args, result}}, "the second answer")
	writeEvents(t, dynamotest.Client(t), names["LogTable"], b.evs)

	evs := a.turn("and now?")
	if te := lastTurnEndOf(t, evs); te["status"] != agent.StatusCompleted {
		t.Fatalf("turn: %v\n%s", te, dump(evs))
	}
	cs := compactions(evs)
	if len(cs) != 1 {
		t.Fatalf("%d compactions, want 1:\n%s", len(cs), dump(evs))
	}
	if through := int64(cs[0]["through_seq"].(float64)); through != results[0] {
		t.Fatalf("through_seq %d; the tool/call is at %d, its tool/result at %d: want the result's", through, calls[0], results[0])
	}
	var summarised bool
	for i, r := range srv.requests() {
		if r.invalid != "" {
			t.Fatalf("request %d refused: %s", i, r.invalid)
		}
		if !r.compactor {
			continue
		}
		user, _ := r.messages[1].Content.(string)
		hasCall, hasResult := strings.Contains(user, strings.Repeat("a", 100)), strings.Contains(user, strings.Repeat("r", 100))
		if hasCall != hasResult {
			t.Fatalf("summary request %d carries the call %v, its result %v:\n%.400s", i, hasCall, hasResult, user)
		}
		summarised = summarised || hasCall
	}
	if !summarised {
		t.Fatal("no summary request carried the call and its result")
	}
	ms := mains(srv.requests())
	last := ms[len(ms)-1]
	if got := roles(last); strings.Join(got, " ") != "system assistant user" {
		t.Fatalf("the model request after the compaction has %v, want the system prompt, the second answer and the question", got)
	}
	if !strings.Contains(last.system, cs[0]["summary"].(string)) || last.messages[1].Content != "the second answer" || last.messages[2].Content != "and now?" {
		t.Fatalf("the model request after the compaction: %+v", last.messages)
	}
	if got := a.since(calls[0]); len(got) < 2 || got[0].Type != agent.TypeToolCall || got[1].Type != agent.TypeToolResult {
		t.Fatalf("the log lost the call or its result:\n%s", dump(got))
	}
}

// TestCompactionKeepsTheOpenStep: the open turn's current step — the model's tool call
// and its result, together over half the budget — is never compacted away. The step
// after it needs a compaction; the summary covers everything before the call (the
// waking message too: the turn is longer than half the budget), and the model request
// after it carries the call and the result in full, so the model sees what it asked
// for.
func TestCompactionKeepsTheOpenStep(t *testing.T) {
	t.Parallel()
	names := testTables(t)
	srv := newChatServer(t, 0, "done")
	long := strings.Repeat("w", 2400)
	srv.toolCalls = []string{`{"text":"` + long + `"}`}
	a := newAged(t, names, 0, agedProfile(2000), withModel(srv.models(t)))
	b := &logBuilder{id: a.id}
	b.add(agent.TypePolicyUpdated, map[string]any{"patterns": []string{"echo"}})
	b.add(agent.TypeSessionTitled, map[string]any{"title": "built"})
	for i := range 3 {
		b.turn(i, fmt.Sprintf("old question %d", i), nil, strings.Repeat(string(rune('k'+i)), 1200))
	}
	writeEvents(t, dynamotest.Client(t), names["LogTable"], b.evs)

	evs := a.turn("echo a long text")
	if te := lastTurnEndOf(t, evs); te["status"] != agent.StatusCompleted || chunkText(evs) != "done" {
		t.Fatalf("turn: %v\n%s", te, dump(evs))
	}
	calls, results := ofType(evs, agent.TypeToolCall), ofType(evs, agent.TypeToolResult)
	cs := compactions(evs)
	if len(calls) != 1 || len(results) != 1 || len(cs) != 1 {
		t.Fatalf("%d calls, %d results, %d compactions; want one each:\n%s", len(calls), len(results), len(cs), dump(evs))
	}
	// The compaction came between the step's result and the next model call, and cut
	// right before the step.
	if c := ofType(evs, agent.TypeContextCompacted)[0]; c.Seq < results[0].Seq {
		t.Fatalf("context/compacted at %d, before the tool/result at %d", c.Seq, results[0].Seq)
	}
	if through := int64(cs[0]["through_seq"].(float64)); through != calls[0].Seq-1 {
		t.Fatalf("through_seq %d, want %d: right before the step's tool/call", through, calls[0].Seq-1)
	}
	var summaries []string
	for i, r := range srv.requests() {
		if r.invalid != "" {
			t.Fatalf("request %d refused: %s", i, r.invalid)
		}
		if r.compactor {
			user, _ := r.messages[1].Content.(string)
			summaries = append(summaries, user)
		}
	}
	all := strings.Join(summaries, "\n")
	if len(summaries) == 0 || strings.Contains(all, strings.Repeat("w", 100)) || !strings.Contains(all, "old question 0") || !strings.Contains(all, "echo a long text") {
		t.Fatalf("summary requests: want the old turns and the waking message, not the step:\n%.600s", all)
	}
	ms := mains(srv.requests())
	last := ms[len(ms)-1]
	if got := strings.Join(roles(last), " "); got != "system assistant tool" {
		t.Fatalf("the model request after the compaction has %s, want the system prompt, the call and its result", got)
	}
	if c := last.messages[1].ToolCalls; len(c) != 1 || !strings.Contains(c[0].Function.Arguments, long) {
		t.Fatalf("the request after the compaction lacks the step's call: %+v", last.messages[1])
	}
	if r, _ := last.messages[2].Content.(string); !strings.Contains(r, long) {
		t.Fatalf("the request after the compaction lacks the step's result: %.200v", last.messages[2].Content)
	}
}
