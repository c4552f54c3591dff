// Package tools defines what a tool is to the agent — name, description, JSON schema,
// concurrency and whether it needs an approval — and the registry of an agent's tools.
package tools

import (
	"context"
	"encoding/json"
	"errors"
)

// Errors returned by tools and the registry.
var (
	ErrUnknownTool = errors.New("tools: unknown tool")
	ErrBadArgs     = errors.New("tools: invalid arguments")
)

// Concurrency says how a call may run beside others of the same batch.
type Concurrency string

// Concurrency values. Parallel calls run in maximal runs under one barrier; a serial call
// runs alone.
const (
	Parallel Concurrency = "parallel"
	Serial   Concurrency = "serial"
)

// Definition describes a tool.
type Definition struct {
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	Schema        json.RawMessage `json:"schema,omitempty"`
	Concurrency   Concurrency     `json:"concurrency"`
	NeedsApproval bool            `json:"needs_approval"`
}

// Tool is something the model can call.
type Tool interface {
	Definition() Definition
	// Call runs the tool with args (a JSON object) and returns its result as JSON. An
	// error is returned to the model as the call's error result; its text is logged
	// durably, so it must not carry secrets.
	Call(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
}
