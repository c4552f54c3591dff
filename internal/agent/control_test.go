package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
)

func TestCancelNotRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{})
	if err := e.svc.Cancel(e.ctx, e.agentID, "x"); !errors.Is(err, agent.ErrNotRunning) {
		t.Errorf("cancel on a fresh agent: %v", err)
	}
	e.inject("hi", true)
	e.waitTurnEnds(1)
	e.settle()
	if err := e.svc.Cancel(e.ctx, e.agentID, "x"); !errors.Is(err, agent.ErrNotRunning) {
		t.Errorf("cancel after the turn ended: %v", err)
	}
	e.noErrors()
}

func TestCancelRacingToolResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{})
	e.inject(script(`{"call":[{"tool":"sleep","args":{"ms":600}}]}`, `{"say":"never"}`), true)
	e.waitFor("tool/call", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeToolCall) == 1 })
	if err := e.svc.Cancel(e.ctx, e.agentID, "enough"); err != nil {
		t.Fatal(err)
	}
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	res := ofType(evs, agent.TypeToolResult)
	if len(res) != 1 || string(mustJSON(payload(res[0])["result"])) != `{"slept_ms":600}` {
		t.Errorf("the tool result wins the race to the log:\n%s", dump(evs))
	}
	end := lastTurnEnd(t, evs)
	if end["status"] != agent.StatusCancelled || end["reason"] != "enough" || count(evs, agent.TypeAssistantChunk) != 0 {
		t.Errorf("the cancel wins the turn: %v\n%s", end, dump(evs))
	}
	if indexOf(evs, agent.TypeToolResult, nil) > indexOf(evs, agent.TypeTurnEnd, nil) {
		t.Errorf("tool/result must precede turn/end")
	}
}

// meeting is a parallel test tool: each call waits until `want` calls are running at
// once — so the calls can only succeed if they really run concurrently — and then
// until the test releases them.
type meeting struct {
	want    int
	mu      sync.Mutex
	in      int
	all     chan struct{}
	release chan struct{}
	ran     atomic.Int64
}

func (m *meeting) Definition() tools.Definition {
	return tools.Definition{Name: "meet", Concurrency: tools.Parallel}
}

func (m *meeting) Call(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
	m.ran.Add(1)
	m.mu.Lock()
	if m.in++; m.in == m.want {
		close(m.all)
	}
	m.mu.Unlock()
	select {
	case <-m.all:
	case <-time.After(hang()):
		return nil, errors.New("the calls of a parallel run did not run concurrently")
	}
	select {
	case <-m.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return json.RawMessage(fmt.Sprintf(`{"met":%d}`, m.want)), nil
}

func TestCancelDuringParallelRun(t *testing.T) {
	t.Parallel()
	m := &meeting{want: 2, all: make(chan struct{}), release: make(chan struct{})}
	kinds := tools.NewRegistry()
	if err := kinds.RegisterKind("test", func(tools.ToolConfig) (tools.Tool, error) { return m, nil }); err != nil {
		t.Fatal(err)
	}
	profile := tools.Profile{Tools: []tools.ToolConfig{{Name: "echo"}, {Name: "sleep"}, {Name: "meet", Kind: "test"}}}
	e := newEnv(t, opts{tools: kinds, profile: &profile})
	e.inject(script(`{"call":[{"tool":"meet"},{"tool":"meet"},{"tool":"echo","args":{"text":"never"}},{"tool":"sleep","args":{"ms":10}}]}`, `{"say":"never"}`), true)
	waitChan(t, m.all, "both parallel calls to run")
	if err := e.svc.Cancel(e.ctx, e.agentID, "stop now"); err != nil {
		t.Fatal(err)
	}
	close(m.release)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	calls := ofType(evs, agent.TypeToolCall)
	if len(calls) != 4 || count(evs, agent.TypeToolResult) != 4 {
		t.Fatalf("every call logs its tool/call and a tool/result:\n%s", dump(evs))
	}
	for i, c := range calls {
		res := evs[indexOf(evs, agent.TypeToolResult, map[string]any{"call_id": str(c, "id")})]
		switch i {
		case 0, 1:
			if string(mustJSON(payload(res)["result"])) != `{"met":2}` {
				t.Errorf("parallel call %d: %s", i, res.Payload)
			}
		default:
			if str(res, "error") != agent.ErrTextCancelled {
				t.Errorf("call %d after the run: %s, want %q", i, res.Payload, agent.ErrTextCancelled)
			}
		}
	}
	if m.ran.Load() != 2 {
		t.Errorf("meet ran %d times", m.ran.Load())
	}
	end := lastTurnEnd(t, evs)
	if end["status"] != agent.StatusCancelled || end["reason"] != "stop now" || count(evs, agent.TypeAssistantChunk) != 0 {
		t.Errorf("turn/end %v\n%s", end, dump(evs))
	}
}

func TestApproveAndDeny(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{approvals: true})
	e.inject(script(`{"call":[{"tool":"guarded_echo","args":{"text":"g1"}}]}`, `{"call":[{"tool":"guarded_echo","args":{"text":"g2"}}]}`, `{"say":"fin"}`), true)
	evs := e.waitFor("approval/requested", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeApprovalRequested) == 1 })
	e.settle()
	if owner := leaseOwner(t, e); owner != "" {
		t.Errorf("a parked turn holds no runner: lease owner %q", owner)
	}
	req := payload(ofType(evs, agent.TypeApprovalRequested)[0])
	call := ofType(evs, agent.TypeToolCall)[0]
	if req["call_id"] != str(call, "id") || req["name"] != "guarded_echo" || string(mustJSON(req["args"])) != `{"text":"g1"}` {
		t.Errorf("approval/requested %v", req)
	}
	if count(e.events(), agent.TypeToolResult) != 0 {
		t.Fatalf("the parked call ran")
	}

	e.restart(nil) // the verdict lands on a new process: nothing waits in memory
	tip := e.tip()
	for _, id := range []string{"typo", ""} {
		if err := e.svc.Approve(e.ctx, e.agentID, id); !errors.Is(err, agent.ErrStaleCall) {
			t.Errorf("approve %q: %v", id, err)
		}
	}
	if err := e.svc.Approve(e.ctx, e.agentID, str(call, "id")); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Approve(e.ctx, e.agentID, str(call, "id")); !errors.Is(err, agent.ErrStaleCall) {
		t.Errorf("second approve: %v", err)
	}
	if err := e.svc.Deny(e.ctx, e.agentID, str(call, "id"), "late"); !errors.Is(err, agent.ErrStaleCall) {
		t.Errorf("deny after approve: %v", err)
	}
	evs = e.waitFor("second request", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeApprovalRequested) == 2 })
	if count(evs[:tip+3], agent.TypeApprovalResolved) != 1 {
		t.Errorf("stale verdicts appended something:\n%s", dump(evs))
	}
	call2 := ofType(evs, agent.TypeToolCall)[1]
	if err := e.svc.Deny(e.ctx, e.agentID, str(call2, "id"), "not this one"); err != nil {
		t.Fatal(err)
	}
	evs = e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	resolved := ofType(evs, agent.TypeApprovalResolved)
	if len(resolved) != 2 || str(resolved[0], "verdict") != agent.VerdictApproved || payload(resolved[0])["reason"] != nil ||
		str(resolved[1], "verdict") != agent.VerdictDenied || str(resolved[1], "reason") != "not this one" {
		t.Errorf("verdicts:\n%s", dump(resolved))
	}
	r1 := evs[indexOf(evs, agent.TypeToolResult, map[string]any{"call_id": str(call, "id")})]
	r2 := evs[indexOf(evs, agent.TypeToolResult, map[string]any{"call_id": str(call2, "id")})]
	if string(mustJSON(payload(r1)["result"])) != `{"text":"g1"}` || str(r2, "error") != "denied: not this one" {
		t.Errorf("results %s / %s", r1.Payload, r2.Payload)
	}
	if lastTurnEnd(t, evs)["status"] != agent.StatusCompleted || chunkText(evs) != "fin" {
		t.Errorf("turn\n%s", dump(evs))
	}
	tip = e.tip()
	if err := e.svc.Approve(e.ctx, e.agentID, str(call2, "id")); !errors.Is(err, agent.ErrStaleCall) {
		t.Errorf("approve in a closed turn: %v", err)
	}
	if e.tip() != tip {
		t.Errorf("a stale verdict appended")
	}
}

func TestApprovalsNotMounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{})
	if err := e.svc.Approve(e.ctx, e.agentID, "x"); !errors.Is(err, agent.ErrUnsupported) {
		t.Errorf("approve: %v", err)
	}
	if err := e.svc.Deny(e.ctx, e.agentID, "x", "r"); !errors.Is(err, agent.ErrUnsupported) {
		t.Errorf("deny: %v", err)
	}
	e.inject(script(`{"call":[{"tool":"guarded_echo","args":{"text":"free"}}]}`, `{"say":"ok"}`), true)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	if count(evs, agent.TypeApprovalRequested) != 0 || string(mustJSON(payload(ofType(evs, agent.TypeToolResult)[0])["result"])) != `{"text":"free"}` {
		t.Errorf("without the approvals row nothing parks:\n%s", dump(evs))
	}
}

// parked starts a turn whose first call waits for a verdict and returns its call id.
func parked(t *testing.T, e *env) string {
	t.Helper()
	e.inject(script(`{"call":[{"tool":"guarded_echo","args":{"text":"g"}}]}`, `{"say":"after"}`), true)
	evs := e.waitFor("approval/requested", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeApprovalRequested) == 1 })
	return str(ofType(evs, agent.TypeApprovalRequested)[0], "call_id")
}

func TestRacingVerdictsOneWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{approvals: true})
	id := parked(t, e)
	e.settle()
	var wins atomic.Int64
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i%2 == 0 {
				err = e.svc.Approve(e.ctx, e.agentID, id)
			} else {
				err = e.svc.Deny(e.ctx, e.agentID, id, "racing")
			}
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, agent.ErrStaleCall):
				t.Errorf("verdict: %v", err)
			}
		}()
	}
	wg.Wait()
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	if wins.Load() != 1 || count(evs, agent.TypeApprovalResolved) != 1 {
		t.Errorf("%d verdicts accepted, %d logged; want exactly one\n%s", wins.Load(), count(evs, agent.TypeApprovalResolved), dump(evs))
	}
}

func TestCancelParkedTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{approvals: true})
	id := parked(t, e)
	e.settle()
	if err := e.svc.Cancel(e.ctx, e.agentID, "user gave up"); err != nil {
		t.Fatal(err)
	}
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	resolved := indexOf(evs, agent.TypeApprovalResolved, map[string]any{"call_id": id, "verdict": "denied", "reason": "user gave up"})
	result := indexOf(evs, agent.TypeToolResult, map[string]any{"call_id": id, "error": "denied: user gave up"})
	end := indexOf(evs, agent.TypeTurnEnd, map[string]any{"status": "cancelled", "reason": "user gave up"})
	if resolved < 0 || result < resolved || end < result || count(evs, agent.TypeApprovalResolved) != 1 {
		t.Fatalf("want the denial, then the call's error result, then turn/end, all with the reason:\n%s", dump(evs))
	}
	tip := e.tip()
	if err := e.svc.Approve(e.ctx, e.agentID, id); !errors.Is(err, agent.ErrStaleCall) {
		t.Errorf("approve after the turn closed: %v", err)
	}
	if e.tip() != tip {
		t.Errorf("a stale verdict appended")
	}
}

func TestCrashWhileParked(t *testing.T) {
	t.Parallel()
	hook, crashed := crashOnce(agent.CrashParked)
	e := newEnv(t, opts{approvals: true, crash: hook})
	id := parked(t, e)
	waitChan(t, crashed, "the crash")
	e.settle()
	if leaseOwner(t, e) == "" {
		t.Fatalf("the crashed runner's lease should still stand")
	}
	if err := e.svc.Approve(e.ctx, e.agentID, id); err != nil {
		t.Fatal(err)
	}
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	if count(evs, agent.TypeApprovalRequested) != 1 || count(evs, agent.TypeToolResult) != 1 ||
		string(mustJSON(payload(ofType(evs, agent.TypeToolResult)[0])["result"])) != `{"text":"g"}` ||
		lastTurnEnd(t, evs)["status"] != agent.StatusCompleted {
		t.Errorf("the resumed turn finds the verdict instead of parking again:\n%s", dump(evs))
	}
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	t.Run("applies to calls", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, opts{})
		if err := e.svc.SetPolicy(e.ctx, e.agentID, []string{"nothing"}); err != nil {
			t.Fatal(err)
		}
		if err := e.svc.SetPolicy(e.ctx, e.agentID, []string{"ech?", "clock"}); err != nil { // last wins
			t.Fatal(err)
		}
		e.inject(script(`{"call":[{"tool":"echo","args":{"text":"a"}},{"tool":"sleep","args":{"ms":1}},{"tool":"clock"}]}`, `{"say":"ok"}`), true)
		evs := e.waitTurnEnds(1)
		e.settle()
		e.noErrors()
		if p := ofType(evs, agent.TypePolicyUpdated); len(p) != 2 || string(mustJSON(payload(p[1])["patterns"])) != `["ech?","clock"]` {
			t.Errorf("policy/updated events:\n%s", dump(p))
		}
		results := map[string]map[string]any{}
		for _, c := range ofType(evs, agent.TypeToolCall) {
			results[str(c, "name")] = payload(evs[indexOf(evs, agent.TypeToolResult, map[string]any{"call_id": str(c, "id")})])
		}
		if results["echo"]["result"] == nil || results["clock"]["result"] == nil || results["sleep"]["error"] != agent.ErrTextPolicy {
			t.Errorf("results %v", results)
		}
	})
	t.Run("mid-turn", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, opts{})
		e.inject(script(`{"call":[{"tool":"sleep","args":{"ms":500}}]}`, `{"call":[{"tool":"echo","args":{"text":"b"}}]}`, `{"say":"x"}`), true)
		e.waitFor("tool/call", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeToolCall) == 1 })
		if err := e.svc.SetPolicy(e.ctx, e.agentID, []string{"sleep"}); err != nil {
			t.Fatal(err)
		}
		evs := e.waitTurnEnds(1)
		e.settle()
		e.noErrors()
		res := ofType(evs, agent.TypeToolResult)
		if len(res) != 2 || payload(res[0])["result"] == nil || str(res[1], "error") != agent.ErrTextPolicy {
			t.Errorf("the policy applies from the next tool call:\n%s", dump(evs))
		}
	})
	t.Run("rebuilt after restart", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, opts{})
		if err := e.svc.SetPolicy(e.ctx, e.agentID, []string{}); err != nil {
			t.Fatal(err)
		}
		e.restart(nil)
		e.inject(script(`{"call":[{"tool":"clock"}]}`, `{"say":"x"}`), true)
		evs := e.waitTurnEnds(1)
		e.settle()
		e.noErrors()
		if res := ofType(evs, agent.TypeToolResult); len(res) != 1 || str(res[0], "error") != agent.ErrTextPolicy {
			t.Errorf("an empty policy allows nothing, across a restart:\n%s", dump(evs))
		}
	})
}

// blob is a tool returning a result far over the event bound.
type blob struct{}

func (blob) Definition() tools.Definition {
	return tools.Definition{Name: "blob", Concurrency: tools.Serial}
}
func (blob) Call(context.Context, json.RawMessage) (json.RawMessage, error) {
	return json.Marshal(map[string]string{"data": strings.Repeat("<x>", 100_000)})
}

// bigArgs asks for one call with arguments over the bound, then says "ok".
type bigArgs struct{}

func (bigArgs) Stream(_ context.Context, req model.Request, on func(model.Delta) error) (model.Response, error) {
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == model.RoleTool {
		_ = on(model.Delta{Text: "ok"})
		return model.Response{Text: "ok"}, nil
	}
	args, _ := json.Marshal(map[string]string{"text": strings.Repeat("a", 100_000)})
	return model.Response{ToolCalls: []model.ToolCall{{ID: "c1", Name: "echo", Args: args}}}, nil
}

func TestSizeBounds(t *testing.T) {
	t.Parallel()
	t.Run("inject text and reply", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, opts{})
		// Over the bound by one byte: refused whole, nothing queued or logged.
		over := strings.Repeat("é\"", 40_000) // 120 KB of text, 200 KB escaped
		err := e.svc.Inject(e.ctx, e.agentID, over, true)
		var long *agent.TextTooLongError
		if !errors.As(err, &long) || !errors.Is(err, agent.ErrTextTooLong) || long.Bytes != agent.TextBytes(over) {
			t.Fatalf("inject of %d bytes = %v, want a TextTooLongError", agent.TextBytes(over), err)
		}
		// At the bound exactly: taken whole, and the reply is the text.
		at := strings.Repeat("é\"", (agent.MaxTextBytes-2)/4) + strings.Repeat("a", (agent.MaxTextBytes-2)%4) // é is 2 bytes, \" 2
		if n := agent.TextBytes(at); n != agent.MaxTextBytes {
			t.Fatalf("test text is %d bytes JSON-encoded, want %d", n, agent.MaxTextBytes)
		}
		e.inject(at, true)
		evs := e.waitTurnEnds(1)
		e.settle()
		e.noErrors()
		ums := ofType(evs, agent.TypeUserMessage)
		if len(ums) != 1 || str(ums[0], "text") != at || payload(ums[0])["truncated"] != nil {
			t.Fatalf("user/message events %d, want one holding the text at the bound whole", len(ums))
		}
		um := ums[0]
		for _, c := range ofType(evs, agent.TypeAssistantChunk) {
			if len(mustJSON(str(c, "text"))) > agent.MaxChunkBytes {
				t.Errorf("chunk of %d bytes", len(mustJSON(str(c, "text"))))
			}
		}
		if chunkText(evs) != str(um, "text") || lastTurnEnd(t, evs)["status"] != agent.StatusCompleted {
			t.Errorf("the reply is the (bounded) text")
		}
	})
	t.Run("tool result", func(t *testing.T) {
		t.Parallel()
		kinds := tools.NewRegistry()
		if err := kinds.RegisterKind("test", func(tools.ToolConfig) (tools.Tool, error) { return blob{}, nil }); err != nil {
			t.Fatal(err)
		}
		profile := tools.Profile{Tools: []tools.ToolConfig{{Name: "blob", Kind: "test"}}}
		e := newEnv(t, opts{tools: kinds, profile: &profile})
		e.inject(script(`{"call":[{"tool":"blob"}]}`, `{"say":"ok"}`), true)
		evs := e.waitTurnEnds(1)
		e.settle()
		e.noErrors()
		res := ofType(evs, agent.TypeToolResult)[0]
		text, isString := payload(res)["result"].(string)
		if payload(res)["truncated"] != true || !isString || len(mustJSON(text)) > agent.MaxResultBytes || !strings.HasPrefix(text, `{"data":"`) {
			t.Errorf("tool/result not bounded: %.200s", res.Payload)
		}
	})
	t.Run("tool args", func(t *testing.T) {
		t.Parallel()
		models := model.NewRegistry()
		if err := models.Register("big", providerFunc(func(string) (model.Model, error) { return bigArgs{}, nil })); err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, opts{models: models, profile: allowing("*")})
		if err := e.svc.SetModel(e.ctx, e.agentID, agent.RoleMain, "big/args"); err != nil {
			t.Fatal(err)
		}
		e.inject("go", true)
		evs := e.waitTurnEnds(1)
		e.settle()
		e.noErrors()
		call, res := ofType(evs, agent.TypeToolCall)[0], ofType(evs, agent.TypeToolResult)[0]
		if string(mustJSON(payload(call)["args"])) != `{}` || payload(call)["truncated"] != true || str(call, "args_error") != agent.ErrTextArgsTooBig ||
			str(res, "error") != agent.ErrTextArgsTooBig || chunkText(evs) != "ok" {
			t.Errorf("over-large args are refused, not cut:\n%s", dump(evs))
		}
	})
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// holdingLog holds the runner just after it appended an event of type typ (the event is
// in the log, and on its way to the clients) until release is closed.
type holdingLog struct {
	agent.Log
	typ      string
	once     sync.Once
	appended chan struct{}
	release  chan struct{}
}

func (h *holdingLog) AppendIn(ctx context.Context, agentID string, f sessionlog.Fence, typ string, payload any, stamp string) (sessionlog.Event, error) {
	ev, err := h.Log.AppendIn(ctx, agentID, f, typ, payload, stamp)
	if err == nil && typ == h.typ {
		h.once.Do(func() {
			close(h.appended)
			select {
			case <-h.release:
			case <-time.After(hang()):
			}
		})
	}
	return ev, err
}

// TestCancelAfterTurnEndLogged: a cancel served after the turn's turn/end is logged —
// a client that saw the turn end and then sent cancel — while the runner has not yet
// cleared the turn from the state item is answered not_running, as any cancel with no
// turn running is (docs/lifecycle.md), rather than taken for the ended turn and
// answered by nothing. It stays answered so when it waited: the next turn is not
// cancelled by it.
func TestCancelAfterTurnEndLogged(t *testing.T) {
	t.Parallel()
	hl := &holdingLog{typ: agent.TypeTurnEnd, appended: make(chan struct{}), release: make(chan struct{})}
	e := newEnv(t, opts{wrapLog: func(l agent.Log) agent.Log { hl.Log = l; return hl }})
	e.inject("hi", true)
	waitChan(t, hl.appended, "the runner holding after the turn/end append")
	err := e.svc.Cancel(e.ctx, e.agentID, "too late")
	close(hl.release)
	if !errors.Is(err, agent.ErrNotRunning) {
		t.Errorf("cancel after the turn/end was logged, the turn still recorded: %v, want %v", err, agent.ErrNotRunning)
	}
	e.waitTurnEnds(1)
	e.settle()
	e.inject("again", true)
	evs := e.waitTurnEnds(2)
	e.settle()
	e.noErrors()
	for _, te := range ofType(evs, agent.TypeTurnEnd) {
		if p := payload(te); p["status"] != agent.StatusCompleted {
			t.Errorf("turn/end %v, want completed: the cancel answered not_running stops nothing\n%s", p, dump(evs))
		}
	}
}
