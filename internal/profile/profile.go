// Package profile checks an agent profile against where it will run and makes it
// runnable: its providers become a model registry with their keys resolved (from the
// environment or from Secrets Manager / SSM), its tools are checked against the tool
// kinds the runtime builds. `terret dev`, the deployed functions and `terret agent put`
// share it, so a profile that passes here runs there.
//
// A provider is an entry of the profile's "providers":
//
//	"acme":    {"kind": "openai", "base_url": "https://api.acme.example/v1",
//	            "api_key_env": "ACME_KEY", "max_tokens": 4096, "temperature": 0.2}
//	"local":   {"kind": "openai", "base_url": "http://127.0.0.1:11434/v1"}
//	"bedrock": {"max_tokens": 4096}
//	"bedrock-eu": {"kind": "bedrock", "region": "eu-central-1"}
//	"vault":   {"kind": "openai", "base_url": "…", "api_key_secret": "ssm:/terret/acme-key"}
//
// The provider named "bedrock" needs no kind and is always configured (the Bedrock
// Converse API through the default AWS credentials); "openai" without a kind is an
// "openai" provider. A key is never written in a profile: "api_key" is refused.
package profile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/model/openai"
	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/tools/mcpspec"
)

// Provider kinds.
const (
	KindOpenAI  = "openai"
	KindBedrock = "bedrock"
)

// Bedrock is the provider name that is always configured.
const Bedrock = "bedrock"

// Secrets fetches api_key_secret references; *secret.Store is one.
type Secrets interface {
	Get(ctx context.Context, ref string) (string, error)
}

// Env is where a profile runs: what its references resolve against.
type Env struct {
	// LookupEnv finds the variables api_key_env names (nil: none is set).
	LookupEnv func(name string) (string, bool)
	// Secrets fetches api_key_secret references (nil: they are refused).
	Secrets Secrets
	// Kinds are the tool kinds the runtime builds; nil: every kind this repository
	// has (builtin, lambda, mcp).
	Kinds []string
	// NoCommand refuses MCP servers started from a command (in Lambda there is no
	// such program to start).
	NoCommand bool
	// Bedrock builds the provider of a bedrock entry: region ("" the default) and its
	// settings. Needed by Models only; nil: DeclaredBedrock. The processes that run
	// turns set it (package agentservice/turns: model/bedrock over a client per
	// region); the others resolve a bedrock spec (set_model) but call no model, and
	// do not link the Bedrock client.
	Bedrock func(region string, c BedrockConfig) model.Provider
	// HTTP sends OpenAI-compatible requests (nil: a client of its own).
	HTTP *http.Client
	// Rules compiles a profile's rules over tool arguments (package rules' Rules);
	// its error names each rule that does not compile. nil: the rules' expressions
	// are not compiled here (a process that runs no turn; the runner compiles them).
	Rules func(rs []tools.Rule) (tools.RuleSet, error)
	// LocalWebhooks admits webhook receivers on loopback addresses, over http too
	// (`terret dev`); otherwise a receiver is https on a public address.
	LocalWebhooks bool
	// SkipWebhookSecrets checks webhooks' secret references without fetching them:
	// the agent runtime signs no webhook (the webhook function fetches them).
	SkipWebhookSecrets bool
}

// BedrockConfig is a bedrock provider entry's inference settings, applied to every call
// of its models (model/bedrock's Config).
type BedrockConfig struct {
	MaxTokens   int32
	Temperature *float32
}

// DeclaredBedrock is the Bedrock provider of a process that runs no turn: a model id
// resolves as the runner's provider resolves it (any non-empty id), so set_model
// accepts the same specs, but a call fails with ErrNoModelClient.
func DeclaredBedrock(region string, _ BedrockConfig) model.Provider {
	return declaredBedrock{}
}

// ErrNoModelClient: a model of DeclaredBedrock was called.
var ErrNoModelClient = errors.New("profile: this process builds no Bedrock client (only the runner runs turns)")

type declaredBedrock struct{}

func (declaredBedrock) Model(name string) (model.Model, error) {
	if strings.TrimSpace(name) == "" {
		return nil, fmt.Errorf("%w: bedrock: empty model id", model.ErrBadSpec)
	}
	return declaredModel{}, nil
}

type declaredModel struct{}

func (declaredModel) Stream(context.Context, model.Request, func(model.Delta) error) (model.Response, error) {
	return model.Response{}, ErrNoModelClient
}

// provider is one parsed providers entry.
type provider struct {
	kind      string
	openai    openai.Config // key not yet resolved
	bedrock   BedrockConfig
	region    string
	keyEnv    string
	keySecret string
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Check reports every problem of p where env runs it, each at its JSON path, as a
// *tools.ProfileError: unknown keys and kinds, providers that do not parse, model
// roles naming a provider p does not configure, tools of unknown kinds or invalid
// specs, keys that cannot be found (api_key_env unset, api_key_secret missing),
// credentials sent where they may not go (checkDestinations). ctx bounds secret
// fetches.
func Check(ctx context.Context, p tools.Profile, env Env) error {
	pe := &tools.ProfileError{}
	provs := parseProviders(ctx, pe, p, env, true)
	checkDestinations(pe, p, provs)
	checkModels(pe, p, provs)
	checkAllowed(pe, p)
	checkTools(ctx, pe, p, env)
	checkRules(pe, p, env)
	checkWebhooks(ctx, pe, p, env, !env.SkipWebhookSecrets)
	return pe.Err()
}

// checkRules compiles p's rules where env can, recording each that does not compile.
func checkRules(pe *tools.ProfileError, p tools.Profile, env Env) {
	if env.Rules == nil || len(p.Rules) == 0 {
		return
	}
	_, err := env.Rules(p.Rules)
	var rpe *tools.ProfileError
	switch {
	case errors.As(err, &rpe):
		pe.Problems = append(pe.Problems, rpe.Problems...)
	case err != nil:
		pe.Add("rules", "%v", err)
	}
}

// KeyEnvs lists the environment variables p's providers name with api_key_env, sorted,
// each once: what a process that runs p needs besides the profile (`terret dev
// --lambda-emulator` hands them to the functions). It reads none of them.
func KeyEnvs(p tools.Profile) []string {
	provs := parseProviders(context.Background(), &tools.ProfileError{}, p, Env{}, false)
	seen := map[string]bool{}
	var out []string
	for _, name := range sortedKeys(provs) {
		if v := provs[name].keyEnv; v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// Models returns the registry of p's providers, keys resolved (Bedrock is always
// there). It returns a *tools.ProfileError for a profile Check rejects.
func Models(ctx context.Context, p tools.Profile, env Env) (*model.Registry, error) {
	pe := &tools.ProfileError{}
	provs := parseProviders(ctx, pe, p, env, true)
	checkDestinations(pe, p, provs)
	if err := pe.Err(); err != nil {
		return nil, err
	}
	if _, ok := provs[Bedrock]; !ok {
		provs[Bedrock] = provider{kind: KindBedrock}
	}
	reg := model.NewRegistry()
	names := sortedKeys(provs)
	for _, name := range names {
		pr := provs[name]
		var mp model.Provider
		switch pr.kind {
		case KindOpenAI:
			o, err := openai.NewProvider(doer(env.HTTP), pr.openai)
			if err != nil {
				pe.Add("providers."+name, "%v", err)
				continue
			}
			mp = o
		case KindBedrock:
			build := env.Bedrock
			if build == nil {
				build = DeclaredBedrock
			}
			mp = build(pr.region, pr.bedrock)
		}
		if err := reg.Register(name, mp); err != nil {
			pe.Add("providers."+name, "%v", err)
		}
	}
	if err := pe.Err(); err != nil {
		return nil, err
	}
	return reg, nil
}

func doer(c *http.Client) openai.Doer {
	if c == nil {
		return nil
	}
	return c
}

// Configured returns the provider names p configures, with "bedrock" and "scripted",
// sorted: what a model spec may name.
func Configured(p tools.Profile) []string {
	set := map[string]bool{Bedrock: true, model.SpecScripted: true}
	for name := range p.Providers {
		set[name] = true
	}
	return sortedKeys(set)
}

// CheckSpec says why spec is not a model p can run, or nil: a spec that does not
// parse, or a provider p does not configure.
func CheckSpec(p tools.Profile, spec string) error {
	prov, _, err := model.ParseSpec(spec)
	if err != nil {
		return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), model.ErrBadSpec.Error()+": "))
	}
	if prov == model.SpecScripted || prov == Bedrock {
		return nil
	}
	if _, ok := p.Providers[prov]; !ok {
		return fmt.Errorf("no provider %q is configured (configured: %s)", prov, strings.Join(Configured(p), ", "))
	}
	return nil
}

func checkModels(pe *tools.ProfileError, p tools.Profile, provs map[string]provider) {
	for _, r := range []struct{ role, spec string }{{"main", p.Models.Main}, {"titler", p.Models.Titler}, {"compactor", p.Models.Compactor}} {
		if r.spec == "" {
			continue
		}
		if err := CheckSpec(p, r.spec); err != nil {
			pe.Add("models."+r.role, "%v", err)
		}
	}
}

func checkTools(ctx context.Context, pe *tools.ProfileError, p tools.Profile, env Env) {
	kinds := env.Kinds
	if kinds == nil {
		kinds = []string{tools.KindBuiltin, "lambda", mcpspec.Kind}
	}
	known := map[string]bool{tools.KindBuiltin: true}
	for _, k := range kinds {
		known[k] = true
	}
	builtin := map[string]bool{}
	for _, n := range tools.BuiltinNames() {
		builtin[n] = true
	}
	seen := map[string]int{}
	for i, t := range p.Tools {
		path := fmt.Sprintf("tools[%d]", i)
		if j, dup := seen[t.Name]; dup {
			pe.Add(path+".name", "%q is also the name of tools[%d]", t.Name, j)
		}
		seen[t.Name] = i
		kind := t.Kind
		if kind == "" {
			kind = tools.KindBuiltin
		}
		if !known[kind] {
			pe.Add(path+".kind", "unknown tool kind %q (known: %s)", kind, strings.Join(sortedKeys(known), ", "))
			continue
		}
		switch kind {
		case tools.KindBuiltin:
			if !builtin[t.Name] {
				pe.Add(path+".name", "no builtin tool %q (builtin: %s); give a kind for other tools", t.Name, strings.Join(tools.BuiltinNames(), ", "))
			}
		case mcpspec.Kind:
			cfg, err := mcpspec.ParseConfig(t.Spec)
			var fe *mcpspec.FieldError
			switch {
			case len(t.Spec) == 0:
				pe.Add(path+".spec", "required: {\"url\": …} or {\"command\": […]}")
			case errors.As(err, &fe):
				pe.Add(path+".spec."+fe.Field, "%s", fe.Message)
			case err != nil:
				pe.Add(path+".spec", "%s", strings.TrimPrefix(err.Error(), mcpspec.ErrBadConfig.Error()+": "))
			case len(cfg.Command) > 0 && env.NoCommand:
				pe.Add(path+".spec.command", "a command MCP server cannot run in AWS Lambda (no such program there); serve it over streamable HTTP and give spec.url")
			default:
				// Header references resolve as provider keys do; values stay out of messages.
				if err := mcpspec.CheckHeaders(ctx, cfg, mcpspec.Lookup{LookupEnv: env.LookupEnv, Secrets: env.Secrets}); errors.As(err, &fe) {
					pe.Add(path+".spec."+fe.Field, "%s", fe.Message)
				}
			}
		}
	}
}

var openaiKeys = map[string]bool{"kind": true, "base_url": true, "api_key_env": true, "api_key_secret": true, "max_tokens": true, "temperature": true}
var bedrockKeys = map[string]bool{"kind": true, "region": true, "max_tokens": true, "temperature": true}

// parseProviders parses every providers entry of p, recording problems; with resolve,
// keys are looked up too.
func parseProviders(ctx context.Context, pe *tools.ProfileError, p tools.Profile, env Env, resolve bool) map[string]provider {
	out := map[string]provider{}
	for _, name := range sortedKeys(p.Providers) {
		path := "providers." + name
		if !model.ValidProviderName(name) || name == model.SpecScripted {
			pe.Add(path, "invalid provider name: use 1-64 of a-z 0-9 _ - (not \"scripted\")")
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(p.Providers[name], &obj); err != nil || obj == nil {
			pe.Add(path, "want an object")
			continue
		}
		n := len(pe.Problems)
		var pr provider
		str(pe, path+".kind", obj["kind"], &pr.kind)
		if pr.kind == "" {
			switch name {
			case KindBedrock, KindOpenAI:
				pr.kind = name
			default:
				pe.Add(path+".kind", "required for a provider not named bedrock: \"openai\" (any OpenAI-compatible endpoint) or \"bedrock\"")
				continue
			}
		}
		var keys map[string]bool
		switch pr.kind {
		case KindOpenAI:
			keys = openaiKeys
		case KindBedrock:
			keys = bedrockKeys
		default:
			pe.Add(path+".kind", "unknown provider kind %q (openai, bedrock)", pr.kind)
			continue
		}
		for _, k := range sortedKeys(obj) {
			switch {
			case k == "api_key":
				pe.Add(path+".api_key", "a key is never written in a profile: name it with api_key_env (an environment variable) or api_key_secret (Secrets Manager or SSM)")
			case !keys[k]:
				pe.Add(path+"."+k, "unknown key (%s)", strings.Join(sortedKeys(keys), ", "))
			}
		}
		var maxTokens int
		if v, ok := obj["max_tokens"]; ok {
			if err := json.Unmarshal(v, &maxTokens); err != nil || maxTokens < 0 {
				pe.Add(path+".max_tokens", "want a non-negative integer")
			}
		}
		var temp *float64
		if v, ok := obj["temperature"]; ok {
			var f float64
			if err := json.Unmarshal(v, &f); err != nil {
				pe.Add(path+".temperature", "want a number")
			} else {
				temp = &f
			}
		}
		switch pr.kind {
		case KindOpenAI:
			str(pe, path+".base_url", obj["base_url"], &pr.openai.BaseURL)
			str(pe, path+".api_key_env", obj["api_key_env"], &pr.keyEnv)
			str(pe, path+".api_key_secret", obj["api_key_secret"], &pr.keySecret)
			u, err := url.Parse(pr.openai.BaseURL)
			switch {
			case pr.openai.BaseURL == "":
				pe.Add(path+".base_url", "required: the API root that /chat/completions is appended to, e.g. https://api.openai.com/v1")
			case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
				pe.Add(path+".base_url", "must be an absolute http(s) URL")
			case u.User != nil || u.RawQuery != "":
				pe.Add(path+".base_url", "must not carry credentials or a query: name the key with api_key_env or api_key_secret")
			}
			pr.openai.MaxTokens, pr.openai.Temperature = maxTokens, temp
			if pr.keyEnv != "" && pr.keySecret != "" {
				pe.Add(path+".api_key_secret", "give api_key_env or api_key_secret, not both")
			}
			if pr.keyEnv != "" && !envName.MatchString(pr.keyEnv) {
				pe.Add(path+".api_key_env", "%q is not an environment variable name", pr.keyEnv)
			}
		case KindBedrock:
			str(pe, path+".region", obj["region"], &pr.region)
			pr.bedrock.MaxTokens = int32(min(maxTokens, 1<<30))
			if temp != nil {
				f := float32(*temp)
				pr.bedrock.Temperature = &f
			}
		}
		if len(pe.Problems) > n {
			continue
		}
		if resolve {
			switch {
			case pr.keyEnv != "":
				if env.LookupEnv == nil {
					pe.Add(path+".api_key_env", "no environment is read where this profile runs: on AWS name the key with api_key_secret")
					continue
				}
				v, ok := env.LookupEnv(pr.keyEnv)
				if !ok || strings.TrimSpace(v) == "" {
					pe.Add(path+".api_key_env", "environment variable %s is not set (locally it may also be in .env in the working directory)", pr.keyEnv)
					continue
				}
				pr.openai.APIKey = strings.TrimSpace(v)
			case pr.keySecret != "":
				if env.Secrets == nil {
					pe.Add(path+".api_key_secret", "no secret store here: use api_key_env locally")
					continue
				}
				v, err := env.Secrets.Get(ctx, pr.keySecret)
				if err != nil {
					pe.Add(path+".api_key_secret", "%v", err)
					continue
				}
				pr.openai.APIKey = v
			}
		}
		out[name] = pr
	}
	return out
}

func str(pe *tools.ProfileError, path string, raw json.RawMessage, v *string) {
	if raw == nil {
		return
	}
	if err := json.Unmarshal(raw, v); err != nil {
		pe.Add(path, "want a string")
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
