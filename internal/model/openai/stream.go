package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/terret/terret-ws/internal/model"
)

// maxEventBytes bounds one server-sent event, so a misbehaving server cannot make the
// reader buffer without limit.
const maxEventBytes = 4 << 20

var errEventTooLarge = fmt.Errorf("event larger than %d bytes", maxEventBytes)

// readEvents reads a text/event-stream body and calls onData with the data of each
// event (data lines joined by "\n"), until onData reports done, returns an error, or
// the body ends. Comment lines and fields other than data are ignored.
func readEvents(r io.Reader, onData func([]byte) (done bool, err error)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var data []byte
	have := false
	dispatch := func() (bool, error) {
		if !have {
			return false, nil
		}
		d := data
		data, have = data[:0], false
		return onData(d)
	}
	for {
		line, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		switch {
		case len(line) == 0:
			if done, derr := dispatch(); done || derr != nil {
				return derr
			}
		case line[0] == ':':
			// comment (keep-alive)
		default:
			field, value, _ := bytes.Cut(line, []byte(":"))
			if string(field) != "data" {
				continue
			}
			value = bytes.TrimPrefix(value, []byte(" "))
			if have {
				data = append(data, '\n')
			}
			if len(data)+len(value) > maxEventBytes {
				return errEventTooLarge
			}
			data = append(data, value...)
			have = true
		}
		if err != nil {
			// The body ended; an event missing its closing blank line still counts.
			_, derr := dispatch()
			return derr
		}
	}
}

// readLine reads one line without its CR/LF terminator; at the end of the body it
// returns the last (unterminated) line with io.EOF.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > maxEventBytes {
			return nil, errEventTooLarge
		}
		line = append(line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimRight(line, "\r\n")
		return line, err
	}
}

// streamError is an error event sent by the server inside the stream.
type streamError struct{ msg string }

func (e streamError) Error() string { return e.msg }

// badResponse marks stream content that cannot be understood.
type badResponse struct{ msg string }

func (e badResponse) Error() string { return e.msg }

// onDeltaError carries the caller's onDelta error out of the reader unchanged.
type onDeltaError struct{ err error }

func (e onDeltaError) Error() string { return e.err.Error() }

// chunk is one chat.completion.chunk (fields the provider reads).
type chunk struct {
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    *int   `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

type toolBuilder struct {
	index    int
	id, name string
	args     strings.Builder
}

// assembler folds chunks into a response.
type assembler struct {
	text     strings.Builder
	tools    map[int]*toolBuilder
	last     *toolBuilder
	finish   string
	finished bool
	usage    model.Usage
}

// add folds the chunks in one event's data (normally one JSON object).
func (a *assembler) add(data []byte, onDelta func(model.Delta) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var c chunk
		err := dec.Decode(&c)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return badResponse{fmt.Sprintf("chunk is not JSON: %v", err)}
		}
		if err := a.addChunk(c, onDelta); err != nil {
			return err
		}
	}
}

func (a *assembler) addChunk(c chunk, onDelta func(model.Delta) error) error {
	if len(c.Error) > 0 && string(c.Error) != "null" {
		msg := errorText([]byte(`{"error":` + string(c.Error) + `}`))
		if msg == "" {
			msg = "error event in stream"
		}
		return streamError{msg}
	}
	if c.Usage != nil {
		a.usage = model.Usage{InputTokens: c.Usage.PromptTokens, OutputTokens: c.Usage.CompletionTokens}
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // only one completion is requested
		}
		if ch.Delta.Content != nil && *ch.Delta.Content != "" {
			a.text.WriteString(*ch.Delta.Content)
			if onDelta != nil {
				if err := onDelta(model.Delta{Text: *ch.Delta.Content}); err != nil {
					return onDeltaError{err}
				}
			}
		}
		for _, tc := range ch.Delta.ToolCalls {
			tb := a.toolFor(tc.Index, tc.ID)
			if tb.id == "" {
				tb.id = tc.ID
			}
			// Servers send the name once; some repeat it in later fragments.
			if n := tc.Function.Name; n != "" && n != tb.name {
				tb.name += n
			}
			tb.args.WriteString(tc.Function.Arguments)
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			a.finish = stopReason(*ch.FinishReason)
			a.finished = true
		}
	}
	return nil
}

// stopReason maps a finish_reason to the runtime's stop reasons; others ("length"
// becomes "max_tokens", as Bedrock says) pass through.
func stopReason(finish string) string {
	switch finish {
	case "stop":
		return model.StopEndTurn
	case "tool_calls", "function_call":
		return model.StopToolUse
	case "content_filter":
		return model.StopRefusal
	case "length":
		return "max_tokens"
	default:
		return finish
	}
}

// toolFor finds the call a fragment belongs to: by index when the server sends one
// (the standard), otherwise a fragment with a new id starts a new call and one without
// continues the last.
func (a *assembler) toolFor(index *int, id string) *toolBuilder {
	if a.tools == nil {
		a.tools = map[int]*toolBuilder{}
	}
	var i int
	switch {
	case index != nil:
		i = *index
	case a.last != nil && (id == "" || id == a.last.id):
		return a.last
	default:
		i = len(a.tools)
		for a.tools[i] != nil {
			i++
		}
	}
	tb := a.tools[i]
	if tb == nil {
		tb = &toolBuilder{index: i}
		a.tools[i] = tb
	}
	a.last = tb
	return tb
}

func (a *assembler) response() (model.Response, error) {
	if !a.finished {
		return model.Response{}, errors.New("stream ended before finish_reason")
	}
	resp := model.Response{Text: a.text.String(), StopReason: a.finish, Usage: a.usage}
	builders := make([]*toolBuilder, 0, len(a.tools))
	for _, tb := range a.tools {
		builders = append(builders, tb)
	}
	sort.Slice(builders, func(i, j int) bool { return builders[i].index < builders[j].index })
	for _, tb := range builders {
		if tb.name == "" {
			return model.Response{}, fmt.Errorf("tool call %d has no name", tb.index)
		}
		if tb.id == "" {
			// Tool results must name their call; some servers omit ids.
			tb.id = fmt.Sprintf("call_%d", tb.index)
		}
		args, err := objectJSON(tb.args.String())
		if err != nil {
			return model.Response{}, fmt.Errorf("tool call %s (%s): %v", tb.name, tb.id, err)
		}
		resp.ToolCalls = append(resp.ToolCalls, model.ToolCall{ID: tb.id, Name: tb.name, Args: args})
	}
	return resp, nil
}

// objectJSON validates and compacts tool arguments; empty arguments are the empty object.
func objectJSON(s string) (json.RawMessage, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return json.RawMessage(`{}`), nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
		return nil, errors.New("arguments are not a JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		return nil, errors.New("arguments are not a JSON object")
	}
	return json.RawMessage(buf.Bytes()), nil
}
