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
