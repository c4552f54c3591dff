package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/tools"
)

// work brings the agent to rest, starting from st, the state just read by the lease
// write that began this pass: it finishes what a dead invocation left half done, runs
// or resumes the open turn, and starts a turn for each waking inject queued.
func (rn *activeRun) work(ctx context.Context, st state) (outcome, error) {
	if err := rn.apply(ctx, st); err != nil {
		return 0, err
	}
	read := true // rn.st is as read, and no step ran since: the first boundary uses it
	for {
		if err := rn.reconcile(ctx); err != nil {
			return 0, err
		}
		if rn.log.turn != nil {
			out, err := rn.runTurn(ctx, read)
			if err != nil || out != outEnded {
				return out, err
			}
			read = false
			continue
		}
		if rn.deadlineNear(ctx) {
			return outHandover, nil
		}
		it := rn.nextWake()
		if it == nil {
			return outIdle, nil
		}
		if rn.st.TurnID == "" { // a turn claimed by a dead invocation was counted already
			reason, err := rn.quotaReason(ctx)
			if err != nil {
				return 0, err
			}
			if reason != "" {
				return outIdle, rn.refuseForQuota(ctx, reason)
			}
		}
		if err := rn.startTurn(ctx, *it); err != nil {
			return 0, err
		}
	}
}

// reconcile makes the state item agree with the log, which is the truth: the open
// turn is the recorded one; a recorded turn that the log shows ended is metered and
// cleared; a recorded turn whose user/message is logged but not its turn/start gets
// its turn/start. An ended turn after which the agent is idle (no wake queued, no
// title to ask for) is left to the lease release, which finishes it in its own write.
func (rn *activeRun) reconcile(ctx context.Context) error {
	rn.ended = nil
	if t := rn.log.turn; t != nil {
		if isQuotaTurn(t.turnID) {
			return rn.endRefused(ctx, t.turnID)
		}
		if rn.st.TurnID != t.turnID {
			st, err := rn.c.store.setTurn(ctx, rn.agent, rn.me, t.turnID, t.seq)
			if err != nil {
				return err
			}
			rn.adopt(st)
		}
		return nil
	}
	id := rn.st.TurnID
	if id == "" {
		return nil
	}
	if te, ok := turnEndOf(rn.log.evs, id); ok {
		var u TurnUsage
		if te.Usage != nil {
			u = *te.Usage
		}
		_, titled, err := rn.log.firstMessage(ctx)
		if err != nil {
			return err
		}
		if titled && rn.oldestWake() == nil {
			rn.ended = &endedTurn{id: id, usage: u}
			return nil
		}
		return rn.finishTurn(ctx, id, u)
	}
	if userMessageOf(rn.log.evs, id) {
		_, err := rn.append(ctx, TypeTurnStart, turnStart{TurnID: id})
		return err
	}
	if rn.oldestWake() == nil {
		st, err := rn.c.store.clearTurn(ctx, rn.agent, rn.me, id)
		if err != nil {
			return err
		}
		rn.adopt(st)
	}
	return nil
}

// startTurn opens a turn with a waking inject as its user/message. The turn is
// recorded on the state item first — by the lease write (planClaim), by a dead
// invocation's claim, or here — so a cancel racing the start finds it. An inject
// queued on the state item left the queue with that claim; an inbox item of its own
// is deleted once its user/message is logged.
func (rn *activeRun) startTurn(ctx context.Context, it inboxItem) error {
	if se, err := rn.staleInject(ctx, it); err != nil {
		return err
	} else if se != nil {
		return rn.dropStale(ctx, it, se)
	}
	id := rn.st.TurnID // claimed with the lease, or by an invocation that died before logging anything
	if id == "" {
		c := claim{turnID: newTurnID(), seq: rn.log.last + 1, wake: it}
		if prof, err := rn.c.agentProfile(rn.profileJSON); err == nil {
			c.rules = pinnedRules(prof)
		}
		st, err := rn.c.store.claimTurn(ctx, rn.agent, rn.me, c)
		if err != nil {
			return err
		}
		rn.adopt(st)
		id = c.turnID
	}
	if rn.st.CancelAt != "" && it.key() <= rn.st.CancelAt && rn.st.CancelTurn != id {
		// A cancel sent after this wake was served before the claim: the turn the wake
		// starts is the one that cancel stops.
		st, err := rn.c.store.cancelClaimed(ctx, rn.agent, rn.me, id, rn.st.CancelAtReason)
		if err != nil {
			return err
		}
		rn.adopt(st)
	}
	if err := rn.logFire(ctx, it); err != nil {
		return err
	}
	if _, err := rn.append(ctx, TypeUserMessage, userMessage{Text: it.Text, InboxID: it.ID, TurnID: id, ScheduleID: it.ScheduleID, ClientID: it.ClientID}); err != nil {
		return err
	}
	if err := rn.crash(CrashUserMessage); err != nil {
		return err
	}
	if it.attr == "" {
		if err := rn.deleteInbox(ctx, []inboxItem{it}); err != nil {
			return err
		}
	}
	rn.dropInbox(it.ID)
	_, err := rn.append(ctx, TypeTurnStart, turnStart{TurnID: id})
	return err
}

// dropStale drops a waking inject found stale (staleInject) instead of starting a turn
// with it: its connection is answered stale first, then the turn claimed for it, if
// any, is forgotten and the inject taken off the inbox, logging nothing. A runner that
// dies in between finds it stale again (a turn/start or turn/end stays logged) and
// drops it then: the answer may come twice, the inject is never logged.
func (rn *activeRun) dropStale(ctx context.Context, it inboxItem, se *control.StaleError) error {
	rn.answerStale(ctx, it, se)
	if rn.st.TurnID != "" && rn.st.TurnKey == it.key() && !rn.log.isLogged(it.ID) {
		st, err := rn.c.store.clearTurn(ctx, rn.agent, rn.me, rn.st.TurnID)
		if err != nil {
			return err
		}
		rn.adopt(st)
	}
	if it.attr != attrTurnWake {
		if err := rn.deleteInbox(ctx, []inboxItem{it}); err != nil {
			return err
		}
	}
	rn.dropInbox(it.ID)
	return nil
}

func (rn *activeRun) dropInbox(id string) {
	kept := rn.inbox[:0]
	for _, it := range rn.inbox {
		if it.ID != id {
			kept = append(kept, it)
		}
	}
	rn.inbox = kept
}

// cancelled reports whether a cancel is recorded for turnID.
func (rn *activeRun) cancelled(turnID string) bool {
	return rn.st.CancelTurn != "" && rn.st.CancelTurn == turnID
}

// runTurn runs the open turn step by step. Each step boundary reads the state (cancel,
// models, stimuli) — but for the first when read says the state was just read; then
// the step either runs the tool calls the log owes, or drains the inbox and calls the
// model — or ends the turn after a final reply. A step reads the turn from the
// window's turnView, which each appended event keeps current.
func (rn *activeRun) runTurn(ctx context.Context, read bool) (outcome, error) {
	for ; ; read = false {
		if !read {
			if err := rn.boundary(ctx); err != nil {
				return 0, err
			}
		}
		t := rn.log.turn
		if t == nil {
			return outEnded, nil
		}
		if rn.cancelled(t.turnID) {
			return rn.cancelTurn(ctx, rn.st.CancelReason)
		}
		if rn.deadlineNear(ctx) {
			return outHandover, nil
		}
		if owed := t.owed(); len(owed) > 0 {
			out, err := rn.runBatch(ctx, t, owed)
			if err != nil {
				return 0, err
			}
			switch out {
			case outContinue:
				continue
			case outCancel:
				return rn.cancelTurn(ctx, rn.st.CancelReason)
			default:
				return out, nil
			}
		}
		if err := rn.drain(ctx); err != nil {
			return 0, err
		}
		if t.last == lastFinal {
			return rn.endTurn(ctx, t, StatusCompleted, "", nil)
		}
		out, err := rn.modelStep(ctx, t)
		if err != nil || out != outContinue {
			return out, err
		}
		rn.progressed = true
	}
}

// drain logs every queued inject as context/injected (unless a dead invocation
// already did) and then deletes them. Logging before deleting, and skipping ids the
// log holds, makes each inject land exactly once.
func (rn *activeRun) drain(ctx context.Context) error {
	if len(rn.inbox) == 0 {
		return nil
	}
	if err := rn.settle(ctx); err != nil {
		return err
	}
	if err := rn.crash(CrashInboxRead); err != nil {
		return err
	}
	for _, it := range rn.inbox {
		if !rn.log.isLogged(it.ID) {
			se, err := rn.staleInject(ctx, it)
			if err != nil {
				return err
			}
			if se != nil {
				rn.answerStale(ctx, it, se) // and deleted with the others, never logged
				continue
			}
			if err := rn.logFire(ctx, it); err != nil {
				return err
			}
			if _, err := rn.append(ctx, TypeContextInjected, contextInjected{Text: it.Text, InboxID: it.ID, ScheduleID: it.ScheduleID, ClientID: it.ClientID}); err != nil {
				return err
			}
		}
	}
	if err := rn.crash(CrashInboxLogged); err != nil {
		return err
	}
	if err := rn.deleteInbox(ctx, rn.inbox); err != nil {
		return err
	}
	rn.inbox = nil
	return nil
}

// deleteInbox takes items off the inbox (store.deleteInbox) and adopts the state item
// when that wrote it.
func (rn *activeRun) deleteInbox(ctx context.Context, items []inboxItem) error {
	st, wrote, err := rn.c.store.deleteInbox(ctx, rn.agent, items)
	if err != nil {
		return err
	}
	if wrote {
		rn.adopt(st)
	}
	return nil
}

// DrainSettle is how long after its receipt a queued steer waits before it is drained:
// the frames a client sent just before it may still be on their way through their own
// handlers (API Gateway runs them concurrently), and a drain that took this steer
// without them would log them after it. Only a drain whose newest item is this fresh
// waits, and by at most this much (one more inbox read).
const DrainSettle = 300 * time.Millisecond

// settle waits until the newest queued inject is DrainSettle old, then reads the inbox
// again, so that injects received before it and still being handled are drained with it,
// in receive order.
func (rn *activeRun) settle(ctx context.Context) error {
	var newest int64
	for _, it := range rn.inbox {
		if ms, err := strconv.ParseInt(strings.SplitN(it.ID, "-", 2)[0], 10, 64); err == nil && ms < 1e13 {
			newest = max(newest, ms)
		}
	}
	wait := min(time.Until(time.UnixMilli(newest).Add(DrainSettle)), DrainSettle)
	if newest == 0 || wait <= 0 {
		return nil
	}
	if err := sleep(ctx, wait); err != nil {
		return err
	}
	items, _, err := rn.c.store.inbox(ctx, rn.agent)
	if err != nil {
		return err
	}
	rn.setInbox(items)
	return nil
}

// modelStep makes one model call: its text streams into assistant/chunk events, its
// tool calls become tool/call events (their results are owed to the next boundary),
// and a refusal, an empty answer or a failure ends the turn.
func (rn *activeRun) modelStep(ctx context.Context, t *turnView) (outcome, error) {
	sm, reason := rn.resolveModel()
	if reason != "" {
		return rn.endTurn(ctx, t, StatusFailed, reason, nil)
	}
	s, out, err := rn.streamStep(ctx, t, sm)
	if s == nil {
		return out, err
	}
	t, resp, ch := s.t, s.resp, s.ch
	usage := &modelUsage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens}
	refused := model.IsRefusal(resp.StopReason)
	var calls []model.ToolCall
	if !refused {
		calls = resp.ToolCalls
	}
	hasText := ch.wrote()
	if err := ch.finish(usage); err != nil {
		return 0, err
	}
	usageLogged, err := rn.logToolCalls(ctx, t, calls, usage, hasText)
	if err != nil {
		return 0, err
	}
	var extra *modelUsage
	if !usageLogged {
		extra = usage
	}
	if status, reason := stepEnding(resp, refused, hasText, len(calls)); status != "" {
		return rn.endTurn(ctx, t, status, reason, extra)
	}
	return outContinue, nil
}

// stepModel is the model a step calls, and what the call needs: the agent's profile,
// the model's spec and the tools offered.
type stepModel struct {
	prof  tools.Profile
	spec  string
	m     model.Model
	tools []model.ToolSpec
}

// resolveModel resolves the agent's main model and its tools; when that fails, it
// returns the reason the turn fails with.
func (rn *activeRun) resolveModel() (stepModel, string) {
	prof, set, err := rn.toolset()
	if err != nil {
		return stepModel{}, err.Error()
	}
	spec := rn.c.modelSpec(rn.st, prof, RoleMain)
	models, err := rn.c.modelsOf(prof)
	if err != nil {
		return stepModel{}, "model " + spec + ": " + err.Error()
	}
	m, err := models.Resolve(spec)
	if err != nil {
		return stepModel{}, "model " + spec + ": " + err.Error()
	}
	var toolSpecs []model.ToolSpec
	for _, d := range set.Definitions() {
		toolSpecs = append(toolSpecs, model.ToolSpec{Name: d.Name, Description: d.Description, Schema: d.Schema})
	}
	return stepModel{prof: prof, spec: spec, m: m, tools: toolSpecs}, ""
}

// streamed is a model call's answer, its text streamed into the log by ch; t is the
// open turn as the step's compaction left it.
type streamed struct {
	t    *turnView
	resp model.Response
	ch   *chunker
}

// streamStep fits the history to the model's budget and streams one model call. A
// call refused as too long, before it streamed anything, is retried once after
// compacting. It returns the answer, or nil and the step's outcome when the turn ended
// instead (failed, rejected by the budget or the quota, or ended meanwhile).
func (rn *activeRun) streamStep(ctx context.Context, t *turnView, sm stepModel) (*streamed, outcome, error) {
	end := func(status, reason string) (*streamed, outcome, error) {
		out, err := rn.endTurn(ctx, t, status, reason, nil)
		return nil, out, err
	}
	prof, spec := sm.prof, sm.spec
	limit := budget(prof, spec)
	fixed := fixedTokens(model.Request{System: prof.System, Tools: sm.tools})
	var ch *chunker
	var resp model.Response
	var err error
	refusal := "" // the provider's first context-length refusal of this step
	for attempt := 0; ; attempt++ {
		// Over the budget — or, on the retry, refused as too long — the history is
		// compacted first.
		if err := rn.fitContext(ctx, prof, limit, fixed, attempt > 0); err != nil {
			switch {
			case errors.Is(err, errNothingToCompact) && attempt == 0:
				// All of it is the current step: send it, the provider decides.
			case errors.Is(err, errNothingToCompact):
				return end(StatusFailed, "model "+spec+": the current step alone is longer than the model's context window: "+refusal)
			case errors.Is(err, errCompaction):
				return end(StatusFailed, err.Error())
			case errors.Is(err, errQuota):
				if t = rn.log.turn; t == nil {
					return nil, outEnded, nil
				}
				return end(StatusRejected, err.Error())
			default:
				return nil, 0, err
			}
		}
		if t = rn.log.turn; t == nil {
			return nil, outEnded, nil
		}
		v := rn.log.view()
		compactedSeq := int64(-1)
		if c := rn.log.compacted; c != nil {
			compactedSeq = c.seq
		}
		if reason := rn.spendReason(prof, nil, 0, fixed+v.tokens(fixed, compactedSeq)); reason != "" {
			return end(StatusRejected, reason)
		}
		req := model.Request{System: withSummary(prof.System, v.summary), Messages: history(v.evs), Tools: sm.tools}
		ch = &chunker{
			write:      rn.pauseAfter(PauseChunk, func(c assistantChunk) error { _, err := rn.append(ctx, TypeAssistantChunk, c); return err }),
			now:        rn.c.now,
			flushBytes: rn.c.cfg.ChunkBytes,
			flushAge:   rn.c.cfg.ChunkInterval,
		}
		began := rn.c.now()
		resp, err = sm.m.Stream(ctx, req, ch.delta)
		if ctx.Err() == nil {
			meterModel(rn.c.modelDims(prof, spec), rn.c.now().Sub(began), resp.Usage, err)
		}
		if ch.err != nil {
			return nil, 0, ch.err
		}
		if err != nil && ctx.Err() == nil && model.IsContextLength(err) && !ch.wrote() {
			if attempt == 0 {
				refusal = err.Error()
				continue // compact and retry the step, once
			}
			return end(StatusFailed, "model "+spec+": refused as too long again after compaction: "+err.Error())
		}
		break
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		if aerr := ch.abort(); aerr != nil {
			return nil, 0, aerr
		}
		return end(StatusFailed, err.Error())
	}
	if !ch.wrote() && resp.Text != "" {
		if err := ch.delta(model.Delta{Text: resp.Text}); err != nil {
			return nil, 0, err
		}
	}
	return &streamed{t: t, resp: resp, ch: ch}, 0, nil
}

// logToolCalls logs a step's tool calls as tool/call events, each with an id unique in
// the turn t, the step's usage on the first when the step's text did not carry it
// (usageLogged). It reports whether the usage is logged now.
func (rn *activeRun) logToolCalls(ctx context.Context, t *turnView, calls []model.ToolCall, usage *modelUsage, usageLogged bool) (bool, error) {
	ids := map[string]bool{}
	for _, c := range t.calls {
		ids[c.ID] = true
	}
	for _, tc := range calls {
		id, _ := boundText(tc.ID, 256)
		if id == "" || ids[id] {
			id = "call_" + randomHex(6) // provider ids are not unique; a turn's must be
		}
		ids[id] = true
		name, _ := boundText(tc.Name, 256)
		args, argsErr, truncated := boundArgs(tc.Args)
		ev := toolCall{ID: id, Name: name, Args: args, ArgsError: argsErr, Truncated: truncated}
		if !usageLogged {
			ev.Usage, usageLogged = usage, true
		}
		if _, err := rn.append(ctx, TypeToolCall, ev); err != nil {
			return false, err
		}
	}
	if len(calls) > 0 {
		if err := rn.crash(CrashToolCalls); err != nil {
			return false, err
		}
	}
	return usageLogged, nil
}

// stepEnding is how a step's answer ends the turn: a refusal rejects it, with the
// model's text or its stop reason; an answer with neither text nor tool calls leaves
// it empty. status "": the turn goes on.
func stepEnding(resp model.Response, refused, hasText bool, calls int) (status, reason string) {
	switch {
	case refused:
		reason := strings.TrimSpace(resp.Text)
		if reason == "" {
			reason = "model refused (" + resp.StopReason + ")"
		}
		return StatusRejected, reason
	case !hasText && calls == 0:
		return StatusEmpty, ""
	}
	return "", ""
}

// plan is what happens to one owed call in its run.
type plan struct {
	call    callInfo
	tool    tools.Tool // nil: not executed
	errText string     // the error result, when not executed or failed
	park    bool       // waits for a verdict
	rule    string     // the rule that decided it (JSON path), if one did
	result  json.RawMessage
}

// runBatch executes owed, the owed calls of the open step. Consecutive calls of
// parallel tools form one run and execute concurrently under one barrier; any other
// call is a run alone. Between runs the state is read again, so a cancel (or the
// deadline) is observed between runs, never inside one.
func (rn *activeRun) runBatch(ctx context.Context, t *turnView, owed []callInfo) (outcome, error) {
	prof, set, err := rn.toolset()
	var rules tools.RuleSet
	if err == nil {
		rules, err = rn.c.rulesOf(rn.turnRules(prof))
	}
	if err != nil {
		for _, c := range owed {
			if _, aerr := rn.append(ctx, TypeToolResult, toolResult{CallID: c.ID, Error: "tools unavailable"}); aerr != nil {
				return 0, aerr
			}
		}
		return rn.endTurn(ctx, t, StatusFailed, err.Error(), nil)
	}
	for i, run := range splitRuns(owed, set) {
		if i > 0 {
			if err := rn.boundary(ctx); err != nil {
				return 0, err
			}
			if rn.cancelled(t.turnID) {
				return outCancel, nil
			}
			if rn.deadlineNear(ctx) {
				return outHandover, nil
			}
		}
		policy, err := rn.policy(ctx)
		if err != nil {
			return 0, err
		}
		plans := make([]plan, len(run))
		park := false
		for j, c := range run {
			plans[j] = rn.plan(c, set, policy, rules, t)
			park = park || plans[j].park
		}
		if park {
			for _, pl := range plans {
				if pl.park && !t.requested[pl.call.ID] {
					expires, err := rn.armExpiry(ctx, pl.call.ID, set.ApprovalExpiry(pl.call.Name))
					if err != nil {
						return 0, err
					}
					if _, err := rn.append(ctx, TypeApprovalRequested, approvalRequested{CallID: pl.call.ID, Name: pl.call.Name, Args: pl.call.Args, Rule: pl.rule, ExpiresAt: expires}); err != nil {
						return 0, err
					}
				}
			}
			if err := rn.crash(CrashParked); err != nil {
				return 0, err
			}
			return outParked, nil
		}
		rn.c.pause(PauseRun, rn.agent)
		execute(tools.WithAgent(ctx, rn.agent), plans)
		if ctx.Err() != nil {
			return 0, ctx.Err() // abandoned mid-run: the calls stay owed and run again on resume
		}
		meterTools(plans)
		if err := rn.crash(CrashToolRun); err != nil {
			return 0, err
		}
		for _, pl := range plans {
			if _, err := rn.append(ctx, TypeToolResult, resultOf(pl)); err != nil {
				return 0, err
			}
		}
		rn.progressed = true
	}
	return outContinue, nil
}

// splitRuns cuts calls into maximal runs of consecutive parallel calls; every other
// call (serial, or of an unknown tool) is a run of its own.
func splitRuns(calls []callInfo, set *tools.Set) [][]callInfo {
	var runs [][]callInfo
	parallelRun := false
	for _, c := range calls {
		par := false
		if t, ok := set.Lookup(c.Name); ok {
			par = t.Definition().Concurrency == tools.Parallel
		}
		if par && parallelRun {
			runs[len(runs)-1] = append(runs[len(runs)-1], c)
			continue
		}
		runs = append(runs, []callInfo{c})
		parallelRun = par
	}
	return runs
}

// plan decides one call: refused (bad arguments, unknown tool, outside the policy,
// denied by a rule, denied), parked for a verdict, or executed. After the allow list
// the first matching rule decides, else the tool entry's default_effect, else the
// tool's needs_approval: an allow runs the call without asking.
func (rn *activeRun) plan(c callInfo, set *tools.Set, policy tools.Policy, rules tools.RuleSet, turn *turnView) plan {
	pl := plan{call: c}
	t, ok := set.Lookup(c.Name)
	if c.ArgsError == "" && ok && policy.Allows(c.Name) {
		d := ruleDecision(rules, set, c)
		pl.rule = d.Rule
		switch d.Effect {
		case tools.EffectDeny:
			pl.errText = ruleDeniedText(d)
			return pl
		case tools.EffectAsk:
			if !rn.c.cfg.Approvals {
				pl.errText = ruleDeniedText(d) + ": " + ErrTextRuleAsk
				return pl
			}
			return rn.verdict(pl, t, turn)
		case tools.EffectAllow:
			pl.tool = t
			return pl
		}
	}
	switch {
	case c.ArgsError != "":
		pl.errText = c.ArgsError
	case !ok:
		pl.errText = ErrTextUnknown + ": " + c.Name
	case !policy.Allows(c.Name):
		pl.errText = ErrTextPolicy
	case rn.c.cfg.Approvals && t.Definition().NeedsApproval:
		return rn.verdict(pl, t, turn)
	default:
		pl.tool = t
	}
	return pl
}

// verdict plans a call that needs a verdict: parked until one is logged, then run or
// denied.
func (rn *activeRun) verdict(pl plan, t tools.Tool, turn *turnView) plan {
	v, decided := turn.verdicts[pl.call.ID]
	switch {
	case !decided:
		pl.park = true
	case v.Verdict == VerdictApproved:
		pl.tool = t
	default:
		pl.errText = deniedText(v.Reason)
	}
	return pl
}

func deniedText(reason string) string {
	if reason == "" {
		return ErrTextDenied
	}
	return ErrTextDenied + ": " + reason
}

// execute runs the plans' tools concurrently and waits for all of them.
func execute(ctx context.Context, plans []plan) {
	var wg sync.WaitGroup
	for i := range plans {
		if plans[i].tool == nil {
			continue
		}
		wg.Add(1)
		go func(pl *plan) {
			defer wg.Done()
			pl.result, pl.errText = callTool(ctx, pl.tool, pl.call.Args)
		}(&plans[i])
	}
	wg.Wait()
}

func callTool(ctx context.Context, t tools.Tool, args json.RawMessage) (result json.RawMessage, errText string) {
	defer func() {
		if r := recover(); r != nil {
			result, errText = nil, fmt.Sprintf("tool %s panicked", t.Definition().Name)
		}
	}()
	res, err := t.Call(ctx, args)
	if err != nil {
		if errText = err.Error(); errText == "" {
			errText = "tool failed"
		}
		return nil, errText
	}
	return res, ""
}

func resultOf(pl plan) toolResult {
	if pl.errText != "" {
		text, cut := boundText(pl.errText, MaxErrorBytes)
		return toolResult{CallID: pl.call.ID, Error: text, Truncated: cut, Rule: pl.rule}
	}
	res, cut := boundResult(pl.result)
	return toolResult{CallID: pl.call.ID, Result: res, Truncated: cut, Rule: pl.rule}
}

// cancelTurn stops the open turn: standing approval requests are denied with reason,
// every owed call gets an error result (it never runs), and turn/end is cancelled.
func (rn *activeRun) cancelTurn(ctx context.Context, reason string) (outcome, error) {
	t := rn.log.turn
	for _, id := range t.standing() {
		if err := rn.c.resolveVerdict(ctx, rn.agent, rn.log, id, VerdictDenied, reason); err != nil && !errors.Is(err, ErrStaleCall) {
			return 0, err
		}
	}
	if t = rn.log.turn; t == nil { // a verdict read in an event that ended it
		return outEnded, nil
	}
	for _, c := range t.owed() {
		text := ErrTextCancelled
		if v, ok := t.verdicts[c.ID]; ok && v.Verdict == VerdictDenied {
			text = deniedText(v.Reason)
		}
		if _, err := rn.append(ctx, TypeToolResult, toolResult{CallID: c.ID, Error: text}); err != nil {
			return 0, err
		}
	}
	return rn.endTurn(ctx, t, StatusCancelled, reason, nil)
}

// endTurn appends turn/end with the turn's usage — summed from the log, plus extra
// for a model call no event carries — then meters and clears the turn.
func (rn *activeRun) endTurn(ctx context.Context, p *turnView, status, reason string, extra *modelUsage) (outcome, error) {
	u := p.usage
	if extra != nil {
		u.InputTokens += extra.InputTokens
		u.OutputTokens += extra.OutputTokens
		u.ModelCalls++
	}
	if !p.startAt.IsZero() {
		u.WallMS = max(0, rn.c.now().Sub(p.startAt).Milliseconds())
	}
	reason, _ = boundText(reason, MaxReasonBytes)
	if status == StatusFailed {
		// The console's (and CloudWatch's) one line about a failed turn; reason is
		// safe to log (model and tool errors carry no credentials).
		rn.c.logger.ErrorContext(ctx, "turn failed", "agent_id", rn.agent, "turn_id", p.turnID, "reason", reason)
	}
	if _, err := rn.append(ctx, TypeTurnEnd, turnEnd{TurnID: p.turnID, Status: status, Reason: reason, Usage: &u}); err != nil {
		return 0, err
	}
	meterTurn(status)
	if err := rn.crash(CrashTurnEnded); err != nil {
		return 0, err
	}
	return outEnded, nil // reconcile finishes the turn, from its turn/end
}

// finishTurn meters the ended turn and clears it from the state item, then names the
// session if it has no title yet.
func (rn *activeRun) finishTurn(ctx context.Context, turnID string, u TurnUsage) error {
	st, err := rn.c.store.finishTurn(ctx, rn.agent, rn.me, turnID, u)
	if err != nil {
		return err
	}
	rn.adopt(st)
	rn.title(ctx)
	return nil
}

const titlerSystem = "Reply with a short title, at most eight words, for a conversation that begins with the user's message. Reply with the title only."

// title asks the titler model to name the session after its first turn and appends
// session/titled. Naming is best effort: on failure it is tried after the next turn.
func (rn *activeRun) title(ctx context.Context) {
	log := rn.c.logger.With("agent_id", rn.agent)
	first, titled, err := rn.log.firstMessage(ctx)
	if err != nil {
		log.WarnContext(ctx, "titler input", "error", err.Error())
		return
	}
	if titled {
		return
	}
	prof, err := rn.c.agentProfile(rn.profileJSON)
	if err != nil {
		log.WarnContext(ctx, "titler profile", "error", err.Error())
		return
	}
	spec := rn.c.modelSpec(rn.st, prof, RoleTitler)
	month := prof // the titler's call is no turn's: only the month's cap applies
	month.Quotas.TurnTokens, month.Quotas.TurnModelCalls = 0, 0
	if spec != model.SpecScripted && rn.spendReason(month, nil, 0, model.EstimateTokens(len(titlerSystem)+len(first))) != "" {
		// Over the month's tokens: the session is named after its first message, with
		// no model call.
		spec = model.SpecScripted
	}
	if spec == model.SpecScripted {
		// The scripted titler names the session after its first message, without a
		// model call: a script meant for the main model must not run here.
		if _, err := rn.append(ctx, TypeSessionTitled, sessionTitled{Title: boundTitle(first)}); err != nil {
			log.WarnContext(ctx, "append session/titled", "error", err.Error())
		}
		return
	}
	models, err := rn.c.modelsOf(prof)
	if err != nil {
		log.WarnContext(ctx, "titler model", "spec", spec, "error", err.Error())
		return
	}
	m, err := models.Resolve(spec)
	if err != nil {
		log.WarnContext(ctx, "titler model", "spec", spec, "error", err.Error())
		return
	}
	began := rn.c.now()
	resp, err := m.Stream(ctx, model.Request{System: titlerSystem, Messages: []model.Message{{Role: model.RoleUser, Text: first}}},
		func(model.Delta) error { return nil })
	meterModel(rn.c.modelDims(prof, spec), rn.c.now().Sub(began), resp.Usage, err)
	if err != nil {
		log.WarnContext(ctx, "titler call failed", "spec", spec, "error", err.Error())
		return
	}
	t := boundTitle(resp.Text)
	if t == "" {
		t = boundTitle(first)
	}
	if _, err := rn.append(ctx, TypeSessionTitled, sessionTitled{Title: t}); err != nil {
		log.WarnContext(ctx, "append session/titled", "error", err.Error())
		return
	}
	st, err := rn.c.store.addUsage(ctx, rn.agent, resp.Usage.InputTokens, resp.Usage.OutputTokens)
	if err != nil {
		log.WarnContext(ctx, "meter titler call", "error", err.Error())
		return
	}
	rn.adopt(st)
}
