package profile

import (
	"encoding/json"

	"github.com/terret/terret-ws/internal/secret"
	"github.com/terret/terret-ws/internal/tools/mcpspec"
)

// Redact returns the profile JSON raw with every value a profile must not show
// replaced by secret.Redacted: credential headers written literally in an MCP tool's
// spec.headers (refused by Check since, but a profile stored before may hold one) and
// a provider's literal api_key. Everything else is kept as stored; JSON that does not
// parse is returned as it is (the caller reports it). It costs no request.
func Redact(raw []byte) []byte {
	var doc map[string]json.RawMessage
	if json.Unmarshal(raw, &doc) != nil || doc == nil {
		return raw
	}
	changed := false
	var provs map[string]map[string]json.RawMessage
	if json.Unmarshal(doc["providers"], &provs) == nil {
		for _, p := range provs {
			if _, ok := p["api_key"]; ok {
				p["api_key"], changed = redactedJSON(), true
			}
		}
		if changed {
			doc["providers"], _ = json.Marshal(provs)
		}
	}
	var list []map[string]json.RawMessage
	if json.Unmarshal(doc["tools"], &list) == nil {
		toolsChanged := false
		for _, t := range list {
			var spec map[string]json.RawMessage
			if json.Unmarshal(t["spec"], &spec) != nil || spec == nil {
				continue
			}
			var headers map[string]json.RawMessage
			if json.Unmarshal(spec["headers"], &headers) != nil {
				continue
			}
			hit := false
			for name := range headers {
				if mcpspec.IsCredentialHeader(name) {
					headers[name], hit = redactedJSON(), true
				}
			}
			if hit {
				spec["headers"], _ = json.Marshal(headers)
				t["spec"], _ = json.Marshal(spec)
				toolsChanged = true
			}
		}
		if toolsChanged {
			doc["tools"], _ = json.Marshal(list)
			changed = true
		}
	}
	if !changed {
		return raw
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return raw
	}
	return out
}

func redactedJSON() json.RawMessage {
	b, _ := json.Marshal(secret.Redacted)
	return b
}
