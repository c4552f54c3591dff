package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/terret/terret-ws/internal/tools"
)

// Tool is the builtin schedule tool: the model sets, lists and cancels its own agent's
// schedules (the agent of the call, tools.AgentOf). Arguments: {"action": "set", "text",
// and one of "at", "in", "every", "cron" (+ "tz"), "id"?} answers the schedule;
// {"action": "list"} answers {"schedules": [...]}; {"action": "cancel", "id"} answers
// {"cancelled": id}. A bad spec is the call's error result, naming the field.
func (s *Service) Tool() tools.Tool { return scheduleTool{s: s} }

type scheduleTool struct{ s *Service }

func (t scheduleTool) Definition() tools.Definition {
	return tools.Definition{
		Name: tools.ToolSchedule,
		Description: "Set, list or cancel this agent's own schedules. A schedule wakes the agent with its text " +
			"at a time (at: RFC 3339; in: a duration like 90s), every interval (every: a duration like 1h), or on a " +
			"5-field cron (cron, with an IANA time zone tz). action is set, list or cancel; cancel needs id.",
		Schema: json.RawMessage(`{"type":"object","properties":{` +
			`"action":{"type":"string","enum":["set","list","cancel"]},` +
			`"text":{"type":"string"},"id":{"type":"string"},"at":{"type":"string"},"in":{"type":"string"},` +
			`"every":{"type":"string"},"cron":{"type":"string"},"tz":{"type":"string"}},"required":["action"]}`),
		Concurrency: tools.Serial,
	}
}

func (t scheduleTool) Call(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	agentID := tools.AgentOf(ctx)
	if agentID == "" {
		return nil, errors.New("schedule: no agent for this call")
	}
	var a struct {
		Action string `json:"action"`
		Spec
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, fmt.Errorf("%w: %v", tools.ErrBadArgs, err)
	}
	switch a.Action {
	case "set":
		sc, err := t.s.Set(ctx, agentID, a.Spec)
		if err != nil {
			return nil, userError(err)
		}
		return json.Marshal(sc)
	case "list":
		list, err := t.s.List(ctx, agentID)
		if err != nil {
			return nil, userError(err)
		}
		return json.Marshal(map[string]any{"schedules": list})
	case "cancel":
		if a.ID == "" {
			return nil, fmt.Errorf("%w: id: required to cancel", tools.ErrBadArgs)
		}
		if err := t.s.Cancel(ctx, agentID, a.ID); err != nil {
			return nil, userError(err)
		}
		return json.Marshal(map[string]string{"cancelled": a.ID})
	default:
		return nil, fmt.Errorf("%w: action: set, list or cancel, got %q", tools.ErrBadArgs, a.Action)
	}
}

// userError is the error a caller may see: a spec, quota or unknown-id error as it is,
// anything else without its detail (it is logged durably as the tool's result).
func userError(err error) error {
	var se *SpecError
	switch {
	case errors.As(err, &se):
		return se
	case errors.Is(err, ErrQuota), errors.Is(err, ErrNotFound):
		return err
	}
	return errors.New("schedule: the schedule store failed; try again")
}
