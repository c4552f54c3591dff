package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
)

// The model's context (docs/lifecycle.md, "Compaction"). A model call sends the system
// prompt, the newest summary (context/compacted) and the events after the summary's
// through_seq. When those would exceed the budget (profile field context.budget_tokens,
// else model.BudgetFor the main model), the runner first compacts: the compactor model
// summarises the oldest events, a slice at a time (previous summary plus the next
// slice, each request within the budget), and each summary is logged as
// context/compacted before the step's model call. The log itself never changes.

// errNothingToCompact: the history over the budget is all the open turn's current
// step (or a single unit), which compaction never cuts.
var errNothingToCompact = errors.New("agent: nothing to compact")

// summaryIntro introduces the summary in the system prompt of a model call.
const summaryIntro = "\n\nSummary of the conversation so far (earlier messages are not repeated):\n"

const compactorSystem = "You maintain the running summary of a long conversation between a user and an AI agent that uses tools. " +
	"You are given the previous summary (possibly empty) and the next part of the conversation. Reply with the new summary only: " +
	"keep every fact, decision, open question, name, number and tool outcome the agent may need later; drop pleasantries. " +
	"Write at most %d words."

// contextView is what a model call sends besides the system prompt and tools: the
// newest summary and the events after the seq it covers — folded ones (histfold.go)
// below the window's start, then the window's own.
type contextView struct {
	summary string
	through int64 // -1: no summary
	evs     []sessionlog.Event
	weights map[int64]foldWeight // the folded events' shares of the budget, by seq
}

// view is the window's model context. The window, with the history folded below its
// start, holds every event after through (the checkpoint's floor is at most
// through+1).
func (w *logWindow) view() contextView {
	v := contextView{through: -1, weights: w.weights}
	if c := w.compacted; c != nil {
		v.summary, v.through = c.Summary, c.ThroughSeq
	}
	var hist []sessionlog.Event
	for i, ev := range w.hist {
		if ev.Seq > v.through {
			hist = w.hist[i:]
			break
		}
	}
	for i, ev := range w.evs {
		if ev.Seq > v.through {
			v.evs = w.evs[i:]
			break
		}
	}
	if len(hist) > 0 {
		v.evs = append(hist[:len(hist):len(hist)], v.evs...)
	}
	return v
}

// tok is ev's share of the budget: eventTokens, or a folded event's share.
func (v contextView) tok(ev sessionlog.Event) int64 {
	if fw, ok := v.weights[ev.Seq]; ok && ev.ID == "" {
		return fw.w
	}
	return eventTokens(ev)
}

// own is the share of ev alone, without the events folded into it.
func (v contextView) own(ev sessionlog.Event) int64 {
	if fw, ok := v.weights[ev.Seq]; ok && ev.ID == "" && fw.l > 0 {
		return fw.l
	}
	return v.tok(ev)
}

// eventTokens is an event's share of the history budget: an estimate of its payload
// (model.EstimateTokens of its JSON bytes) for the events the history carries, one
// token for any other, so that even a stretch of events the model never sees ends in
// a compaction (and the window the runner reads stays bounded).
func eventTokens(ev sessionlog.Event) int64 {
	switch ev.Type {
	case TypeUserMessage, TypeContextInjected, TypeAssistantChunk, TypeToolCall, TypeToolResult:
		return model.EstimateTokens(len(ev.Payload)) + 1
	}
	return 1
}

// usageOf is the model usage an event carries (a final chunk, a tool call).
func usageOf(ev sessionlog.Event) *modelUsage {
	switch ev.Type {
	case TypeAssistantChunk:
		if c := decode[assistantChunk](ev); c.Final {
			return c.Usage
		}
	case TypeToolCall:
		return decode[toolCall](ev).Usage
	}
	return nil
}

// tokens is the history's size in tokens. Where a model call made after the newest
// compaction reported its input tokens, they count (less the estimate of the system
// prompt and tools, counted apart), plus the estimate of the events after the one that
// carries them; else the estimate of every event.
func (v contextView) tokens(fixed int64, compactedSeq int64) int64 {
	var total, since int64
	var reported int64 = -1
	for _, ev := range v.evs {
		t := v.tok(ev)
		total += t
		since += t
		if u := usageOf(ev); u != nil && u.InputTokens > 0 && ev.Seq > compactedSeq {
			reported, since = max(0, u.InputTokens-fixed), v.own(ev)
		}
	}
	if reported >= 0 {
		return reported + since + model.EstimateTokens(len(v.summary))
	}
	return total + model.EstimateTokens(len(v.summary))
}

// stepStart is the seq of the first event of the open turn's current step — the newest
// input (user/message, context/injected) or the start of the newest model output with
// whatever followed it — which compaction never cuts. MaxInt64 when there is none.
func stepStart(evs []sessionlog.Event) int64 {
	prevOutput := false
	start := int64(1<<63 - 1)
	for _, ev := range evs {
		switch ev.Type {
		case TypeUserMessage, TypeContextInjected:
			start, prevOutput = ev.Seq, false
		case TypeAssistantChunk:
			if decode[assistantChunk](ev).Index == 0 && !prevOutput {
				start = ev.Seq
			}
			prevOutput = true
		case TypeToolCall:
			if !prevOutput {
				start = ev.Seq
			}
			prevOutput = true
		case TypeToolResult, TypeTurnEnd:
			prevOutput = false
		}
	}
	return start
}

// protect is the first seq compaction keeps: the open turn's first event while the
// turn takes at most half the budget (so the turn's own messages, its waking text
// above all, stay whole), else the start of its current step (stepStart).
func (rn *activeRun) protect(v contextView, limit int64) int64 {
	evs := v.evs
	step := stepStart(evs)
	t := rn.log.turn
	if t == nil {
		return step
	}
	start := t.seq
	if rn.st.TurnID == t.turnID && rn.st.TurnSeq < start {
		start = rn.st.TurnSeq
	}
	var turn int64
	for _, ev := range evs {
		if ev.Seq >= start {
			turn += v.tok(ev)
		}
	}
	if turn <= limit/2 {
		return min(step, start)
	}
	return step
}

// cuts are the seqs below protect after which the history may be cut: every tool/call
// at or before it has its tool/result at or before it, and it is not inside a model
// output (a chunk not final, or a final chunk whose tool calls follow).
func cuts(evs []sessionlog.Event, protect int64) []int64 {
	open := map[string]bool{}
	var out []int64
	for i, ev := range evs {
		if ev.Seq >= protect {
			break
		}
		switch ev.Type {
		case TypeToolCall:
			open[decode[toolCall](ev).ID] = true
			continue
		case TypeToolResult:
			delete(open, decode[toolResult](ev).CallID)
		case TypeAssistantChunk:
			if !decode[assistantChunk](ev).Final {
				continue
			}
			if next := nextHistory(evs[i+1:]); next != nil && next.Type == TypeToolCall {
				continue
			}
		}
		if len(open) == 0 {
			out = append(out, ev.Seq)
		}
	}
	return out
}

func nextHistory(evs []sessionlog.Event) *sessionlog.Event {
	for i := range evs {
		switch evs[i].Type {
		case TypeUserMessage, TypeContextInjected, TypeAssistantChunk, TypeToolCall, TypeToolResult:
			return &evs[i]
		}
	}
	return nil
}

// budget is the history budget of the agent's main model spec.
func budget(prof tools.Profile, spec string) int64 {
	if b := prof.Context.BudgetTokens; b > 0 {
		return b
	}
	return model.BudgetFor(spec)
}

// fitContext compacts the history until it fits limit tokens, or — force, after the
// provider refused the step as too long — until it is at most half its size. fixed is
// the estimate of the system prompt and tools. It returns errNothingToCompact when no
// cut can shrink it. Cost per compactor call: the call's tokens (counted in the turn's
// usage), and one append of context/compacted (1 write unit per KB of summary).
func (rn *activeRun) fitContext(ctx context.Context, prof tools.Profile, limit, fixed int64, force bool) error {
	v := rn.log.view()
	compactedSeq := int64(-1)
	if c := rn.log.compacted; c != nil {
		compactedSeq = c.seq
	}
	size := v.tokens(fixed, compactedSeq)
	if !force && size <= limit {
		return nil
	}
	if force {
		// The provider's window is below size: half of it makes the summaries'
		// requests and the rest fit.
		limit = min(limit, max(size/2, 256))
	}
	tail := limit / 2
	cs := cuts(v.evs, rn.protect(v, limit))
	if len(cs) == 0 {
		return errNothingToCompact
	}
	// The cut: the first after which the rest fits the tail, else the last there is.
	target := cs[len(cs)-1]
	after := make(map[int64]int64, len(v.evs)) // tokens of the events after each seq
	var sum int64
	for i := len(v.evs) - 1; i >= 0; i-- {
		after[v.evs[i].Seq] = sum
		sum += v.tok(v.evs[i])
	}
	for _, c := range cs {
		if after[c] <= tail {
			target = c
			break
		}
	}
	isCut := make(map[int64]bool, len(cs))
	for _, c := range cs {
		isCut[c] = true
	}
	summary := v.summary
	from := v.through + 1
	var usage *modelUsage
	var spec string
	idx, calls := 0, int64(0)
	logFrom := from
	for from <= target {
		part, end := slice(v, &idx, isCut, target, limit-model.EstimateTokens(len(summary))-256)
		if end < 0 {
			break // cannot happen: target is a cut
		}
		if rn.c.modelSpec(rn.st, prof, RoleCompactor) != model.SpecScripted {
			// The compactor's call is the turn's too: it may not pass a quota.
			var est int64
			for _, ev := range part {
				est += eventTokens(ev)
			}
			est = min(est, limit) + model.EstimateTokens(len(summary))
			if reason := rn.spendReason(prof, usage, calls, est); reason != "" {
				if calls > 0 {
					// The summaries made so far are kept, and their calls counted.
					if _, err := rn.append(ctx, TypeContextCompacted, contextCompacted{ThroughSeq: from - 1, Summary: summary, FromSeq: logFrom, Model: spec, Usage: usage, Calls: calls}); err != nil {
						return err
					}
				}
				return &quotaError{reason: reason}
			}
		}
		text, u, sp, err := rn.summarise(ctx, prof, summary, part, limit)
		if err != nil {
			return err
		}
		summary, spec = text, sp
		usage = addModelUsage(usage, u)
		if u != nil {
			calls++
		}
		// Logged once, at the end — every context/compacted stays in the runner's window
		// until the next compaction — or early when the invocation's deadline nears, so
		// that a history too long for one invocation (an agent from before compaction)
		// still gets through, an invocation at a time.
		if end == target || rn.closeToDeadline(ctx) {
			if _, err := rn.append(ctx, TypeContextCompacted, contextCompacted{ThroughSeq: end, Summary: summary, FromSeq: logFrom, Model: spec, Usage: usage, Calls: calls}); err != nil {
				return err
			}
			if err := rn.crash(CrashCompacted); err != nil {
				return err
			}
			usage, calls, logFrom = nil, 0, end+1
		}
		from = end + 1
	}
	return nil
}

// closeToDeadline reports whether less than the handover margin is left.
func (rn *activeRun) closeToDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < min(rn.c.cfg.DeadlineMargin, rn.budget/2)
}

func addModelUsage(a, b *modelUsage) *modelUsage {
	if b == nil {
		return a
	}
	if a == nil {
		return &modelUsage{InputTokens: b.InputTokens, OutputTokens: b.OutputTokens}
	}
	return &modelUsage{InputTokens: a.InputTokens + b.InputTokens, OutputTokens: a.OutputTokens + b.OutputTokens}
}

// slice takes the next events of evs from *idx up to a cut — as many as fit room
// tokens, but at least up to the next cut (a unit too large alone is shown truncated
// by render) — and returns them with the seq of that cut. target is a cut.
func slice(v contextView, idx *int, isCut map[int64]bool, target, room int64) ([]sessionlog.Event, int64) {
	evs := v.evs
	room = max(room, 256)
	begin := *idx
	var used int64
	end, endIdx := int64(-1), begin
	for i := begin; i < len(evs) && evs[i].Seq <= target; i++ {
		used += v.tok(evs[i])
		if !isCut[evs[i].Seq] {
			continue
		}
		if used > room && end >= 0 {
			break
		}
		end, endIdx = evs[i].Seq, i+1
		if used >= room {
			break
		}
	}
	*idx = endIdx
	return evs[begin:endIdx], end
}

// summarise asks the compactor model (role compactor, else the main model) for the
// summary of prev followed by slice, at most about a quarter of the budget. The
// scripted compactor writes a deterministic summary without a model call.
func (rn *activeRun) summarise(ctx context.Context, prof tools.Profile, prev string, slice []sessionlog.Event, limit int64) (string, *modelUsage, string, error) {
	maxBytes := int(max(limit, 256)) // about limit/4 tokens
	spec := rn.c.modelSpec(rn.st, prof, RoleCompactor)
	transcript := render(slice, maxBytes*3)
	if spec == model.SpecScripted {
		return scriptedSummary(prev, slice, maxBytes), nil, spec, nil
	}
	models, err := rn.c.modelsOf(prof)
	if err != nil {
		return "", nil, spec, fmt.Errorf("%w: compactor %s: %v", errCompaction, spec, err)
	}
	m, err := models.Resolve(spec)
	if err != nil {
		return "", nil, spec, fmt.Errorf("%w: compactor %s: %v", errCompaction, spec, err)
	}
	var in strings.Builder
	in.WriteString("Previous summary:\n")
	if prev == "" {
		in.WriteString("(none)\n")
	} else {
		in.WriteString(prev + "\n")
	}
	in.WriteString("\nNext part of the conversation:\n" + transcript)
	req := model.Request{System: fmt.Sprintf(compactorSystem, maxBytes/6), Messages: []model.Message{{Role: model.RoleUser, Text: in.String()}}}
	began := rn.c.now()
	resp, err := m.Stream(ctx, req, func(model.Delta) error { return nil })
	meterModel(rn.c.modelDims(prof, spec), rn.c.now().Sub(began), resp.Usage, err)
	if err != nil {
		if ctx.Err() != nil {
			return "", nil, spec, ctx.Err()
		}
		return "", nil, spec, fmt.Errorf("%w: compactor %s: %v", errCompaction, spec, err)
	}
	text, _ := boundText(strings.TrimSpace(resp.Text), maxBytes)
	if text == "" {
		return "", nil, spec, fmt.Errorf("%w: compactor %s returned no summary", errCompaction, spec)
	}
	return text, &modelUsage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens}, spec, nil
}

// errCompaction: the compactor failed; the turn fails with the reason.
var errCompaction = errors.New("context compaction failed")

// render writes events as a plain transcript for the compactor, each event's text
// bounded, the whole at most maxBytes (its middle cut out when longer).
func render(evs []sessionlog.Event, maxBytes int) string {
	var b strings.Builder
	var out strings.Builder // the current model output's text
	flush := func() {
		if out.Len() > 0 {
			t, _ := boundText(out.String(), 4000)
			b.WriteString("assistant: " + t + "\n")
			out.Reset()
		}
	}
	for _, ev := range evs {
		switch ev.Type {
		case TypeUserMessage:
			flush()
			t, _ := boundText(decode[userMessage](ev).Text, 4000)
			b.WriteString("user: " + t + "\n")
		case TypeContextInjected:
			flush()
			t, _ := boundText(decode[contextInjected](ev).Text, 4000)
			b.WriteString("user (steer): " + t + "\n")
		case TypeAssistantChunk:
			out.WriteString(decode[assistantChunk](ev).Text)
			if decode[assistantChunk](ev).Final {
				flush()
			}
		case TypeToolCall:
			flush()
			c := decode[toolCall](ev)
			a, _ := boundText(string(c.Args), 1000)
			b.WriteString("tool call " + c.Name + " " + a + "\n")
		case TypeToolResult:
			r := decode[toolResult](ev)
			res := string(r.Result)
			if r.Error != "" {
				res = "error: " + r.Error
			}
			res, _ = boundText(res, 2000)
			b.WriteString("tool result: " + res + "\n")
		}
	}
	flush()
	s := b.String()
	if len(s) > maxBytes {
		head, _ := boundText(s, maxBytes/2)
		s = head + "\n[…]\n" + s[len(s)-maxBytes/2:]
		s = strings.ToValidUTF8(s, "")
	}
	return s
}

// scriptedSummary is the scripted compactor's summary: deterministic, the previous
// summary followed by one line per message of the slice (each at most 80 bytes), the
// oldest lines dropped beyond maxBytes.
func scriptedSummary(prev string, slice []sessionlog.Event, maxBytes int) string {
	var lines []string
	if prev != "" {
		lines = strings.Split(prev, "\n")
	}
	for _, l := range strings.Split(strings.TrimSpace(render(slice, 1<<20)), "\n") {
		if l == "" {
			continue
		}
		l, _ = boundText(l, 80)
		lines = append(lines, l)
	}
	for len(lines) > 1 && len(strings.Join(lines, "\n")) > maxBytes {
		lines = lines[1:]
	}
	s := strings.Join(lines, "\n")
	s, _ = boundText(s, maxBytes)
	return s
}

// fixedTokens is the estimate of what every model call sends besides the history: the
// system prompt and the tools.
func fixedTokens(req model.Request) int64 {
	n := len(req.System)
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.Schema)
	}
	return model.EstimateTokens(n)
}

// withSummary is the system prompt of a model call after a compaction.
func withSummary(system, summary string) string {
	if summary == "" {
		return system
	}
	return system + summaryIntro + summary
}
