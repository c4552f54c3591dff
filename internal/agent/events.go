package agent

import "encoding/json"

// Durable event types the runtime appends (docs/events.md describes each).
const (
	TypeUserMessage       = "user/message"
	TypeContextInjected   = "context/injected"
	TypeTurnStart         = "turn/start"
	TypeTurnEnd           = "turn/end"
	TypeAssistantChunk    = "assistant/chunk"
	TypeToolCall          = "tool/call"
	TypeToolResult        = "tool/result"
	TypeApprovalRequested = "approval/requested"
	TypeApprovalResolved  = "approval/resolved"
	TypePolicyUpdated     = "policy/updated"
	TypeSessionTitled     = "session/titled"
	TypeContextCompacted  = "context/compacted"
)

// Turn statuses (docs/lifecycle.md, "The status machine").
const (
	StatusCompleted = "completed"
	StatusCancelled = "cancelled"
	StatusRejected  = "rejected"
	StatusEmpty     = "empty"
	StatusFailed    = "failed"
)

// Verdicts of approval/resolved.
const (
	VerdictApproved = "approved"
	VerdictDenied   = "denied"
)

// Error texts of tool results the runtime writes itself.
const (
	ErrTextCancelled  = "cancelled before execution"
	ErrTextPolicy     = "not allowed by policy"
	ErrTextDenied     = "denied"
	ErrTextRuleDenied = "denied by rule" // followed by the rule's JSON path
	// ErrTextRuleAsk ends the error result of a call a rule parks where approvals
	// are not enabled: nothing could approve it, so it is denied.
	ErrTextRuleAsk    = "it needs an approval and approvals are not enabled here"
	ErrTextUnknown    = "unknown tool"
	ErrTextArgsTooBig = "arguments too large to log; the call was not executed"
	ErrTextArgsBad    = "arguments are not a JSON object; the call was not executed"
)

type userMessage struct {
	Text    string `json:"text"`
	InboxID string `json:"inbox_id,omitempty"`
	TurnID  string `json:"turn_id,omitempty"`
	// ScheduleID: the schedule whose fire this is (internal/schedule).
	ScheduleID string `json:"schedule_id,omitempty"`
	// ClientID is the client_id of the inject that queued the text (control.Frame).
	ClientID string `json:"client_id,omitempty"`
	// Truncated is never set now (Inject refuses text over MaxTextBytes); it stays in
	// the schema because logs written before may carry it.
	Truncated bool `json:"truncated,omitempty"`
}

type contextInjected struct {
	Text       string `json:"text"`
	InboxID    string `json:"inbox_id,omitempty"`
	ScheduleID string `json:"schedule_id,omitempty"` // as userMessage's
	Truncated  bool   `json:"truncated,omitempty"`   // as userMessage's
	ClientID   string `json:"client_id,omitempty"`   // as userMessage's
}

type turnStart struct {
	TurnID string `json:"turn_id"`
}

// TurnUsage is what one turn used, carried by its turn/end.
type TurnUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	ModelCalls   int64 `json:"model_calls"`
	ToolCalls    int64 `json:"tool_calls"`
	WallMS       int64 `json:"wall_ms"`
}

type turnEnd struct {
	TurnID string     `json:"turn_id"`
	Status string     `json:"status"`
	Reason string     `json:"reason,omitempty"`
	Usage  *TurnUsage `json:"usage,omitempty"`
}

// modelUsage is one model call's tokens, carried by the event that completes the
// call's output (its final chunk, or its first tool/call when it wrote no text).
type modelUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

type assistantChunk struct {
	Text  string      `json:"text"`
	Index int         `json:"index"`
	Final bool        `json:"final,omitempty"`
	Usage *modelUsage `json:"usage,omitempty"`
}

type toolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Args      json.RawMessage `json:"args"`
	ArgsError string          `json:"args_error,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
	Usage     *modelUsage     `json:"usage,omitempty"`
}

type toolResult struct {
	CallID    string          `json:"call_id"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     string          `json:"error,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
	Rule      string          `json:"rule,omitempty"` // the rule that decided the call, by JSON path
}

type approvalRequested struct {
	CallID string          `json:"call_id"`
	Name   string          `json:"name"`
	Args   json.RawMessage `json:"args"`
	Rule   string          `json:"rule,omitempty"` // the rule that asks, by JSON path
	// ExpiresAt is when the request is resolved as denied, reason expired, with no
	// verdict by then (the tool entry's approval.expires_in); "": never.
	ExpiresAt string `json:"expires_at,omitempty"`
}

type approvalResolved struct {
	CallID  string `json:"call_id"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
	// ClientID is the client_id of the approve or deny frame (control.Frame).
	ClientID string `json:"client_id,omitempty"`
}

type policyUpdated struct {
	Patterns []string `json:"patterns"`
	// ClientID is the client_id of the set_policy frame (control.Frame); a repeat of
	// the policy in force carries the one it repeats.
	ClientID string `json:"client_id,omitempty"`
}

type sessionTitled struct {
	Title string `json:"title"`
}

// contextCompacted is a compaction: Summary covers every event up to ThroughSeq, so
// model calls after it send the summary and the events after ThroughSeq. FromSeq is
// the first event this compaction summarised (the previous summary covers the rest);
// Usage is the compactor's calls (Calls of them), counted in the open turn's usage.
type contextCompacted struct {
	ThroughSeq int64       `json:"through_seq"`
	Summary    string      `json:"summary"`
	FromSeq    int64       `json:"from_seq"`
	Model      string      `json:"model,omitempty"`
	Usage      *modelUsage `json:"usage,omitempty"`
	Calls      int64       `json:"calls,omitempty"` // compactor model calls Usage sums
}
