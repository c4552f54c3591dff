package agent

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// decode unmarshals an event's payload; a payload of the wrong shape decodes to the
// zero value, so one odd event never wedges a turn.
func decode[T any](ev sessionlog.Event) T {
	var v T
	_ = json.Unmarshal(ev.Payload, &v)
	return v
}

// turnEndOf returns the turn/end of turnID, searching from the newest event.
func turnEndOf(events []sessionlog.Event, turnID string) (turnEnd, bool) {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type == TypeTurnEnd {
			if te := decode[turnEnd](events[i]); te.TurnID == turnID {
				return te, true
			}
		}
	}
	return turnEnd{}, false
}

// userMessageOf reports whether turnID's waking user/message is logged.
func userMessageOf(events []sessionlog.Event, turnID string) bool {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type == TypeUserMessage && decode[userMessage](events[i]).TurnID == turnID {
			return true
		}
	}
	return false
}

// lastKind is what the newest history-relevant event of the open turn is, which
// decides the turn's next move.
type lastKind int

const (
	lastInput   lastKind = iota // turn/start, user/message, context/injected, tool/result: call the model
	lastPartial                 // an unfinished model output: call the model again
	lastFinal                   // a finished text reply with no tool calls: end completed
	lastCalls                   // tool calls (owed results, if any, run first)
)

type callInfo struct {
	ID        string
	Name      string
	Args      json.RawMessage
	ArgsError string
}

type verdict struct {
	Verdict string
	Reason  string
}

// progress is the open turn as the log has it, folded event by event (add), so a step
// reads it without scanning the log again.
type progress struct {
	turnID    string
	startAt   time.Time
	calls     []callInfo
	results   map[string]bool // call ids with a tool/result
	requested map[string]bool
	// requestSeq is each approval/requested's seq (an approve's expect_seq is checked
	// against it).
	requestSeq map[string]int64
	// expiresAt is each expiring approval request's deadline.
	expiresAt map[string]time.Time
	verdicts  map[string]verdict
	last      lastKind
	usage     TurnUsage // tokens and model calls of completed model outputs
}

// newProgress starts the progress of the turn whose turn/start is start.
func newProgress(start sessionlog.Event) *progress {
	p := &progress{results: map[string]bool{}, requested: map[string]bool{}, requestSeq: map[string]int64{}, expiresAt: map[string]time.Time{}, verdicts: map[string]verdict{}, last: lastInput}
	p.turnID = decode[turnStart](start).TurnID
	p.startAt, _ = time.Parse(sessionlog.TimeFormat, start.At)
	return p
}

// add folds the next event of the turn in.
func (p *progress) add(ev sessionlog.Event) {
	switch ev.Type {
	case TypeContextInjected, TypeUserMessage:
		p.last = lastInput
	case TypeAssistantChunk:
		c := decode[assistantChunk](ev)
		if c.Final {
			p.last = lastFinal
			p.addUsage(c.Usage)
		} else {
			p.last = lastPartial
		}
	case TypeToolCall:
		c := decode[toolCall](ev)
		p.calls = append(p.calls, callInfo{ID: c.ID, Name: c.Name, Args: c.Args, ArgsError: c.ArgsError})
		p.usage.ToolCalls = int64(len(p.calls))
		p.last = lastCalls
		p.addUsage(c.Usage)
	case TypeToolResult:
		p.results[decode[toolResult](ev).CallID] = true
		p.last = lastInput
	case TypeContextCompacted:
		if c := decode[contextCompacted](ev); c.Usage != nil { // the compactor's calls, the turn's too
			p.usage.InputTokens += c.Usage.InputTokens
			p.usage.OutputTokens += c.Usage.OutputTokens
			p.usage.ModelCalls += max(c.Calls, 1)
		}
	case TypeApprovalRequested:
		req := decode[approvalRequested](ev)
		id := req.CallID
		p.requested[id] = true
		if at, err := time.Parse(sessionlog.TimeFormat, req.ExpiresAt); err == nil {
			p.expiresAt[id] = at
		}
		if _, ok := p.requestSeq[id]; !ok {
			p.requestSeq[id] = ev.Seq
		}
	case TypeApprovalResolved:
		r := decode[approvalResolved](ev)
		if p.requested[r.CallID] {
			if _, dup := p.verdicts[r.CallID]; !dup {
				p.verdicts[r.CallID] = verdict{Verdict: r.Verdict, Reason: r.Reason}
			}
		}
	}
}

// owed returns the calls without a result, in log order.
func (p *progress) owed() []callInfo {
	var out []callInfo
	for _, c := range p.calls {
		if !p.results[c.ID] {
			out = append(out, c)
		}
	}
	return out
}

// standing returns the calls with an approval request and no verdict.
func (p *progress) standing() []string {
	var out []string
	for _, c := range p.calls {
		if p.stands(c.ID) {
			out = append(out, c.ID)
		}
	}
	return out
}

// stands reports whether callID has a standing approval request: requested, and not
// resolved.
func (p *progress) stands(callID string) bool {
	if !p.requested[callID] {
		return false
	}
	_, resolved := p.verdicts[callID]
	return !resolved
}

// progressOf reads the open turn starting at events[start] (its turn/start).
func progressOf(events []sessionlog.Event, start int) *progress {
	p := newProgress(events[start])
	for _, ev := range events[start+1:] {
		p.add(ev)
	}
	return p
}

func (p *progress) addUsage(u *modelUsage) {
	if u == nil {
		return
	}
	p.usage.InputTokens += u.InputTokens
	p.usage.OutputTokens += u.OutputTokens
	p.usage.ModelCalls++
}

// history projects the log into the model's messages: user/message and
// context/injected are user messages (the latter marked Injected); the chunks of one
// model output, concatenated, are an assistant message, carrying the tool/call events
// that follow it; consecutive tool/result events are one tool message. A model output
// that never finished (no chunk with final) is left out: the model is asked again.
func history(events []sessionlog.Event) []model.Message {
	var msgs []model.Message
	var buf strings.Builder
	assistant := -1 // the message tool calls attach to, while no other message followed
	for _, ev := range events {
		switch ev.Type {
		case TypeUserMessage:
			msgs = append(msgs, model.Message{Role: model.RoleUser, Text: decode[userMessage](ev).Text})
			assistant = -1
		case TypeContextInjected:
			msgs = append(msgs, model.Message{Role: model.RoleUser, Text: decode[contextInjected](ev).Text, Injected: true})
			assistant = -1
		case TypeAssistantChunk:
			c := decode[assistantChunk](ev)
			if c.Index == 0 {
				buf.Reset()
			}
			buf.WriteString(c.Text)
			if c.Final {
				msgs = append(msgs, model.Message{Role: model.RoleAssistant, Text: buf.String()})
				assistant = len(msgs) - 1
				buf.Reset()
			}
		case TypeToolCall:
			c := decode[toolCall](ev)
			if assistant < 0 {
				msgs = append(msgs, model.Message{Role: model.RoleAssistant})
				assistant = len(msgs) - 1
			}
			msgs[assistant].ToolCalls = append(msgs[assistant].ToolCalls, model.ToolCall{ID: c.ID, Name: c.Name, Args: c.Args})
		case TypeToolResult:
			r := decode[toolResult](ev)
			tr := model.ToolResult{CallID: r.CallID, Result: r.Result, Error: r.Error}
			if n := len(msgs); n > 0 && msgs[n-1].Role == model.RoleTool {
				msgs[n-1].ToolResults = append(msgs[n-1].ToolResults, tr)
			} else {
				msgs = append(msgs, model.Message{Role: model.RoleTool, ToolResults: []model.ToolResult{tr}})
			}
			assistant = -1
		case TypeTurnEnd:
			buf.Reset()
			assistant = -1
		}
	}
	return msgs
}
