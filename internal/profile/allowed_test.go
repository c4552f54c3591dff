package profile_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/profile"
	"github.com/terret/terret-ws/internal/tools"
)

// TestAllowsModel: allowed_models globs, else the specs the profile names for any role,
// and scripted only for a role that runs it by default.
func TestAllowsModel(t *testing.T) {
	acme := map[string]json.RawMessage{"acme": json.RawMessage(`{"kind":"openai","base_url":"http://x/v1"}`)}
	scripted := profile.Deployment{Main: "scripted", Titler: "scripted"}
	// The template's defaults with a real main model: TitlerModel stays scripted.
	aws := profile.Deployment{Main: "bedrock/anthropic.claude", Titler: "scripted"}
	type roleSpec struct{ role, spec string }
	for _, c := range []struct {
		name    string
		p       tools.Profile
		deploy  profile.Deployment
		allowed []roleSpec
		refused []roleSpec
	}{
		{name: "globs", p: tools.Profile{AllowedModels: []string{"acme/gpt-4o*", "bedrock/anthropic.{claude-3-5,claude-3}*", "scripted"}},
			allowed: []roleSpec{{"main", "acme/gpt-4o"}, {"titler", "acme/gpt-4o-mini"}, {"main", "bedrock/anthropic.claude-3-5-sonnet"}, {"main", "scripted"}, {"compactor", "scripted"}},
			refused: []roleSpec{{"main", "acme/gpt-5"}, {"main", "bedrock/meta.llama"}, {"main", "other/gpt-4o"}, {"main", "scripted2"}}},
		{name: "star spans the slash", p: tools.Profile{AllowedModels: []string{"*"}},
			allowed: []roleSpec{{"main", "acme/x"}, {"main", "scripted"}}},
		{name: "empty list allows nothing", p: tools.Profile{AllowedModels: []string{}, Models: tools.Models{Main: "acme/m"}}, deploy: scripted,
			refused: []roleSpec{{"main", "acme/m"}, {"main", "scripted"}, {"titler", "scripted"}}},
		{name: "providers: the named models only", p: tools.Profile{Providers: acme, Models: tools.Models{Main: "acme/m", Titler: "acme/t"}},
			deploy:  scripted,
			allowed: []roleSpec{{"main", "acme/m"}, {"main", "acme/t"}, {"titler", "acme/m"}, {"compactor", "acme/t"}},
			refused: []roleSpec{{"main", "scripted"}, {"titler", "scripted"}, {"compactor", "scripted"}, {"main", "acme/other"}, {"main", "bedrock/x"}}},
		{name: "providers: the compactor is named too", p: tools.Profile{Providers: acme, Models: tools.Models{Main: "acme/m", Compactor: "acme/c"}},
			allowed: []roleSpec{{"main", "acme/m"}, {"main", "acme/c"}},
			refused: []roleSpec{{"main", "acme/t"}, {"main", "scripted"}}},
		{name: "providers naming scripted for the titler", p: tools.Profile{Providers: acme, Models: tools.Models{Main: "acme/m", Titler: "scripted"}},
			allowed: []roleSpec{{"main", "acme/m"}, {"titler", "acme/m"}, {"titler", "scripted"}},
			refused: []roleSpec{{"main", "scripted"}, {"compactor", "scripted"}}},
		{name: "providers naming scripted for main", p: tools.Profile{Providers: acme, Models: tools.Models{Main: "scripted", Titler: "acme/t"}},
			allowed: []roleSpec{{"main", "scripted"}, {"compactor", "scripted"}, {"main", "acme/t"}},
			refused: []roleSpec{{"titler", "scripted"}}},
		{name: "demo: no providers, a scripted deployment", p: tools.DefaultProfile(), deploy: scripted,
			allowed: []roleSpec{{"main", "scripted"}, {"titler", "scripted"}, {"compactor", "scripted"}},
			refused: []roleSpec{{"main", "bedrock/anthropic.claude"}, {"main", "acme/x"}}},
		{name: "no providers, a deployment model and a scripted titler", p: tools.Profile{}, deploy: aws,
			allowed: []roleSpec{{"main", "bedrock/anthropic.claude"}, {"titler", "bedrock/anthropic.claude"}, {"titler", "scripted"}},
			refused: []roleSpec{{"main", "scripted"}, {"compactor", "scripted"}, {"main", "bedrock/other"}}},
		{name: "no providers, the profile's main over a scripted deployment", p: tools.Profile{Models: tools.Models{Main: "bedrock/m"}}, deploy: scripted,
			allowed: []roleSpec{{"main", "bedrock/m"}, {"titler", "scripted"}},
			refused: []roleSpec{{"main", "scripted"}, {"compactor", "scripted"}}},
		{name: "an unknown role never runs scripted", p: tools.DefaultProfile(), deploy: scripted,
			refused: []roleSpec{{"narrator", "scripted"}}},
	} {
		for _, s := range c.allowed {
			if !profile.AllowsModel(c.p, s.role, s.spec, c.deploy) {
				t.Errorf("%s: %s for %s refused, want allowed", c.name, s.spec, s.role)
			}
		}
		for _, s := range c.refused {
			if profile.AllowsModel(c.p, s.role, s.spec, c.deploy) {
				t.Errorf("%s: %s for %s allowed, want refused", c.name, s.spec, s.role)
			}
		}
	}
}

// TestCheckAllowedModels: `terret agent put` and terret dev refuse a bad allowed_models
// at its JSON path.
func TestCheckAllowedModels(t *testing.T) {
	ctx := context.Background()
	if err := profile.Check(ctx, decode(t, `{"models": {"main": "bedrock/m"}, "allowed_models": ["bedrock/*", "scripted"]}`), env()); err != nil {
		t.Fatalf("Check(good) = %v", err)
	}
	for _, c := range []struct{ name, profile, want string }{
		{"not a list", `{"allowed_models": "scripted"}`, `allowed_models: want an array, got JSON string`},
		{"not a string", `{"allowed_models": ["scripted", 7]}`, `allowed_models[1]: want a string, got JSON number`},
		{"empty glob", `{"allowed_models": ["scripted", ""]}`, `allowed_models[1]: empty glob`},
		{"long glob", `{"allowed_models": ["` + strings.Repeat("a", profile.MaxAllowedChars+1) + `"]}`, `allowed_models[0]: 257 characters, at most 256 allowed`},
		{"too many", `{"allowed_models": [` + strings.Repeat(`"a/b",`, profile.MaxAllowedModels) + `"a/c"]}`, `allowed_models: 65 globs, at most 64 allowed`},
		{"own model refused", `{"models": {"main": "bedrock/m", "titler": "scripted"}, "allowed_models": ["bedrock/*"]}`, `models.titler: "scripted" is not in allowed_models`},
	} {
		p, err := tools.DecodeProfile([]byte(c.profile))
		if err == nil {
			err = profile.Check(ctx, p, env())
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestCheckMCPHeaders: a literal credential header is refused at its JSON path, a
// header reference is resolved like a provider key.
func TestCheckMCPHeaders(t *testing.T) {
	ctx := context.Background()
	good := `{"tools": [{"name": "d", "kind": "mcp", "spec": {"url": "https://mcp.example.com/mcp", "headers": {"X-Tenant": "acme"},
	  "headers_env": {"Authorization": "ACME_KEY"}, "headers_secret": {"X-Api-Key": "acme/key"}}}]}`
	if err := profile.Check(ctx, decode(t, good), env()); err != nil {
		t.Fatalf("Check(good) = %v", err)
	}
	for _, c := range []struct{ name, spec, want string }{
		{"literal", `{"url": "https://m/mcp", "headers": {"Authorization": "Bearer sk-lit"}}`, `tools[0].spec.headers.Authorization: a secret is never written in a profile`},
		{"unset", `{"url": "https://m/mcp", "headers_env": {"Authorization": "NOPE"}}`, `tools[0].spec.headers_env.Authorization: environment variable NOPE is not set`},
		{"missing secret", `{"url": "https://m/mcp", "headers_secret": {"Authorization": "acme/gone"}}`, `tools[0].spec.headers_secret.Authorization: secret: not found`},
	} {
		err := profile.Check(ctx, decode(t, `{"tools": [{"name": "d", "kind": "mcp", "spec": `+c.spec+`}]}`), env())
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "sk-lit") {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestRedact: what `terret agent get` prints keeps references and plain headers and
// hides literal credentials a profile stored before they were refused may hold.
func TestRedact(t *testing.T) {
	raw := `{"system":"S","providers":{"p":{"kind":"openai","api_key":"sk-old"}},"tools":[{"name":"echo"},
	  {"name":"d","kind":"mcp","spec":{"url":"https://m/mcp","headers":{"Authorization":"Bearer sk-lit","X-Tenant":"acme"},"headers_env":{"X-Api-Key":"ACME_KEY"}}}]}`
	out := string(profile.Redact([]byte(raw)))
	for _, s := range []string{"sk-old", "sk-lit"} {
		if strings.Contains(out, s) {
			t.Errorf("Redact left %s: %s", s, out)
		}
	}
	for _, s := range []string{`"X-Tenant":"acme"`, `"X-Api-Key":"ACME_KEY"`, `"Authorization":"[redacted]"`, `"api_key":"[redacted]"`, `"system":"S"`} {
		if !strings.Contains(out, s) {
			t.Errorf("Redact lost %s: %s", s, out)
		}
	}
	if plain := `{"system":"S"}`; string(profile.Redact([]byte(plain))) != plain {
		t.Errorf("Redact changed a profile with nothing to hide")
	}
}
