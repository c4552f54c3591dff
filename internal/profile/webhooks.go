package profile

import (
	"context"
	"fmt"
	"slices"

	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/webhook"
)

// MaxWebhooks bounds a profile's webhooks.
const MaxWebhooks = 10

// checkWebhooks records the problems of p's webhooks (docs/agents.md, "Webhooks"): a
// URL that is not https (http to a loopback host is allowed where env.LocalWebhooks),
// or whose host is an address no receiver may have (SSRF; package webhook); no
// events, or a glob that is not one; a secret not named exactly once, or that cannot
// be found or is not a "whsec_" secret. Resolved hooks are returned for the entries
// without a problem.
func checkWebhooks(ctx context.Context, pe *tools.ProfileError, p tools.Profile, env Env, resolve bool) []webhook.Hook {
	if len(p.Webhooks) > MaxWebhooks {
		pe.Add("webhooks", "at most %d webhooks, got %d", MaxWebhooks, len(p.Webhooks))
	}
	addrs := webhook.Addresses{Loopback: env.LocalWebhooks}
	urls := map[string]int{}
	var out []webhook.Hook
	for i, w := range p.Webhooks {
		path := tools.WebhookPath(i)
		n := len(pe.Problems)
		switch {
		case w.URL == "":
			pe.Add(path+".url", "required: the receiver's https URL")
		default:
			if err := addrs.CheckURL(w.URL); err != nil {
				pe.Add(path+".url", "%v", err)
			}
			if j, dup := urls[w.URL]; dup {
				pe.Add(path+".url", "also the url of webhooks[%d]: give one entry several events instead", j)
			}
			urls[w.URL] = i
		}
		if len(w.Events) == 0 {
			pe.Add(path+".events", "required: globs over event types, e.g. [\"turn/end\", \"approval/*\"]")
		}
		for k, g := range w.Events {
			if err := webhook.CheckGlob(g); err != nil {
				pe.Add(fmt.Sprintf("%s.events[%d]", path, k), "%v", err)
			} else if slices.Contains(webhook.Undelivered, g) {
				pe.Add(fmt.Sprintf("%s.events[%d]", path, k), "%s events are never delivered by webhooks (the streamed text; read the answer from the log)", g)
			}
		}
		switch {
		case w.SecretEnv == "" && w.SecretSecret == "":
			pe.Add(path+".secret_env", "a secret is required: name it with secret_env (an environment variable) or secret_secret (Secrets Manager or SSM); its value is whsec_ and the key in base64")
		case w.SecretEnv != "" && w.SecretSecret != "":
			pe.Add(path+".secret_secret", "give secret_env or secret_secret, not both")
		case w.SecretEnv != "" && !envName.MatchString(w.SecretEnv):
			pe.Add(path+".secret_env", "%q is not an environment variable name", w.SecretEnv)
		}
		if len(pe.Problems) > n {
			continue
		}
		if !resolve {
			out = append(out, webhook.Hook{URL: w.URL, Events: w.Events})
			continue
		}
		var value string
		switch {
		case w.SecretEnv != "":
			if env.LookupEnv == nil {
				pe.Add(path+".secret_env", "no environment is read where this profile runs: on AWS name the secret with secret_secret")
				continue
			}
			v, ok := env.LookupEnv(w.SecretEnv)
			if !ok || v == "" {
				pe.Add(path+".secret_env", "environment variable %s is not set (locally it may also be in .env in the working directory)", w.SecretEnv)
				continue
			}
			value = v
		default:
			if env.Secrets == nil {
				pe.Add(path+".secret_secret", "no secret store here: use secret_env locally")
				continue
			}
			v, err := env.Secrets.Get(ctx, w.SecretSecret)
			if err != nil {
				pe.Add(path+".secret_secret", "%v", err)
				continue
			}
			value = v
		}
		key, err := webhook.ParseSecret(value)
		if err != nil {
			field := ".secret_secret"
			if w.SecretEnv != "" {
				field = ".secret_env"
			}
			pe.Add(path+field, "%v", err) // ParseSecret never quotes the value
			continue
		}
		out = append(out, webhook.Hook{URL: w.URL, Events: w.Events, Secret: key})
	}
	return out
}

// Webhooks returns p's webhooks, with resolve their secrets resolved where env runs
// p (without, Secret is nil and nothing is fetched), or the *tools.ProfileError of
// their problems.
func Webhooks(ctx context.Context, p tools.Profile, env Env, resolve bool) ([]webhook.Hook, error) {
	pe := &tools.ProfileError{}
	hooks := checkWebhooks(ctx, pe, p, env, resolve)
	if err := pe.Err(); err != nil {
		return nil, err
	}
	return hooks, nil
}

// WebhookEnvs lists the environment variables p's webhooks name with secret_env, as
// KeyEnvs does for providers.
func WebhookEnvs(p tools.Profile) []string {
	var out []string
	seen := map[string]bool{}
	for _, w := range p.Webhooks {
		if w.SecretEnv != "" && !seen[w.SecretEnv] {
			seen[w.SecretEnv] = true
			out = append(out, w.SecretEnv)
		}
	}
	return out
}
