package agent_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/tools"
)

// quotaTurn runs one turn on an OpenAI-compatible server that answers the main model
// with an echo call as long as it has any (calls of them), after steers queued
// without wake (each of steerBytes characters), and returns the log, the server and
// the agent's counters.
func quotaTurn(t *testing.T, q tools.Quotas, budget int64, calls, steers, steerBytes int) ([]map[string]any, *chatServer, agent.Counters) {
	t.Helper()
	srv := newChatServer(t, 0, "done")
	for i := range calls {
		srv.toolCalls = append(srv.toolCalls, fmt.Sprintf(`{"text":"step %d"}`, i))
	}
	prof := tools.DefaultProfile()
	prof.Quotas = q
	prof.Context.BudgetTokens = budget
	e := newEnv(t, opts{profile: &prof})
	e.restart(withModel(srv.models(t)))
	for i := range steers {
		e.inject(fmt.Sprintf("steer %d %s", i, strings.Repeat("s", steerBytes)), false)
	}
	e.inject("go", true)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	c, err := e.svc.Usage(e.ctx, e.agentID)
	if err != nil {
		t.Fatal(err)
	}
	var ends []map[string]any
	for _, ev := range ofType(evs, agent.TypeTurnEnd) {
		ends = append(ends, payload(ev))
	}
	return ends, srv, c
}

// TestQuotaCheckedBeforeEveryModelCall: tokens_per_month is checked before every
// model call of a turn, not only at its start. Steers queued before the wake (4,000
// characters each) ride every call of a turn the model keeps going with tool calls;
// the turn ends rejected once its next call would pass the month's cap, and the
// tokens the provider billed stay within it.
func TestQuotaCheckedBeforeEveryModelCall(t *testing.T) {
	t.Parallel()
	const cap = 12_000
	ends, srv, c := quotaTurn(t, tools.Quotas{TokensPerMonth: cap}, 0, 20, 3, 4000)
	if len(ends) != 1 || ends[0]["status"] != agent.StatusRejected ||
		!strings.HasPrefix(fmt.Sprint(ends[0]["reason"]), fmt.Sprintf("quota: tokens_per_month %d reached; resets at ", cap)) {
		t.Fatalf("turn/end %v; want one turn ended rejected by tokens_per_month", ends)
	}
	billed := srv.tokens()
	t.Logf("tokens_per_month %d: the provider billed %d tokens in %d requests; turn/end %v", cap, billed, len(srv.requests()), ends[0]["usage"])
	if billed > cap || billed == 0 {
		t.Fatalf("the provider billed %d tokens in %d requests against tokens_per_month %d", billed, len(srv.requests()), cap)
	}
	if c.QuotaTokens != billed {
		t.Fatalf("the month's counter is %d tokens; the provider billed %d", c.QuotaTokens, billed)
	}
}

// TestTurnBudget: quotas.turn_model_calls and quotas.turn_tokens bound one turn. A
// turn whose next model call would pass either ends rejected naming it, before that
// call — the compactor's calls included.
func TestTurnBudget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		q        tools.Quotas
		budget   int64 // context.budget_tokens; 0: the model's default
		steers   int
		reason   string
		requests int // the provider's requests, at most
		tokens   int64
	}{
		{"model calls", tools.Quotas{TurnModelCalls: 3}, 0, 0, "quota: turn_model_calls 3 reached", 3, 0},
		{"tokens", tools.Quotas{TurnTokens: 5000}, 0, 2, "quota: turn_tokens 5000 reached", 20, 5000},
		// A 1,000-token budget under six 2,000-character steers: the history is
		// compacted before each call, and the compactor's calls count.
		{"tokens with compaction", tools.Quotas{TurnTokens: 3000}, 1000, 6, "quota: turn_tokens 3000 reached", 20, 3000},
		{"model calls with compaction", tools.Quotas{TurnModelCalls: 2}, 1000, 6, "quota: turn_model_calls 2 reached", 2, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ends, srv, _ := quotaTurn(t, tc.q, tc.budget, 30, tc.steers, 2000)
			if len(ends) != 1 || ends[0]["status"] != agent.StatusRejected || !strings.HasPrefix(fmt.Sprint(ends[0]["reason"]), tc.reason) {
				t.Fatalf("turn/end %v; want one turn ended rejected with %q", ends, tc.reason)
			}
			reqs := srv.requests()
			if len(reqs) > tc.requests {
				t.Fatalf("the provider got %d requests, want at most %d", len(reqs), tc.requests)
			}
			if tc.tokens > 0 && srv.tokens() > tc.tokens {
				t.Fatalf("the provider billed %d tokens for the turn, over turn_tokens %d", srv.tokens(), tc.tokens)
			}
			u, _ := ends[0]["usage"].(map[string]any)
			if got := int64(u["input_tokens"].(float64) + u["output_tokens"].(float64)); got != srv.tokens() {
				t.Fatalf("turn/end usage counts %d tokens; the provider billed %d", got, srv.tokens())
			}
			if got := int(u["model_calls"].(float64)); got != len(reqs) {
				t.Fatalf("turn/end usage counts %d model calls; the provider got %d requests", got, len(reqs))
			}
		})
	}
}
