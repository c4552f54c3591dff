package model

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Scripted is the model of spec "scripted": no network, no key, deterministic. It
// reads the text of the turn's messages (docs/lifecycle.md, "The scripted model"):
//
//   - Plain text: the reply is exactly the text of the newest user message (waking
//     text or injected context), streamed as at least two deltas — two halves, split
//     on a rune boundary — whose texts concatenate to it. An empty text is no reply.
//   - A JSON object {"script": [STEP, ...]} as the turn's waking text (its newest
//     non-injected user message): each model call of the turn takes the next step,
//     the step index being the number of assistant messages after the waking text.
//     Steps:
//     {"say": "TEXT", "chunks": N, "delay_ms": D} replies TEXT as N deltas (default
//     2), D ms apart (default 0); {"call": [{"tool": "NAME", "args": {...}}, ...]}
//     asks for those tool calls, in order; {"fail": "MESSAGE"} fails the call with
//     exactly MESSAGE as the error text; {"refuse": "TEXT"} (an addition to the dev
//     profile) streams TEXT and stops with StopRefusal. A used-up script returns
//     nothing (no text, no calls).
//
// Every delta carries Boundary, so the runtime logs each as its own chunk. Token
// usage is an estimate: one token per four bytes of input (system, message texts,
// tool arguments and results) and of output (reply text and call arguments).
type Scripted struct {
	sleep func(ctx context.Context, d time.Duration) error
}

// NewScripted returns the scripted model.
func NewScripted() *Scripted { return &Scripted{sleep: sleepCtx} }

// Limits of a say step, so a script cannot pin a runner.
const (
	maxScriptChunks  = 10000
	maxScriptDelayMS = 600000
)

// Errors of the scripted model. A script error fails the model call, so the turn
// ends "failed" with the message as its reason.
var errScript = errors.New("scripted")

type scriptStep struct {
	Say     *string `json:"say"`
	Chunks  *int    `json:"chunks"`
	DelayMS *int    `json:"delay_ms"`
	Call    *[]struct {
		Tool string          `json:"tool"`
		Args json.RawMessage `json:"args"`
	} `json:"call"`
	Fail   *string `json:"fail"`
	Refuse *string `json:"refuse"`
}

// Stream implements Model.
func (s *Scripted) Stream(ctx context.Context, req Request, onDelta func(Delta) error) (Response, error) {
	wake := -1
	newest := -1
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role != RoleUser {
			continue
		}
		if newest < 0 {
			newest = i
		}
		if !m.Injected {
			wake = i
			break
		}
	}
	if newest < 0 {
		return Response{StopReason: StopEndTurn, Usage: Usage{InputTokens: inputTokens(req)}}, nil
	}
	if wake >= 0 {
		script, isScript, err := parseScript(req.Messages[wake].Text)
		if err != nil {
			return Response{}, err
		}
		if isScript {
			step := 0
			for _, m := range req.Messages[wake+1:] {
				if m.Role == RoleAssistant {
					step++
				}
			}
			if step >= len(script) {
				return Response{StopReason: StopEndTurn, Usage: Usage{InputTokens: inputTokens(req)}}, nil
			}
			return s.step(ctx, req, script[step], step, onDelta)
		}
	}
	text := req.Messages[newest].Text
	if text == "" {
		return Response{StopReason: StopEndTurn, Usage: Usage{InputTokens: inputTokens(req)}}, nil
	}
	return s.say(ctx, req, text, 2, 0, StopEndTurn, onDelta)
}

// parseScript reports whether text is a JSON object with a "script" member, and
// returns its steps. A "script" that is not an array of objects is an error.
func parseScript(text string) ([]json.RawMessage, bool, error) {
	trimmed := strings.TrimSpace(text)
	if !strings.HasPrefix(trimmed, "{") {
		return nil, false, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(trimmed), &obj); err != nil {
		return nil, false, nil
	}
	raw, ok := obj["script"]
	if !ok {
		return nil, false, nil
	}
	var steps []json.RawMessage
	if err := json.Unmarshal(raw, &steps); err != nil {
		return nil, true, fmt.Errorf("%w: \"script\" is not an array", errScript)
	}
	return steps, true, nil
}

func (s *Scripted) step(ctx context.Context, req Request, raw json.RawMessage, i int, onDelta func(Delta) error) (Response, error) {
	var st scriptStep
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&st); err != nil {
		return Response{}, fmt.Errorf("%w: step %d is not an object: %v", errScript, i, err)
	}
	kinds := 0
	for _, set := range []bool{st.Say != nil, st.Call != nil, st.Fail != nil, st.Refuse != nil} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		return Response{}, fmt.Errorf("%w: step %d: want exactly one of say, call, fail, refuse", errScript, i)
	}
	switch {
	case st.Fail != nil:
		return Response{}, errors.New(*st.Fail)
	case st.Refuse != nil:
		return s.say(ctx, req, *st.Refuse, 1, 0, StopRefusal, onDelta)
	case st.Say != nil:
		n, d := 2, 0
		if st.Chunks != nil {
			n = *st.Chunks
		}
		if st.DelayMS != nil {
			d = *st.DelayMS
		}
		if n < 1 || n > maxScriptChunks {
			return Response{}, fmt.Errorf("%w: step %d: chunks must be 1..%d", errScript, i, maxScriptChunks)
		}
		if d < 0 || d > maxScriptDelayMS {
			return Response{}, fmt.Errorf("%w: step %d: delay_ms must be 0..%d", errScript, i, maxScriptDelayMS)
		}
		return s.say(ctx, req, *st.Say, n, time.Duration(d)*time.Millisecond, StopEndTurn, onDelta)
	}
	resp := Response{StopReason: StopToolUse, Usage: Usage{InputTokens: inputTokens(req)}}
	for j, c := range *st.Call {
		if c.Tool == "" {
			return Response{}, fmt.Errorf("%w: step %d: call %d has no tool", errScript, i, j)
		}
		args := json.RawMessage(`{}`)
		if t := bytes.TrimSpace(c.Args); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
			if t[0] != '{' {
				return Response{}, fmt.Errorf("%w: step %d: call %d: args must be an object", errScript, i, j)
			}
			args = json.RawMessage(t)
		}
		resp.ToolCalls = append(resp.ToolCalls, ToolCall{ID: callID(), Name: c.Tool, Args: args})
		resp.Usage.OutputTokens += tokens(len(c.Tool) + len(args))
	}
	return resp, nil
}

// say streams text as n deltas, delay apart, each marked as a chunk boundary.
func (s *Scripted) say(ctx context.Context, req Request, text string, n int, delay time.Duration, stop string, onDelta func(Delta) error) (Response, error) {
	for i, piece := range split(text, n) {
		if i > 0 && delay > 0 {
			if err := s.sleep(ctx, delay); err != nil {
				return Response{}, err
			}
		}
		if onDelta != nil {
			if err := onDelta(Delta{Text: piece, Boundary: true}); err != nil {
				return Response{}, err
			}
		}
	}
	return Response{Text: text, StopReason: stop, Usage: Usage{InputTokens: inputTokens(req), OutputTokens: tokens(len(text))}}, nil
}

// split cuts text into n pieces of as equal a rune count as possible; with fewer
// runes than pieces, the trailing pieces are empty. The pieces concatenate to text.
func split(text string, n int) []string {
	runes := []rune(text)
	out := make([]string, n)
	for i := range n {
		out[i] = string(runes[i*len(runes)/n : (i+1)*len(runes)/n])
	}
	return out
}

func inputTokens(req Request) int64 {
	n := len(req.System)
	for _, m := range req.Messages {
		n += len(m.Text)
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Args)
		}
		for _, r := range m.ToolResults {
			n += len(r.Result) + len(r.Error)
		}
	}
	return tokens(n)
}

func tokens(bytes int) int64 { return int64((bytes + 3) / 4) }

func callID() string {
	b := make([]byte, 6)
	_, _ = crand.Read(b)
	return "call_" + hex.EncodeToString(b)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
