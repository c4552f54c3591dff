package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// hookModel answers "ok: " and the newest user text; before answering a message whose
// text is hookText it calls hook (once). The compactor's requests get a fixed summary.
type hookModel struct {
	hookText string
	hook     func()
	fired    *atomic.Bool
}

func (m hookModel) Stream(_ context.Context, req model.Request, on func(model.Delta) error) (model.Response, error) {
	text := "a summary"
	if !strings.HasPrefix(req.System, compactorMarker) {
		last := ""
		for _, msg := range req.Messages {
			if msg.Role == model.RoleUser {
				last = msg.Text
			}
		}
		if last == m.hookText && m.fired.CompareAndSwap(false, true) {
			m.hook()
		}
		text = "ok: " + last
	}
	if err := on(model.Delta{Text: text}); err != nil {
		return model.Response{}, err
	}
	return model.Response{Text: text, StopReason: model.StopEndTurn, Usage: model.Usage{InputTokens: 10, OutputTokens: 2}}, nil
}

// TestNoWakeDroppedOnAnAgedLog: on a 10,000-event log from before checkpoints, read
// from its checkpoint after the first invocation, every waking inject lands exactly
// once and gets its turn's attention, as on a young log (docs/lifecycle.md, "No wake
// is dropped"):
//   - two waking injects on an idle agent: one turn, the older text its user/message,
//     the other drained as context/injected; another invocation finds nothing to do;
//   - a runner killed after logging a drained inject and before deleting it from the
//     inbox: the next (cold) runner finds it logged, from the checkpoint on, and does
//     not log it again;
//   - an inject arriving while the final answer streams: the turn takes another step
//     for it instead of ending;
//   - an inject after the turn ended: the next invocation starts a turn for it.
func TestNoWakeDroppedOnAnAgedLog(t *testing.T) {
	t.Parallel()
	var crashArmed atomic.Bool
	var a *aged
	hook := hookModel{hookText: "answer slowly", fired: &atomic.Bool{}, hook: func() {
		if err := a.svc.Inject(a.ctx, a.id, "while you answer", true); err != nil {
			t.Errorf("inject during the answer: %v", err)
		}
	}}
	models := model.NewRegistry()
	if err := models.Register("hook", providerFunc(func(string) (model.Model, error) { return hook, nil })); err != nil {
		t.Fatal(err)
	}
	a = newAged(t, testTables(t), agedWakeEvents, agedProfile(4000), func(c *agent.Config) {
		c.Models, c.MainModel = models, "hook/test"
		c.Crash = func(p string) bool { return p == agent.CrashInboxLogged && crashArmed.CompareAndSwap(true, false) }
	})
	if te := lastTurnEndOf(t, a.turn("warm up")); te["status"] != agent.StatusCompleted {
		t.Fatalf("warm-up turn: %v", te)
	}
	if ck := a.checkpointSeq(); ck < int64(agedWakeEvents)/2 {
		t.Fatalf("checkpoint at %d after the first turn on a 20,000-event log", ck)
	}
	invoker := a.cfg.Invoker.(*nopInvoker)
	inject := func(text string) {
		t.Helper()
		if err := a.svc.Inject(a.ctx, a.id, text, true); err != nil {
			t.Fatal(err)
		}
	}
	run := func() []sessionlog.Event {
		t.Helper()
		from := a.tip() + 1
		if err := a.runner.Run(a.ctx, a.id); err != nil {
			t.Fatalf("run: %v", err)
		}
		return a.since(from)
	}
	// One turn for two waking injects.
	calls := invoker.calls.Load()
	inject("wake A")
	inject("wake B")
	if got := invoker.calls.Load() - calls; got != 2 {
		t.Fatalf("two waking injects invoked the runner %d times, want 2", got)
	}
	evs := run()
	if count(evs, agent.TypeTurnStart) != 1 || count(evs, agent.TypeUserMessage) != 1 || count(evs, agent.TypeContextInjected) != 1 ||
		str(ofType(evs, agent.TypeUserMessage)[0], "text") != "wake A" || str(ofType(evs, agent.TypeContextInjected)[0], "text") != "wake B" ||
		lastTurnEndOf(t, evs)["status"] != agent.StatusCompleted {
		t.Fatalf("two waking injects: want one turn woken by A with B drained into it\n%s", dump(evs))
	}
	if evs := run(); len(evs) != 0 {
		t.Fatalf("the second invocation logged:\n%s", dump(evs))
	}

	// Killed between logging a drained inject and deleting it from the inbox.
	from := a.tip() + 1
	inject("wake C")
	inject("wake D")
	crashArmed.Store(true)
	if err := a.runner.Run(a.ctx, a.id); !errors.Is(err, agent.ErrCrashed) {
		t.Fatalf("run: %v, want the crash after the drain's append", err)
	}
	a.restart()
	run()
	evs = a.since(from)
	if count(evs, agent.TypeTurnStart) != 1 || count(evs, agent.TypeContextInjected) != 1 || count(evs, agent.TypeUserMessage) != 1 ||
		str(ofType(evs, agent.TypeContextInjected)[0], "text") != "wake D" || lastTurnEndOf(t, evs)["status"] != agent.StatusCompleted {
		t.Fatalf("after a crash between the drain's append and the inbox delete: want C's turn with D logged once\n%s", dump(evs))
	}

	// An inject while the final answer streams: another step, then the turn ends.
	inject("answer slowly")
	evs = run()
	injected := ofType(evs, agent.TypeContextInjected)
	if len(injected) != 1 || str(injected[0], "text") != "while you answer" || count(evs, agent.TypeTurnEnd) != 1 ||
		!strings.HasSuffix(chunkText(evs), "ok: while you answer") || lastTurnEndOf(t, evs)["status"] != agent.StatusCompleted {
		t.Fatalf("an inject during the final answer: want it drained and answered in the same turn\n%s", dump(evs))
	}
	if evs := run(); len(evs) != 0 {
		t.Fatalf("after the turn, an invocation logged:\n%s", dump(evs))
	}

	// An inject after the turn ended starts the next one.
	inject("after the end")
	evs = run()
	if count(evs, agent.TypeTurnStart) != 1 || str(ofType(evs, agent.TypeUserMessage)[0], "text") != "after the end" ||
		chunkText(evs) != "ok: after the end" || lastTurnEndOf(t, evs)["status"] != agent.StatusCompleted {
		t.Fatalf("an inject after the turn: want its own turn\n%s", dump(evs))
	}
}

// agedWakeEvents is the aged log's length: long enough that the runner reads it from
// its checkpoint, short enough to seed in a few seconds.
const agedWakeEvents = 10_000
