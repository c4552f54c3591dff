package openai

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/terret/terret-ws/internal/model"
)

type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages"`
	Tools         []chatTool     `json:"tools,omitempty"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role string `json:"role"`
	// Content is null for an assistant message that only calls tools.
	Content    *string        `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string       `json:"type"`
	Function toolFunction `json:"function"`
}

type toolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// emptySchema is the parameters schema of a tool that declares none.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// body encodes req as a streaming chat-completions request. Tool results become one
// "tool" message each, carrying the result JSON as text, or {"error": TEXT}. It returns
// an error wrapping ErrInvalidRequest for an unknown role or JSON that does not parse.
func (m *Model) body(req model.Request) ([]byte, error) {
	cr := chatRequest{
		Model:         m.name,
		Stream:        true,
		StreamOptions: &streamOptions{IncludeUsage: true},
		MaxTokens:     m.p.cfg.MaxTokens,
		Temperature:   m.p.cfg.Temperature,
	}
	if req.System != "" {
		cr.Messages = append(cr.Messages, chatMessage{Role: "system", Content: ptr(req.System)})
	}
	for i, msg := range req.Messages {
		msgs, err := messagesOf(msg)
		if err != nil {
			return nil, fmt.Errorf("%w: model %s: message %d: %v", ErrInvalidRequest, m.name, i, err)
		}
		cr.Messages = append(cr.Messages, msgs...)
	}
	for _, spec := range req.Tools {
		schema, err := compactJSON(spec.Schema)
		if err != nil {
			return nil, fmt.Errorf("%w: model %s: tool %s: schema: %v", ErrInvalidRequest, m.name, spec.Name, err)
		}
		if schema == nil {
			schema = emptySchema
		}
		cr.Tools = append(cr.Tools, chatTool{Type: "function", Function: toolFunction{
			Name: spec.Name, Description: spec.Description, Parameters: schema,
		}})
	}
	b, err := json.Marshal(cr)
	if err != nil {
		return nil, fmt.Errorf("%w: model %s: %v", ErrInvalidRequest, m.name, err)
	}
	return b, nil
}

func messagesOf(msg model.Message) ([]chatMessage, error) {
	switch msg.Role {
	case model.RoleUser:
		if msg.Text == "" {
			return nil, nil
		}
		return []chatMessage{{Role: "user", Content: ptr(msg.Text)}}, nil
	case model.RoleAssistant:
		cm := chatMessage{Role: "assistant"}
		if msg.Text != "" {
			cm.Content = ptr(msg.Text)
		}
		for _, call := range msg.ToolCalls {
			args, err := compactJSON(call.Args)
			if err != nil {
				return nil, fmt.Errorf("tool call %s args: %v", call.ID, err)
			}
			if args == nil {
				args = json.RawMessage(`{}`)
			}
			cm.ToolCalls = append(cm.ToolCalls, chatToolCall{
				ID: call.ID, Type: "function", Function: chatFunction{Name: call.Name, Arguments: string(args)},
			})
		}
		if cm.Content == nil && len(cm.ToolCalls) == 0 {
			return nil, nil
		}
		return []chatMessage{cm}, nil
	case model.RoleTool:
		var out []chatMessage
		for _, res := range msg.ToolResults {
			var content string
			if res.Error != "" {
				b, _ := json.Marshal(map[string]string{"error": res.Error})
				content = string(b)
			} else {
				r, err := compactJSON(res.Result)
				if err != nil {
					return nil, fmt.Errorf("tool result %s: %v", res.CallID, err)
				}
				if r == nil {
					r = json.RawMessage(`null`)
				}
				content = string(r)
			}
			out = append(out, chatMessage{Role: "tool", ToolCallID: res.CallID, Content: ptr(content)})
		}
		if msg.Text != "" {
			out = append(out, chatMessage{Role: "user", Content: ptr(msg.Text)})
		}
		return out, nil
	default:
		return nil, fmt.Errorf("unknown role %q", msg.Role)
	}
}

// compactJSON validates and compacts JSON; empty input gives nil.
func compactJSON(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	return json.RawMessage(buf.Bytes()), nil
}

func ptr[T any](v T) *T { return &v }
