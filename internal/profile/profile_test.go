package profile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/profile"
	"github.com/terret/terret-ws/internal/secret"
	"github.com/terret/terret-ws/internal/tools"
)

// secrets is a secret store holding a map (the real one is tested in package secret).
type secrets map[string]string

func (s secrets) Get(_ context.Context, ref string) (string, error) {
	if v, ok := s[ref]; ok {
		return v, nil
	}
	return "", fmt.Errorf("%w: Secrets Manager secret %s", secret.ErrNotFound, ref)
}

func env() profile.Env {
	vars := map[string]string{"ACME_KEY": "sk-env"}
	return profile.Env{
		LookupEnv: func(n string) (string, bool) { v, ok := vars[n]; return v, ok },
		Secrets:   secrets{"acme/key": "sk-secret"},
	}
}

func decode(t *testing.T, s string) tools.Profile {
	t.Helper()
	p, err := tools.DecodeProfile([]byte(s))
	if err != nil {
		t.Fatalf("DecodeProfile(%s): %v", s, err)
	}
	return p
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	good := `{"system": "S", "models": {"main": "acme/m", "titler": "bedrock/anthropic.claude"},
	  "providers": {"acme": {"kind": "openai", "base_url": "https://api.acme.example/v1", "api_key_env": "ACME_KEY", "max_tokens": 100, "temperature": 0.5},
	                "vault": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "api_key_secret": "acme/key"},
	                "local": {"kind": "openai", "base_url": "http://127.0.0.1:2/v1"},
	                "bedrock": {"max_tokens": 4096}, "bedrock-eu": {"kind": "bedrock", "region": "eu-central-1"}},
	  "tools": [{"name": "echo"}, {"name": "m", "kind": "mcp", "spec": {"command": ["server"]}},
	            {"name": "h", "kind": "mcp", "spec": {"url": "https://mcp.example.com/mcp"}}]}`
	if err := profile.Check(ctx, decode(t, good), env()); err != nil {
		t.Fatalf("Check(good) = %v", err)
	}
	for _, c := range []struct {
		name, profile, want string
		env                 func(*profile.Env)
	}{
		{"unknown provider kind", `{"providers": {"p": {"kind": "anthropic"}}}`, `providers.p.kind: unknown provider kind "anthropic" (openai, bedrock)`, nil},
		{"provider without kind", `{"providers": {"p": {"base_url": "http://x/v1"}}}`, `providers.p.kind: required`, nil},
		{"bad provider name", `{"providers": {"Big": {"kind": "openai"}}}`, `providers.Big: invalid provider name`, nil},
		{"no base_url", `{"providers": {"p": {"kind": "openai"}}}`, `providers.p.base_url: required`, nil},
		{"base_url with a key", `{"providers": {"p": {"kind": "openai", "base_url": "https://u:pw@x/v1"}}}`, `providers.p.base_url: must not carry credentials`, nil},
		{"key in the file", `{"providers": {"p": {"kind": "openai", "base_url": "http://x/v1", "api_key": "sk"}}}`, `providers.p.api_key: a key is never written in a profile`, nil},
		{"unknown provider key", `{"providers": {"bedrock": {"max_token": 1}}}`, `providers.bedrock.max_token: unknown key`, nil},
		{"negative max_tokens", `{"providers": {"bedrock": {"max_tokens": -1}}}`, `providers.bedrock.max_tokens: want a non-negative integer`, nil},
		{"both keys", `{"providers": {"p": {"kind": "openai", "base_url": "http://x/v1", "api_key_env": "ACME_KEY", "api_key_secret": "acme/key"}}}`, `providers.p.api_key_secret: give api_key_env or api_key_secret, not both`, nil},
		{"env unset", `{"providers": {"p": {"kind": "openai", "base_url": "http://x/v1", "api_key_env": "NOPE"}}}`, `providers.p.api_key_env: environment variable NOPE is not set`, nil},
		{"no env here", `{"providers": {"p": {"kind": "openai", "base_url": "http://x/v1", "api_key_env": "ACME_KEY"}}}`, `providers.p.api_key_env: no environment is read where this profile runs: on AWS name the key with api_key_secret`, func(e *profile.Env) { e.LookupEnv = nil }},
		{"secret missing", `{"providers": {"p": {"kind": "openai", "base_url": "http://x/v1", "api_key_secret": "acme/gone"}}}`, `providers.p.api_key_secret: secret: not found: Secrets Manager secret acme/gone`, nil},
		{"no secret store", `{"providers": {"p": {"kind": "openai", "base_url": "http://x/v1", "api_key_secret": "acme/key"}}}`, `providers.p.api_key_secret: no secret store here`, func(e *profile.Env) { e.Secrets = nil }},
		{"model of no provider", `{"models": {"main": "openai/gpt-4o-mini"}}`, `models.main: no provider "openai" is configured (configured: bedrock, scripted)`, nil},
		{"bad model spec", `{"models": {"titler": "scripted/x"}}`, `models.titler: "scripted/x" is not "scripted" or "provider/model"`, nil},
		{"unknown tool kind", `{"tools": [{"name": "echo"}, {"name": "x", "kind": "weird"}]}`, `tools[1].kind: unknown tool kind "weird" (known: builtin, lambda, mcp)`, nil},
		{"unknown builtin", `{"tools": [{"name": "nope"}]}`, `tools[0].name: no builtin tool "nope"`, nil},
		{"duplicate tool", `{"tools": [{"name": "echo"}, {"name": "echo"}]}`, `tools[1].name: "echo" is also the name of tools[0]`, nil},
		{"mcp without spec", `{"tools": [{"name": "m", "kind": "mcp"}]}`, `tools[0].spec: required`, nil},
		{"mcp url and command", `{"tools": [{"name": "m", "kind": "mcp", "spec": {"url": "http://x/mcp", "command": ["s"]}}]}`, `tools[0].spec.command: give url (streamable HTTP) or command (stdio), not both`, nil},
		{"mcp unknown key", `{"tools": [{"name": "m", "kind": "mcp", "spec": {"cmd": ["s"]}}]}`, `tools[0].spec.cmd: unknown key`, nil},
		{"command on Lambda", `{"tools": [{"name": "m", "kind": "mcp", "spec": {"command": ["s"]}}]}`, `tools[0].spec.command: a command MCP server cannot run in AWS Lambda`, func(e *profile.Env) { e.NoCommand = true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := env()
			if c.env != nil {
				c.env(&e)
			}
			err := profile.Check(ctx, decode(t, c.profile), e)
			var pe *tools.ProfileError
			if !errors.As(err, &pe) || !errors.Is(err, tools.ErrBadProfile) {
				t.Fatalf("Check = %v, want a *tools.ProfileError", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("Check = %v, want %q", err, c.want)
			}
		})
	}
}

func TestDecodeProblems(t *testing.T) {
	_, err := tools.DecodeProfile([]byte(`{"sistem": "x", "models": {"main": 3}, "tools": [{"name": "a", "kind": 1, "extra": true}, {"spec": []}], "providers": {"p": "x"}}`))
	var pe *tools.ProfileError
	if !errors.As(err, &pe) {
		t.Fatalf("DecodeProfile = %v, want *tools.ProfileError", err)
	}
	var paths []string
	for _, p := range pe.Problems {
		paths = append(paths, p.Path)
	}
	got, want := strings.Join(paths, " "), "models.main providers.p sistem tools[0].extra tools[0].kind tools[1].spec tools[1].name"
	if got != want {
		t.Errorf("problem paths = %s\nwant %s\n(%v)", got, want, err)
	}
}

func TestModelsResolveKeys(t *testing.T) {
	p := decode(t, `{"providers": {"acme": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "api_key_env": "ACME_KEY"},
	  "vault": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "api_key_secret": "acme/key"}}}`)
	reg, err := profile.Models(context.Background(), p, env())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(reg.Names(), ","), "acme,bedrock,scripted,vault"; got != want {
		t.Errorf("providers = %s, want %s", got, want)
	}
	for _, spec := range []string{"acme/m", "vault/m", "bedrock/anthropic.claude", "scripted"} {
		if _, err := reg.Resolve(spec); err != nil {
			t.Errorf("Resolve(%s) = %v", spec, err)
		}
	}
	if _, err := reg.Resolve("openai/m"); err == nil {
		t.Error("Resolve(openai/m) succeeded without an openai provider")
	}
}

// bedrockBuilds records what Models hands Env.Bedrock for each bedrock entry.
type bedrockBuilds []string

func (b *bedrockBuilds) build(region string, c profile.BedrockConfig) model.Provider {
	temp := "-"
	if c.Temperature != nil {
		temp = fmt.Sprint(*c.Temperature)
	}
	*b = append(*b, fmt.Sprintf("%q max_tokens=%d temperature=%s", region, c.MaxTokens, temp))
	return profile.DeclaredBedrock(region, c)
}

// TestModelsBedrock: each bedrock entry's region and settings reach Env.Bedrock (the
// runner's client per region), the implicit "bedrock" entry too. Without it (a process
// that runs no turn) a bedrock spec resolves as the runner resolves it — an empty
// model id is refused — and a call fails with ErrNoModelClient.
func TestModelsBedrock(t *testing.T) {
	p := decode(t, `{"providers": {"bedrock": {"max_tokens": 4096, "temperature": 0.5}, "bedrock-eu": {"kind": "bedrock", "region": "eu-central-1"}}}`)
	var got bedrockBuilds
	e := env()
	e.Bedrock = got.build
	if _, err := profile.Models(context.Background(), p, e); err != nil {
		t.Fatal(err)
	}
	want := []string{`"" max_tokens=4096 temperature=0.5`, `"eu-central-1" max_tokens=0 temperature=-`}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("Env.Bedrock got %q, want %q", got, want)
	}
	got = nil
	if _, err := profile.Models(context.Background(), decode(t, `{}`), e); err != nil || len(got) != 1 || got[0] != `"" max_tokens=0 temperature=-` {
		t.Errorf("implicit bedrock: Env.Bedrock got %q, %v; want one default build", got, err)
	}

	reg, err := profile.Models(context.Background(), p, env())
	if err != nil {
		t.Fatal(err)
	}
	m, err := reg.Resolve("bedrock-eu/anthropic.claude")
	if err != nil {
		t.Fatalf("Resolve(bedrock-eu/anthropic.claude) = %v", err)
	}
	if _, err := m.Stream(context.Background(), model.Request{}, nil); !errors.Is(err, profile.ErrNoModelClient) {
		t.Errorf("Stream of a declared Bedrock model = %v, want ErrNoModelClient", err)
	}
	if _, err := reg.Resolve("bedrock/ "); !errors.Is(err, model.ErrBadSpec) {
		t.Errorf("Resolve(bedrock/ ) = %v, want ErrBadSpec", err)
	}
}

// TestFileSource: an edited file is used from the next Default; a broken edit keeps
// the last good profile and is logged with its problem.
func TestFileSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "terret.json")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"system": "v1"}`)
	var logs bytes.Buffer
	src, err := profile.NewFileSource(context.Background(), path, env(), slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if got := src.Default().System; got != "v1" {
		t.Fatalf("System = %q, want v1", got)
	}
	write(`{"system": "v2"}`)
	if got := src.Default().System; got != "v2" {
		t.Errorf("after an edit System = %q, want v2", got)
	}
	write(`{"system": "v3", "models": {"main": "nope/x"}}`)
	if got := src.Default().System; got != "v2" {
		t.Errorf("after a broken edit System = %q, want the last good v2", got)
	}
	if !strings.Contains(logs.String(), `models.main: no provider \"nope\" is configured`) {
		t.Errorf("broken edit not logged with its problem:\n%s", logs.String())
	}
	write(`{"system": "v4"}`)
	if got := src.Default().System; got != "v4" {
		t.Errorf("after a fix System = %q, want v4", got)
	}

	write(`{"tools": [{"name": "x", "kind": "weird"}]}`)
	if _, err := profile.NewFileSource(context.Background(), path, env(), nil); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "tools[0].kind") {
		t.Errorf("NewFileSource(broken) = %v, want an error naming the file and tools[0].kind", err)
	}
}

// TestKeyEnvs: the api_key_env names of every provider, sorted, each once; secrets,
// keyless providers and Bedrock name none.
func TestKeyEnvs(t *testing.T) {
	tests := []struct {
		name, profile string
		want          []string
	}{
		{"none", `{}`, nil},
		{"keyless, secret and bedrock", `{"providers": {
			"local": {"kind": "openai", "base_url": "http://127.0.0.1:11434/v1"},
			"vault": {"kind": "openai", "base_url": "https://x.example/v1", "api_key_secret": "acme/key"},
			"bedrock": {"max_tokens": 10}}}`, nil},
		{"sorted and once", `{"providers": {
			"b": {"kind": "openai", "base_url": "https://b.example/v1", "api_key_env": "Z_KEY"},
			"a": {"kind": "openai", "base_url": "https://a.example/v1", "api_key_env": "A_KEY"},
			"c": {"kind": "openai", "base_url": "https://c.example/v1", "api_key_env": "Z_KEY"}}}`, []string{"A_KEY", "Z_KEY"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := profile.KeyEnvs(decode(t, tt.profile))
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("KeyEnvs = %q, want %q", got, tt.want)
			}
		})
	}
}
