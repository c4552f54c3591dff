package tools

import (
	"encoding/json"
	"fmt"
)

// Webhook is one entry of a profile's "webhooks": each log event of the agent whose
// type matches one of Events (globs, package webhook) is POSTed to URL, signed with
// the secret SecretEnv (an environment variable, locally) or SecretSecret (Secrets
// Manager or SSM, on AWS) names. The secret itself is never in a profile.
//
//	{"url": "https://hooks.example.com/terret", "events": ["turn/end", "approval/*"],
//	 "secret_secret": "acme/terret-webhook"}
type Webhook struct {
	URL          string   `json:"url"`
	Events       []string `json:"events"`
	SecretEnv    string   `json:"secret_env,omitempty"`
	SecretSecret string   `json:"secret_secret,omitempty"`
}

// WebhookPath is the JSON path of a profile's i-th webhook, "webhooks[i]".
func WebhookPath(i int) string { return fmt.Sprintf("webhooks[%d]", i) }

var webhookKeys = map[string]bool{"url": true, "events": true, "secret_env": true, "secret_secret": true}

// decodeWebhooks decodes a profile's "webhooks" strictly (unknown keys, wrong types,
// "secret" written out); what the values mean (URL, globs, references) is checked by
// package profile. null is as if absent.
func decodeWebhooks(pe *ProfileError, path string, raw json.RawMessage) []Webhook {
	var list []json.RawMessage
	if !decodeInto(pe, path, raw, &list) || list == nil {
		return nil
	}
	out := make([]Webhook, 0, len(list))
	for i, item := range list {
		wp := WebhookPath(i)
		var obj map[string]json.RawMessage
		if !decodeInto(pe, wp, item, &obj) {
			continue
		}
		if obj == nil {
			pe.Add(wp, "want an object")
			continue
		}
		var w Webhook
		for _, k := range sortedKeys(obj) {
			switch {
			case k == "secret":
				pe.Add(wp+".secret", "a secret is never written in a profile: name it with secret_env (an environment variable) or secret_secret (Secrets Manager or SSM)")
			case !webhookKeys[k]:
				pe.Add(wp+"."+k, "unknown key (url, events, secret_env, secret_secret)")
			}
		}
		decodeInto(pe, wp+".url", obj["url"], &w.URL)
		decodeInto(pe, wp+".events", obj["events"], &w.Events)
		decodeInto(pe, wp+".secret_env", obj["secret_env"], &w.SecretEnv)
		decodeInto(pe, wp+".secret_secret", obj["secret_secret"], &w.SecretSecret)
		out = append(out, w)
	}
	return out
}
