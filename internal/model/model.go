// Package model is the one small streaming interface every model provider implements,
// and the registry that resolves a model spec ("scripted", "provider/model") to one.
package model

import (
	"context"
	"encoding/json"
	"errors"
)

// Errors returned by models and the registry.
var (
	ErrBadSpec         = errors.New("model: invalid model spec")
	ErrUnknownProvider = errors.New("model: unknown provider")
)

// Role of a message in the history handed to a model.
type Role string

// Roles. Tool results travel in a RoleTool message, one result per ToolResult.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of the model history, projected from the session log.
type Message struct {
	Role        Role
	Text        string
	ToolCalls   []ToolCall   // RoleAssistant only
	ToolResults []ToolResult // RoleTool only
	// Injected marks a RoleUser message projected from a context/injected event (a
	// steer drained from the inbox) rather than from a turn's waking user/message.
	// Providers send both as user text; the scripted model uses it to find the turn's
	// waking text.
	Injected bool
}

// ToolCall is a call the model asked for.
type ToolCall struct {
	ID   string
	Name string
	Args json.RawMessage // a JSON object
}

// ToolResult answers a ToolCall: Result (JSON) or Error (text), never both.
type ToolResult struct {
	CallID string
	Result json.RawMessage
	Error  string
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string
	Description string
	Schema      json.RawMessage // JSON Schema of the args object
}

// Request is one model call.
type Request struct {
	System   string
	Messages []Message
	Tools    []ToolSpec
}

// Usage counts tokens of one model call.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
}

// Delta is one streamed piece of a response: text, in the order produced.
type Delta struct {
	Text string
	// Boundary asks that the chunk being streamed end after this delta, so that the
	// runtime logs it as its own assistant/chunk event instead of coalescing it with
	// the next delta. Real providers leave it false; the scripted model sets it, since
	// its `chunks: N` promises exactly N chunk events.
	Boundary bool
}

// Stop reasons with a meaning to the runtime. A provider maps its own refusal,
// content-filter or guardrail stop to StopRefusal (the runtime also recognises the
// Bedrock and OpenAI spellings listed in IsRefusal); the turn then ends "rejected".
const (
	StopEndTurn = "end_turn"
	StopToolUse = "tool_use"
	StopRefusal = "refusal"
)

// IsRefusal reports whether stop says the model declined the request: StopRefusal,
// Bedrock's "content_filtered" and "guardrail_intervened", OpenAI's "content_filter".
func IsRefusal(stop string) bool {
	switch stop {
	case StopRefusal, "content_filtered", "guardrail_intervened", "content_filter":
		return true
	}
	return false
}

// Response is the complete result of one model call. A response with no text and no
// tool calls means the model had nothing to say.
type Response struct {
	Text       string
	ToolCalls  []ToolCall
	StopReason string
	Usage      Usage
}

// Model streams one response. onDelta is called for each text delta as it arrives; an
// error from onDelta aborts the call and is returned. Stream returns the complete
// response, or an error if the call failed (the message is safe to log durably: it
// must not carry credentials).
type Model interface {
	Stream(ctx context.Context, req Request, onDelta func(Delta) error) (Response, error)
}

// Provider builds models of one provider ("bedrock", "openai", …) by model name.
type Provider interface {
	Model(name string) (Model, error)
}
