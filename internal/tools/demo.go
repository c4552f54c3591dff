package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// The demo tools of the dev profile, by name.
const (
	ToolSleep       = "sleep"
	ToolEcho        = "echo"
	ToolClock       = "clock"
	ToolGuardedEcho = "guarded_echo"
)

// maxSleep bounds the sleep tool, so one call cannot outlive a runner invocation.
const maxSleep = 10 * time.Minute

// Demo returns the demo tools: sleep (parallel; waits args.ms milliseconds, returns
// {"slept_ms": ms}), echo (serial; returns {"text": args.text}), clock (parallel;
// returns {"utc": "<now, UTC, microseconds>"}) and guarded_echo (serial, needs an
// approval where approvals are mounted; returns {"text": args.text}).
func Demo() []Tool {
	return []Tool{
		funcTool{def: Definition{
			Name:        ToolSleep,
			Description: "Wait args.ms milliseconds, then return {\"slept_ms\": ms}.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer","minimum":0}},"required":["ms"]}`),
			Concurrency: Parallel,
		}, call: sleepTool},
		funcTool{def: Definition{
			Name:        ToolEcho,
			Description: "Return {\"text\": args.text}.",
			Schema:      textSchema,
			Concurrency: Serial,
		}, call: echoTool},
		funcTool{def: Definition{
			Name:        ToolClock,
			Description: "Return the current UTC time as {\"utc\": \"2006-01-02T15:04:05.000000Z\"}.",
			Schema:      json.RawMessage(`{"type":"object","properties":{}}`),
			Concurrency: Parallel,
		}, call: clockTool},
		funcTool{def: Definition{
			Name:          ToolGuardedEcho,
			Description:   "Return {\"text\": args.text}, once a person has approved the call.",
			Schema:        textSchema,
			Concurrency:   Serial,
			NeedsApproval: true,
		}, call: echoTool},
	}
}

var textSchema = json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)

type funcTool struct {
	def  Definition
	call func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
}

func (f funcTool) Definition() Definition { return f.def }

func (f funcTool) Call(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	return f.call(ctx, args)
}

func sleepTool(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	var a struct {
		MS *float64 `json:"ms"`
	}
	if err := json.Unmarshal(args, &a); err != nil || a.MS == nil || *a.MS < 0 || *a.MS != float64(int64(*a.MS)) {
		return nil, fmt.Errorf("%w: sleep wants {\"ms\": a non-negative integer}", ErrBadArgs)
	}
	d := time.Duration(*a.MS) * time.Millisecond
	if d > maxSleep {
		return nil, fmt.Errorf("%w: sleep is limited to %d ms", ErrBadArgs, maxSleep.Milliseconds())
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	return json.Marshal(map[string]int64{"slept_ms": int64(*a.MS)})
}

func echoTool(_ context.Context, args json.RawMessage) (json.RawMessage, error) {
	var a struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(args, &a); err != nil || a.Text == nil {
		return nil, fmt.Errorf("%w: want {\"text\": a string}", ErrBadArgs)
	}
	return json.Marshal(map[string]string{"text": *a.Text})
}

func clockTool(context.Context, json.RawMessage) (json.RawMessage, error) {
	return json.Marshal(map[string]string{"utc": time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")})
}
