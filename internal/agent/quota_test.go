package agent_test

import (
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/tools"
)

// TestQuotaRefusalSurvivesCrash: with turns_per_day 1, the second wake is refused; a
// runner that dies between the refusal's turn/start and turn/end leaves the turn open,
// and the next invocation ends it rejected before refusing the new stimulus. No wake
// is logged as a user/message, and only the first turn is metered.
func TestQuotaRefusalSurvivesCrash(t *testing.T) {
	t.Parallel()
	prof := tools.DefaultProfile()
	prof.Quotas = tools.Quotas{TurnsPerDay: 1}
	crash, crashed := crashOnce(agent.CrashQuotaStarted)
	e := newEnv(t, opts{profile: &prof, crash: crash})
	e.inject("one", true)
	e.waitTurnEnds(1)
	e.settle()
	e.inject("two", true)
	waitChan(t, crashed, "the crash after the refusal's turn/start")
	e.settle()
	e.inject("three", true)
	evs := e.waitTurnEnds(3)
	e.settle()

	now := time.Now().UTC()
	y, m, d := now.Date()
	reason := "quota: turns_per_day 1 reached; resets at " + time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)
	ends := ofType(evs, agent.TypeTurnEnd)
	starts := ofType(evs, agent.TypeTurnStart)
	if len(ends) != 3 || len(starts) != 3 || count(evs, agent.TypeUserMessage) != 1 {
		t.Fatalf("want 3 turns, one user/message (the first wake); log:\n%s", dump(evs))
	}
	for i, end := range ends[1:] {
		p := payload(end)
		if p["status"] != agent.StatusRejected || p["reason"] != reason || !strings.HasPrefix(str(end, "turn_id"), "turn_quota_") ||
			str(end, "turn_id") != str(starts[i+1], "turn_id") {
			t.Errorf("refused turn %d: turn/start %s turn/end %s; want rejected with %q", i+1, starts[i+1].Payload, end.Payload, reason)
		}
	}
	if evs[len(evs)-1].Type != agent.TypeTurnEnd {
		t.Errorf("the log must end with the refusal; log:\n%s", dump(evs))
	}
	c, err := e.svc.Usage(e.ctx, e.agentID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Turns != 1 || c.QuotaTurns != 1 || c.QuotaDay != now.Format(time.DateOnly) || c.QuotaTokens != c.InputTokens+c.OutputTokens || c.QuotaTokens == 0 {
		t.Errorf("counters %+v; want 1 turn metered, today's quota count 1 and the month's tokens its tokens (a refused turn is not metered)", c)
	}
}

// TestQuotaRefusalOncePerStimulus: a wake refused for its quota is logged once, however
// many invocations run for that one stimulus — a second asynchronous invoke, Lambda's
// retry, an invocation that waited for the refusing one's lease. Only a new stimulus
// logs a new refusal.
func TestQuotaRefusalOncePerStimulus(t *testing.T) {
	t.Parallel()
	prof := tools.DefaultProfile()
	prof.Quotas = tools.Quotas{TurnsPerDay: 1}
	e := newEnv(t, opts{profile: &prof})
	e.inject("one", true)
	e.waitTurnEnds(1)
	e.settle()
	e.inject("two", true)
	e.waitTurnEnds(2)
	e.settle()
	for range 3 { // more invocations for the same stimulus
		if err := e.runner.Run(e.ctx, e.agentID); err != nil {
			t.Fatalf("run: %v", err)
		}
	}
	e.settle()
	if evs := e.events(); count(evs, agent.TypeTurnEnd) != 2 {
		t.Fatalf("want the refusal logged once for its one stimulus; log:\n%s", dump(evs))
	}
	e.inject("three", true)
	evs := e.waitTurnEnds(3)
	e.settle()
	if ends := ofType(evs, agent.TypeTurnEnd); len(ends) != 3 || payload(ends[2])["status"] != agent.StatusRejected {
		t.Fatalf("a new stimulus logs a new refusal; log:\n%s", dump(evs))
	}
}
