package tools

import "context"

type agentKey struct{}

// WithAgent is ctx for a tool call of agent agentID: a tool that acts on its own agent
// (the schedule tool) reads it with AgentOf.
func WithAgent(ctx context.Context, agentID string) context.Context {
	return context.WithValue(ctx, agentKey{}, agentID)
}

// AgentOf is the agent whose tool call ctx serves ("" outside a call).
func AgentOf(ctx context.Context) string {
	id, _ := ctx.Value(agentKey{}).(string)
	return id
}

// ToolSchedule is the builtin tool that lets the model set, list and cancel its own
// agent's schedules (internal/schedule). A profile opts in by naming it in tools; it is
// built where the wiring registered it (Registry.RegisterBuiltin), else naming it is
// an error at build time.
const ToolSchedule = "schedule"

// RegisterBuiltin adds t to the builtin tools of r, by its name (a builtin that needs
// the wiring's clients, such as the schedule tool).
func (r *Registry) RegisterBuiltin(t Tool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.builtins[t.Definition().Name] = t
}
