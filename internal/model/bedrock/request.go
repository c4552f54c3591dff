package bedrock

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	smithydocument "github.com/aws/smithy-go/document"

	"github.com/terret/terret-ws/internal/model"
)

// emptySchema is the input schema of a tool that declares none: Bedrock requires one.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// input maps a model request to a ConverseStream input. Converse wants strictly
// alternating user/assistant messages with no empty content, and tool results inside
// a user message ahead of any text, so consecutive messages of one Bedrock role are
// merged and empty ones dropped. It returns an error wrapping ErrInvalidRequest if the
// request carries a role it does not know or JSON that does not parse.
func (m *Model) input(req model.Request) (*bedrockruntime.ConverseStreamInput, error) {
	in := &bedrockruntime.ConverseStreamInput{ModelId: aws.String(m.id)}
	if req.System != "" {
		in.System = []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: req.System}}
	}
	for i, msg := range req.Messages {
		role, blocks, err := contentOf(msg)
		if err != nil {
			return nil, fmt.Errorf("%w: model %s: message %d: %v", ErrInvalidRequest, m.id, i, err)
		}
		if len(blocks) == 0 {
			continue
		}
		if n := len(in.Messages); n > 0 && in.Messages[n-1].Role == role {
			in.Messages[n-1].Content = append(in.Messages[n-1].Content, blocks...)
			continue
		}
		in.Messages = append(in.Messages, types.Message{Role: role, Content: blocks})
	}
	for i := range in.Messages {
		if in.Messages[i].Role == types.ConversationRoleUser {
			in.Messages[i].Content = toolResultsFirst(in.Messages[i].Content)
		}
	}
	if len(req.Tools) > 0 {
		tc := &types.ToolConfiguration{}
		for _, spec := range req.Tools {
			schema := spec.Schema
			if len(bytes.TrimSpace(schema)) == 0 {
				schema = emptySchema
			}
			doc, err := toDocument(schema)
			if err != nil {
				return nil, fmt.Errorf("%w: model %s: tool %s: schema: %v", ErrInvalidRequest, m.id, spec.Name, err)
			}
			ts := types.ToolSpecification{Name: aws.String(spec.Name), InputSchema: &types.ToolInputSchemaMemberJson{Value: doc}}
			if spec.Description != "" {
				ts.Description = aws.String(spec.Description)
			}
			tc.Tools = append(tc.Tools, &types.ToolMemberToolSpec{Value: ts})
		}
		in.ToolConfig = tc
	}
	if m.cfg.MaxTokens > 0 || m.cfg.Temperature != nil {
		ic := &types.InferenceConfiguration{Temperature: m.cfg.Temperature}
		if m.cfg.MaxTokens > 0 {
			ic.MaxTokens = aws.Int32(m.cfg.MaxTokens)
		}
		in.InferenceConfig = ic
	}
	return in, nil
}

// contentOf maps one message to its Bedrock role and content blocks.
func contentOf(msg model.Message) (types.ConversationRole, []types.ContentBlock, error) {
	var blocks []types.ContentBlock
	switch msg.Role {
	case model.RoleUser:
		if msg.Text != "" {
			blocks = append(blocks, &types.ContentBlockMemberText{Value: msg.Text})
		}
		return types.ConversationRoleUser, blocks, nil
	case model.RoleAssistant:
		if msg.Text != "" {
			blocks = append(blocks, &types.ContentBlockMemberText{Value: msg.Text})
		}
		for _, call := range msg.ToolCalls {
			args := call.Args
			if len(bytes.TrimSpace(args)) == 0 {
				args = json.RawMessage(`{}`)
			}
			doc, err := toDocument(args)
			if err != nil {
				return "", nil, fmt.Errorf("tool call %s args: %v", call.ID, err)
			}
			blocks = append(blocks, &types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{
				ToolUseId: aws.String(call.ID), Name: aws.String(call.Name), Input: doc,
			}})
		}
		return types.ConversationRoleAssistant, blocks, nil
	case model.RoleTool:
		for _, res := range msg.ToolResults {
			block, err := toolResult(res)
			if err != nil {
				return "", nil, err
			}
			blocks = append(blocks, block)
		}
		if msg.Text != "" {
			blocks = append(blocks, &types.ContentBlockMemberText{Value: msg.Text})
		}
		return types.ConversationRoleUser, blocks, nil
	default:
		return "", nil, fmt.Errorf("unknown role %q", msg.Role)
	}
}

// toolResult maps a result: an object travels as JSON content, any other JSON value as
// its text (not every model accepts non-object JSON), an error as text with status error.
func toolResult(res model.ToolResult) (types.ContentBlock, error) {
	block := types.ToolResultBlock{ToolUseId: aws.String(res.CallID)}
	raw := bytes.TrimSpace(res.Result)
	switch {
	case res.Error != "":
		block.Status = types.ToolResultStatusError
		block.Content = []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: res.Error}}
	case len(raw) > 0 && raw[0] == '{':
		doc, err := toDocument(raw)
		if err != nil {
			return nil, fmt.Errorf("tool result %s: %v", res.CallID, err)
		}
		block.Status = types.ToolResultStatusSuccess
		block.Content = []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberJson{Value: doc}}
	default:
		text := string(raw)
		if text == "" {
			text = "null"
		} else if !json.Valid(raw) {
			return nil, fmt.Errorf("tool result %s: result is not JSON", res.CallID)
		}
		block.Status = types.ToolResultStatusSuccess
		block.Content = []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: text}}
	}
	return &types.ContentBlockMemberToolResult{Value: block}, nil
}

// toolResultsFirst moves tool results ahead of other blocks, keeping relative order.
func toolResultsFirst(blocks []types.ContentBlock) []types.ContentBlock {
	out := make([]types.ContentBlock, 0, len(blocks))
	for _, b := range blocks {
		if _, ok := b.(*types.ContentBlockMemberToolResult); ok {
			out = append(out, b)
		}
	}
	for _, b := range blocks {
		if _, ok := b.(*types.ContentBlockMemberToolResult); !ok {
			out = append(out, b)
		}
	}
	return out
}

// toDocument turns JSON into a Bedrock document, keeping numbers exact.
func toDocument(raw json.RawMessage) (document.Interface, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("invalid JSON: trailing data")
	}
	return document.NewLazyDocument(exactNumbers(v)), nil
}

// exactNumbers replaces json.Number (a string to the document encoder) by the
// document number type, which is written verbatim.
func exactNumbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		return smithydocument.Number(t)
	case map[string]any:
		for k, e := range t {
			t[k] = exactNumbers(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = exactNumbers(e)
		}
		return t
	default:
		return v
	}
}
