package agent_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/sessionlog"
)

func TestWakeRunsTurn(t *testing.T) {
	t.Parallel()
	var hooked atomic.Int64
	e := newEnv(t, opts{onAppend: func(context.Context, sessionlog.Event) { hooked.Add(1) }})
	e.inject("hello world", true)
	evs := e.waitFor("session/titled", func(evs []sessionlog.Event) bool {
		return count(evs, agent.TypeSessionTitled) == 1
	})
	e.settle()
	e.noErrors()
	want := []string{sessionlog.TypeSessionCreated, agent.TypeUserMessage, agent.TypeTurnStart,
		agent.TypeAssistantChunk, agent.TypeAssistantChunk, agent.TypeTurnEnd, agent.TypeSessionTitled}
	if got := typesOf(evs); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v\n%s", got, want, dump(evs))
	}
	if str(evs[1], "text") != "hello world" || str(evs[1], "turn_id") != str(evs[2], "turn_id") || str(evs[2], "turn_id") == "" {
		t.Errorf("user/message %s, turn/start %s; want text \"hello world\" and one non-empty turn_id in both", evs[1].Payload, evs[2].Payload)
	}
	if got := chunkText(evs); got != "hello world" {
		t.Errorf("chunks concatenate to %q, want %q", got, "hello world")
	}
	if payload(evs[3])["final"] != nil || payload(evs[4])["final"] != true || payload(evs[4])["usage"] == nil {
		t.Errorf("chunks %s / %s; want only the last final, carrying usage", evs[3].Payload, evs[4].Payload)
	}
	end := payload(evs[5])
	if end["status"] != agent.StatusCompleted || end["turn_id"] != str(evs[2], "turn_id") || end["reason"] != nil {
		t.Errorf("turn/end %s; want status %q, turn_id %q, no reason", evs[5].Payload, agent.StatusCompleted, str(evs[2], "turn_id"))
	}
	usage, _ := end["usage"].(map[string]any)
	if usage["input_tokens"].(float64) <= 0 || usage["output_tokens"].(float64) <= 0 || usage["model_calls"] != 1.0 || usage["tool_calls"] != 0.0 {
		t.Errorf("turn usage %v; want input and output tokens > 0, model_calls 1, tool_calls 0", usage)
	}
	if str(evs[6], "title") != "hello world" {
		t.Errorf("session/titled %s; want title %q", evs[6].Payload, "hello world")
	}
	if int(hooked.Load()) != len(evs)-1 {
		t.Errorf("the log notified %d appends, want %d (every event the runtime appended)", hooked.Load(), len(evs)-1)
	}

	c, err := e.svc.Usage(e.ctx, e.agentID)
	if err != nil {
		t.Fatal(err)
	}
	// The scripted titler makes no model call: the counters are the turn's usage.
	if c.Turns != 1 || c.ModelCalls != 1 || c.ToolCalls != 0 || c.InputTokens != int64(usage["input_tokens"].(float64)) {
		t.Errorf("counters %+v; want turns 1, model_calls 1, tool_calls 0, input_tokens as the turn's usage %v", c, usage)
	}
}

func TestScriptedStepKinds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		script string
		status string
		reason string
		check  func(t *testing.T, evs []sessionlog.Event)
	}{
		{"say with chunks", script(`{"say":"abcdefg","chunks":3,"delay_ms":20}`), agent.StatusCompleted, "",
			func(t *testing.T, evs []sessionlog.Event) {
				var texts []string
				for _, ev := range ofType(evs, agent.TypeAssistantChunk) {
					texts = append(texts, str(ev, "text"))
				}
				if strings.Join(texts, "|") != "ab|cd|efg" {
					t.Errorf("chunks %q, want exactly 3", texts)
				}
			}},
		{"call then say", script(`{"call":[{"tool":"echo","args":{"text":"hi"}},{"tool":"sleep","args":{"ms":10}},{"tool":"clock"}]}`, `{"say":"done"}`),
			agent.StatusCompleted, "",
			func(t *testing.T, evs []sessionlog.Event) {
				calls, results := ofType(evs, agent.TypeToolCall), ofType(evs, agent.TypeToolResult)
				if len(calls) != 3 || len(results) != 3 {
					t.Fatalf("calls %d results %d", len(calls), len(results))
				}
				byID := map[string]map[string]any{}
				for _, r := range results {
					byID[str(r, "call_id")] = payload(r)
				}
				want := map[string]string{"echo": `{"text":"hi"}`, "sleep": `{"slept_ms":10}`}
				for _, c := range calls {
					res, ok := byID[str(c, "id")]
					if !ok {
						t.Fatalf("no result for %s", c.Payload)
					}
					got, _ := json.Marshal(res["result"])
					if w, ok := want[str(c, "name")]; ok && string(got) != w {
						t.Errorf("%s result %s, want %s", str(c, "name"), got, w)
					}
					if str(c, "name") == "clock" && !strings.HasSuffix(string(got), `Z"}`) {
						t.Errorf("clock result %s", got)
					}
				}
				if chunkText(evs) != "done" {
					t.Errorf("reply %q", chunkText(evs))
				}
			}},
		{"fail", script(`{"fail":"the model broke"}`), agent.StatusFailed, "the model broke", nil},
		{"used up at once", script(), agent.StatusEmpty, "", nil},
		{"used up after a call", script(`{"call":[{"tool":"echo","args":{"text":"x"}}]}`), agent.StatusEmpty, "",
			func(t *testing.T, evs []sessionlog.Event) {
				if count(evs, agent.TypeToolResult) != 1 {
					t.Errorf("the call did not run")
				}
			}},
		{"refuse", script(`{"refuse":"I will not"}`), agent.StatusRejected, "I will not", nil},
		{"unknown tool", script(`{"call":[{"tool":"nope"}]}`, `{"say":"ok"}`), agent.StatusCompleted, "",
			func(t *testing.T, evs []sessionlog.Event) {
				if r := ofType(evs, agent.TypeToolResult); len(r) != 1 || str(r[0], "error") != "unknown tool: nope" {
					t.Errorf("results %s", dump(r))
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, opts{})
			e.inject(c.script, true)
			evs := e.waitTurnEnds(1)
			e.settle()
			e.noErrors()
			end := lastTurnEnd(t, evs)
			if end["status"] != c.status || (c.reason != "" && end["reason"] != c.reason) {
				t.Errorf("turn/end %v, want status %s reason %q\n%s", end, c.status, c.reason, dump(evs))
			}
			if count(evs, agent.TypeTurnStart) != 1 {
				t.Errorf("turn/start %d times", count(evs, agent.TypeTurnStart))
			}
			if c.check != nil {
				c.check(t, evs)
			}
		})
	}
}

// refuser is a model that stops with a provider's content-filter stop reason.
type refuser struct{}

func (refuser) Stream(context.Context, model.Request, func(model.Delta) error) (model.Response, error) {
	return model.Response{StopReason: "content_filtered", Usage: model.Usage{InputTokens: 3}}, nil
}

type providerFunc func(name string) (model.Model, error)

func (f providerFunc) Model(name string) (model.Model, error) { return f(name) }

func TestProviderRefusalRejectsTurn(t *testing.T) {
	t.Parallel()
	models := model.NewRegistry()
	if err := models.Register("filter", providerFunc(func(string) (model.Model, error) { return refuser{}, nil })); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, opts{models: models, profile: allowing("*")})
	if err := e.svc.SetModel(e.ctx, e.agentID, agent.RoleMain, "filter/any"); err != nil {
		t.Fatal(err)
	}
	e.inject("something", true)
	evs := e.waitTurnEnds(1)
	end := lastTurnEnd(t, evs)
	if end["status"] != agent.StatusRejected || end["reason"] != "model refused (content_filtered)" {
		t.Errorf("turn/end %v", end)
	}
	if u := end["usage"].(map[string]any); u["input_tokens"] != 3.0 || u["model_calls"] != 1.0 {
		t.Errorf("usage of a call no event carries: %v", u)
	}
	e.settle()
	e.noErrors()
}

func TestInjectDuringTurnRidesNextStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{})
	e.inject(script(`{"call":[{"tool":"sleep","args":{"ms":700}}]}`, `{"say":"done"}`), true)
	e.waitFor("tool/call", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeToolCall) == 1 })
	e.inject("steer quietly", false)
	e.inject("steer and wake", true) // busy agent: queued like the other
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	evs = e.events()
	if n := count(evs, agent.TypeTurnStart); n != 1 {
		t.Fatalf("%d turns\n%s", n, dump(evs))
	}
	result := indexOf(evs, agent.TypeToolResult, nil)
	quiet := indexOf(evs, agent.TypeContextInjected, map[string]any{"text": "steer quietly"})
	woke := indexOf(evs, agent.TypeContextInjected, map[string]any{"text": "steer and wake"})
	firstChunk := indexOf(evs, agent.TypeAssistantChunk, nil)
	if !(result < quiet && quiet < woke && woke < firstChunk) || count(evs, agent.TypeContextInjected) != 2 {
		t.Errorf("injects must land once each, after the tool result and before the next model call\n%s", dump(evs))
	}
	if lastTurnEnd(t, evs)["status"] != agent.StatusCompleted || chunkText(evs) != "done" {
		t.Errorf("turn did not finish its script\n%s", dump(evs))
	}
}

func TestWakeFalseWaitsForNextTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{})
	e.inject("queued first", false)
	// Inject invokes the runner, if at all, before it returns: with no invocation
	// asked for, nothing can append.
	if calls, tip := e.inv.calls.Load(), e.tip(); calls != 0 || tip != 0 {
		t.Fatalf("wake:false on an idle agent: %d runner invocations, tip %d; want 0, 0", calls, tip)
	}
	e.inject("now go", true)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	want := []string{sessionlog.TypeSessionCreated, agent.TypeUserMessage, agent.TypeTurnStart, agent.TypeContextInjected}
	if got := typesOf(evs)[:4]; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v first", got, want)
	}
	if str(evs[1], "text") != "now go" || str(evs[3], "text") != "queued first" {
		t.Errorf("the waking text is the user/message, the queued one context/injected:\n%s", dump(evs))
	}
	if chunkText(evs) != "queued first" {
		t.Errorf("scripted reply %q: the newest user message or injected context", chunkText(evs))
	}
}

// TestRacingWakesMakeOneTurn: two injects with wake sent at once invoke the runner twice;
// the two invocations race for the lease over both queued items and make one turn that
// takes both. The invocations are held until both injects are queued: on a slow machine
// a turn could otherwise start, and end, before the second inject was even sent, and
// that inject would rightly start a turn of its own.
func TestRacingWakesMakeOneTurn(t *testing.T) {
	t.Parallel()
	for round := range 3 {
		hold := make(chan struct{})
		e := newEnv(t, opts{holdRuns: hold})
		texts := []string{"wake A", "wake B"}
		var start, done sync.WaitGroup
		start.Add(1)
		for _, text := range texts {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				if err := e.svc.Inject(e.ctx, e.agentID, text, true); err != nil {
					t.Errorf("inject: %v", err)
				}
			}()
		}
		start.Done()
		done.Wait()
		if got := e.inv.calls.Load(); got != 2 {
			t.Fatalf("round %d: %d runner invocations for two wakes, want 2", round, got)
		}
		close(hold)
		e.waitTurnEnds(1)
		e.settle()
		e.noErrors()
		evs := e.events()
		if count(evs, agent.TypeTurnStart) != 1 || count(evs, agent.TypeTurnEnd) != 1 ||
			count(evs, agent.TypeUserMessage) != 1 || count(evs, agent.TypeContextInjected) != 1 {
			t.Fatalf("round %d: want one turn with one user/message and one context/injected\n%s", round, dump(evs))
		}
		got := []string{str(ofType(evs, agent.TypeUserMessage)[0], "text"), str(ofType(evs, agent.TypeContextInjected)[0], "text")}
		slices.Sort(got)
		if !slices.Equal(got, texts) {
			t.Errorf("round %d: texts %v", round, got)
		}
	}
}

// fixed is a model answering with a fixed text, in two deltas.
type fixed struct{ text string }

func (f fixed) Stream(_ context.Context, _ model.Request, on func(model.Delta) error) (model.Response, error) {
	half := len(f.text) / 2
	for _, p := range []string{f.text[:half], f.text[half:]} {
		if err := on(model.Delta{Text: p}); err != nil {
			return model.Response{}, err
		}
	}
	return model.Response{Text: f.text, StopReason: model.StopEndTurn, Usage: model.Usage{InputTokens: 5, OutputTokens: 2}}, nil
}

func TestSetModelPersists(t *testing.T) {
	t.Parallel()
	models := model.NewRegistry()
	if err := models.Register("fixed", providerFunc(func(name string) (model.Model, error) {
		return fixed{text: "FIXED " + name}, nil
	})); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, opts{models: models, profile: allowing("*")})
	for _, bad := range [][2]string{{"boss", "scripted"}, {"main", "nope"}, {"main", "unknown/x"}, {"main", "scripted/x"}, {"titler", ""}} {
		if err := e.svc.SetModel(e.ctx, e.agentID, bad[0], bad[1]); !errorsIs(err, agent.ErrBadSpec) {
			t.Errorf("SetModel(%s, %s) = %v, want ErrBadSpec", bad[0], bad[1], err)
		}
	}
	if err := e.svc.SetModel(e.ctx, e.agentID, agent.RoleMain, "fixed/a"); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.SetModel(e.ctx, e.agentID, agent.RoleTitler, "fixed/title"); err != nil {
		t.Fatal(err)
	}
	e.inject("hi", true)
	e.waitFor("title", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeSessionTitled) == 1 })
	e.settle()

	e.restart(nil) // a cold start: the setting lives in AgentsTable, not in process
	e.inject("again", true)
	evs := e.waitTurnEnds(2)
	e.settle()
	if got := chunkText(evs); got != "FIXED aFIXED a" {
		t.Errorf("replies %q, want the fixed model's twice", got)
	}
	if title := str(ofType(evs, agent.TypeSessionTitled)[0], "title"); title != "FIXED title" {
		t.Errorf("title %q, want the titler model's", title)
	}
	if count(evs, agent.TypeSessionTitled) != 1 {
		t.Errorf("the session is titled once")
	}

	if err := e.svc.SetModel(e.ctx, e.agentID, agent.RoleMain, "scripted"); err != nil {
		t.Fatal(err)
	}
	e.inject("back to scripted", true)
	evs = e.waitTurnEnds(3)
	if got := chunkText(evs); !strings.HasSuffix(got, "back to scripted") {
		t.Errorf("replies %q", got)
	}
	e.settle()
	e.noErrors()
}

func TestUsageCounters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{})
	e.inject(script(`{"call":[{"tool":"echo","args":{"text":"1"}},{"tool":"clock"}]}`, `{"say":"ok"}`), true)
	e.waitTurnEnds(1)
	e.inject("second", true)
	evs := e.waitTurnEnds(2)
	e.settle()
	e.noErrors()
	var sum agent.TurnUsage
	for _, ev := range ofType(evs, agent.TypeTurnEnd) {
		var te struct{ Usage agent.TurnUsage }
		if err := json.Unmarshal(ev.Payload, &te); err != nil {
			t.Fatal(err)
		}
		sum.InputTokens += te.Usage.InputTokens
		sum.OutputTokens += te.Usage.OutputTokens
		sum.ModelCalls += te.Usage.ModelCalls
		sum.ToolCalls += te.Usage.ToolCalls
		sum.WallMS += te.Usage.WallMS
	}
	if sum.ToolCalls != 2 || sum.ModelCalls != 3 {
		t.Errorf("turn usages sum to %+v, want 2 tool calls and 3 model calls", sum)
	}
	c, err := e.svc.Usage(e.ctx, e.agentID)
	if err != nil {
		t.Fatal(err)
	}
	// The counters hold the turns' usage (the scripted titler makes no model call).
	if c.Turns != 2 || c.ToolCalls != sum.ToolCalls || c.ModelCalls != sum.ModelCalls || c.WallMS != sum.WallMS ||
		c.InputTokens != sum.InputTokens || c.OutputTokens != sum.OutputTokens {
		t.Errorf("counters %+v, turn usages %+v", c, sum)
	}
	if other, err := e.svc.Usage(e.ctx, "never-ran"); err != nil || other != (agent.Counters{}) {
		t.Errorf("usage of an unknown agent: %+v %v", other, err)
	}
}

func TestSetModelTakesEffectAtNextStep(t *testing.T) {
	t.Parallel()
	models := model.NewRegistry()
	if err := models.Register("fixed", providerFunc(func(name string) (model.Model, error) {
		return fixed{text: "FIXED " + name}, nil
	})); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, opts{models: models, profile: allowing("*")})
	e.inject(script(`{"call":[{"tool":"sleep","args":{"ms":500}}]}`, `{"say":"scripted"}`), true)
	e.waitFor("tool/call", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeToolCall) == 1 })
	if err := e.svc.SetModel(e.ctx, e.agentID, agent.RoleMain, "fixed/now"); err != nil {
		t.Fatal(err)
	}
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	if got := chunkText(evs); got != "FIXED now" {
		t.Errorf("the step after set_model answered %q", got)
	}
}
