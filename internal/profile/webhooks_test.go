package profile_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/profile"
	"github.com/terret/terret-ws/internal/tools"
)

const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func webhookEnv(local bool) profile.Env {
	vars := map[string]string{"HOOK_SECRET": whsec, "NOT_WHSEC": "plain-value-xyz"}
	return profile.Env{
		LookupEnv:     func(n string) (string, bool) { v, ok := vars[n]; return v, ok },
		Secrets:       secrets{"acme/hook": whsec, "acme/bad": "sk-not-a-whsec"},
		LocalWebhooks: local,
	}
}

// TestCheckWebhooks: each bad webhook entry is a problem at its JSON path, on AWS
// (https, public addresses) and under terret dev (loopback http too); secret values
// never appear in the messages.
func TestCheckWebhooks(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, profile string
		local         bool
		want          string // "" passes
	}{
		{"aws https secret_secret", `{"webhooks": [{"url": "https://hooks.example.com/t", "events": ["turn/end", "approval/*"], "secret_secret": "acme/hook"}]}`, false, ""},
		{"local loopback http", `{"webhooks": [{"url": "http://127.0.0.1:9000/hook", "events": ["*"], "secret_env": "HOOK_SECRET"}]}`, true, ""},
		{"aws loopback http", `{"webhooks": [{"url": "http://127.0.0.1:9000/hook", "events": ["*"], "secret_secret": "acme/hook"}]}`, false, "webhooks[0].url: webhook: invalid url: must be https"},
		{"aws private", `{"webhooks": [{"url": "https://10.1.2.3/hook", "events": ["*"], "secret_secret": "acme/hook"}]}`, false, "webhooks[0].url: webhook: address refused: 10.1.2.3 is a private address"},
		{"aws metadata", `{"webhooks": [{"url": "https://169.254.169.254/", "events": ["*"], "secret_secret": "acme/hook"}]}`, false, "webhooks[0].url: webhook: address refused: 169.254.169.254 is a link-local address"},
		{"local private", `{"webhooks": [{"url": "http://192.168.0.2/hook", "events": ["*"], "secret_env": "HOOK_SECRET"}]}`, true, "webhooks[0].url: webhook: invalid url: http only to a loopback host"},
		{"no url", `{"webhooks": [{"events": ["*"], "secret_env": "HOOK_SECRET"}]}`, true, "webhooks[0].url: required"},
		{"no events", `{"webhooks": [{"url": "https://hooks.example.com/", "secret_env": "HOOK_SECRET"}]}`, true, "webhooks[0].events: required"},
		{"undelivered type", `{"webhooks": [{"url": "https://hooks.example.com/", "events": ["turn/end", "assistant/chunk"], "secret_env": "HOOK_SECRET"}]}`, true, "webhooks[0].events[1]: assistant/chunk events are never delivered by webhooks"},
		{"bad glob", `{"webhooks": [{"url": "https://hooks.example.com/", "events": ["turn/end", "Turn/[x]"], "secret_env": "HOOK_SECRET"}]}`, true, "webhooks[0].events[1]: webhook: invalid event glob"},
		{"no secret", `{"webhooks": [{"url": "https://hooks.example.com/", "events": ["*"]}]}`, true, "webhooks[0].secret_env: a secret is required"},
		{"both secrets", `{"webhooks": [{"url": "https://hooks.example.com/", "events": ["*"], "secret_env": "HOOK_SECRET", "secret_secret": "acme/hook"}]}`, true, "webhooks[0].secret_secret: give secret_env or secret_secret, not both"},
		{"env unset", `{"webhooks": [{"url": "https://hooks.example.com/", "events": ["*"], "secret_env": "NOPE"}]}`, true, "webhooks[0].secret_env: environment variable NOPE is not set"},
		{"not whsec env", `{"webhooks": [{"url": "https://hooks.example.com/", "events": ["*"], "secret_env": "NOT_WHSEC"}]}`, true, "webhooks[0].secret_env: webhook: invalid secret: want whsec_"},
		{"not whsec secret", `{"webhooks": [{"url": "https://hooks.example.com/", "events": ["*"], "secret_secret": "acme/bad"}]}`, false, "webhooks[0].secret_secret: webhook: invalid secret"},
		{"secret missing", `{"webhooks": [{"url": "https://hooks.example.com/", "events": ["*"], "secret_secret": "acme/gone"}]}`, false, "webhooks[0].secret_secret: secret: not found"},
		{"duplicate url", `{"webhooks": [{"url": "https://hooks.example.com/", "events": ["turn/end"], "secret_env": "HOOK_SECRET"}, {"url": "https://hooks.example.com/", "events": ["*"], "secret_env": "HOOK_SECRET"}]}`, true, "webhooks[1].url: also the url of webhooks[0]"},
		{"second entry", `{"webhooks": [{"url": "https://hooks.example.com/", "events": ["*"], "secret_env": "HOOK_SECRET"}, {"url": "ftp://x/", "events": ["*"], "secret_env": "HOOK_SECRET"}]}`, true, "webhooks[1].url: webhook: invalid url: must be https"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := tools.DecodeProfile([]byte(c.profile))
			if err != nil {
				t.Fatalf("DecodeProfile: %v", err)
			}
			err = profile.Check(ctx, p, webhookEnv(c.local))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Check = %v, want it to pass", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Check = %v, want a problem containing %q", err, c.want)
			}
			if err != nil {
				for _, s := range []string{strings.TrimPrefix(whsec, "whsec_"), "plain-value-xyz", "sk-not-a-whsec"} {
					if strings.Contains(err.Error(), s) {
						t.Errorf("the problem %q quotes a secret value", err)
					}
				}
			}
		})
	}
	// Webhooks resolves the secret where the profile runs.
	p, _ := tools.DecodeProfile([]byte(`{"webhooks": [{"url": "https://hooks.example.com/t", "events": ["turn/end"], "secret_secret": "acme/hook"}]}`))
	hooks, err := profile.Webhooks(ctx, p, webhookEnv(false), true)
	if err != nil || len(hooks) != 1 || len(hooks[0].Secret) != 24 || hooks[0].URL != "https://hooks.example.com/t" {
		t.Fatalf("Webhooks = %+v, %v; want one hook with its 24-byte key", hooks, err)
	}
}

// TestDecodeWebhooks: the decoder refuses unknown keys and a secret written out, at
// their paths; an override's webhooks replace the default's.
func TestDecodeWebhooks(t *testing.T) {
	for _, c := range []struct{ profile, want string }{
		{`{"webhooks": [{"url": "https://x/", "events": ["*"], "secret": "whsec_abc"}]}`, "webhooks[0].secret: a secret is never written in a profile"},
		{`{"webhooks": [{"url": "https://x/", "events": ["*"], "headers": {}}]}`, "webhooks[0].headers: unknown key (url, events, secret_env, secret_secret)"},
		{`{"webhooks": {"url": "https://x/"}}`, "webhooks: want an array"},
		{`{"webhooks": [{"url": 5}]}`, "webhooks[0].url: want a string"},
		{`{"webhooks": ["https://x/"]}`, "webhooks[0]: want an object"},
	} {
		_, err := tools.DecodeProfile([]byte(c.profile))
		if !errors.Is(err, tools.ErrBadProfile) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeProfile(%s) = %v, want a problem containing %q", c.profile, err, c.want)
		}
	}
	def, _ := tools.DecodeProfile([]byte(`{"webhooks": [{"url": "https://a/", "events": ["*"], "secret_env": "A"}]}`))
	own, _ := tools.DecodeProfile([]byte(`{"webhooks": [{"url": "https://b/", "events": ["turn/end"], "secret_env": "B"}]}`))
	if got := def.Merge(own).Webhooks; len(got) != 1 || got[0].URL != "https://b/" {
		t.Errorf("Merge: webhooks %+v, want the override's", got)
	}
	if got := def.Merge(tools.Profile{}).Webhooks; len(got) != 1 || got[0].URL != "https://a/" {
		t.Errorf("Merge of an override without webhooks: %+v, want the default's", got)
	}
}
