package lambdatool

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/terret/terret-ws/internal/tools"
)

// Builder returns the tools.Builder of the "lambda" kind for a profile's tool
// registry. The ToolConfig's name, description, schema, concurrency and
// needs_approval declare the tool; its spec holds the rest of Config:
//
//	{"name": "lookup", "kind": "lambda", "description": "…", "schema": {…},
//	 "concurrency": "parallel", "needs_approval": false,
//	 "spec": {"function_arn": "arn:aws:lambda:…:function:lookup", "timeout_ms": 30000}}
//
// Fields present in the spec take precedence over the ToolConfig's. The builder
// returns an error wrapping ErrBadConfig like New.
func Builder(api API) tools.Builder {
	return func(tc tools.ToolConfig) (tools.Tool, error) {
		cfg := Config{
			Name:        tc.Name,
			Description: tc.Description,
			Schema:      tc.Schema,
			Concurrency: tc.Concurrency,
		}
		if tc.NeedsApproval != nil {
			cfg.NeedsApproval = *tc.NeedsApproval
		}
		if len(bytes.TrimSpace(tc.Spec)) > 0 {
			dec := json.NewDecoder(bytes.NewReader(tc.Spec))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&cfg); err != nil {
				return nil, fmt.Errorf("%w: tool %s: spec: %v", ErrBadConfig, tc.Name, err)
			}
		}
		return New(cfg, api)
	}
}
