package mcpspec

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
)

// Secrets fetches headers_secret references (Secrets Manager or SSM); *secret.Store
// is one.
type Secrets interface {
	Get(ctx context.Context, ref string) (string, error)
}

// credentialHeader matches header names whose value is a credential: such a value is
// never written in a profile, only named (headers_env, headers_secret).
var credentialHeader = regexp.MustCompile(`(?i)(auth|token|key|secret|passw|cookie|session|credential|signature)`)

// IsCredentialHeader reports whether a header named name carries a credential, so its
// value may not be written in a profile and is redacted wherever a profile is shown.
func IsCredentialHeader(name string) bool { return credentialHeader.MatchString(name) }

var envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validateHeaders checks headers, headers_env and headers_secret of a url server: a
// credential header given literally is refused, a header named twice too.
func (c Config) validateHeaders() error {
	seen := map[string]string{}
	for _, f := range []struct {
		field string
		m     map[string]string
	}{{"headers", c.Headers}, {"headers_env", c.HeadersEnv}, {"headers_secret", c.HeadersSecret}} {
		for _, name := range sortedNames(f.m) {
			v := f.m[name]
			path := f.field + "." + name
			canon := http.CanonicalHeaderKey(name)
			switch {
			case name == "" || strings.ContainsAny(name, " \t\r\n:"):
				return fieldErr(path, "not a header name")
			case seen[canon] != "":
				return fieldErr(path, "header %s is also given in %s", name, seen[canon])
			case f.field == "headers" && IsCredentialHeader(name):
				return fieldErr(path, "a secret is never written in a profile: name it with headers_env (an environment variable) or headers_secret (Secrets Manager or SSM)")
			case f.field == "headers_env" && !envVarName.MatchString(v):
				return fieldErr(path, "%q is not an environment variable name", v)
			case f.field == "headers_secret" && strings.TrimSpace(v) == "":
				return fieldErr(path, "empty secret reference")
			}
			seen[canon] = f.field
		}
	}
	return nil
}

// Lookup is where header references resolve.
type Lookup struct {
	// LookupEnv finds the variables headers_env names (nil: none is read).
	LookupEnv func(name string) (string, bool)
	// Secrets fetches headers_secret references (nil: they are refused).
	Secrets Secrets
}

// ResolveHeaders returns the headers every request carries — the literal ones and the
// values the references name, looked up through o — and every value, for scrubbing.
// The values are secrets: never in an error.
func (c Config) ResolveHeaders(ctx context.Context, o Lookup) (map[string]string, []string, error) {
	out := make(map[string]string, len(c.Headers)+len(c.HeadersEnv)+len(c.HeadersSecret))
	for k, v := range c.Headers {
		out[k] = v
	}
	var secrets []string
	for _, name := range sortedNames(c.HeadersEnv) {
		env := c.HeadersEnv[name]
		if o.LookupEnv == nil {
			return nil, nil, fieldErr("headers_env."+name, "no environment is read where this profile runs: on AWS name the value with headers_secret")
		}
		v, ok := o.LookupEnv(env)
		if v = strings.TrimSpace(v); !ok || v == "" {
			return nil, nil, fieldErr("headers_env."+name, "environment variable %s is not set (locally it may also be in .env in the working directory)", env)
		}
		out[name], secrets = v, append(secrets, v)
	}
	for _, name := range sortedNames(c.HeadersSecret) {
		if o.Secrets == nil {
			return nil, nil, fieldErr("headers_secret."+name, "no secret store here: use headers_env locally")
		}
		v, err := o.Secrets.Get(ctx, c.HeadersSecret[name])
		if err != nil {
			return nil, nil, fieldErr("headers_secret."+name, "%v", err)
		}
		out[name], secrets = v, append(secrets, v)
	}
	for _, v := range c.Headers {
		secrets = append(secrets, v) // not credentials, but kept out of errors all the same
	}
	return out, secrets, nil
}

// CheckHeaders resolves cfg's header references where o runs, without connecting: the
// check `terret agent put` and a profile load make. It returns a *FieldError naming
// the reference.
func CheckHeaders(ctx context.Context, cfg Config, o Lookup) error {
	_, _, err := cfg.ResolveHeaders(ctx, o)
	return err
}

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// describeHeaders names the headers of c for a printed config, values left out.
func (c Config) describeHeaders() string {
	var names []string
	names = append(names, sortedNames(c.Headers)...)
	for _, n := range sortedNames(c.HeadersEnv) {
		names = append(names, n+"(env "+c.HeadersEnv[n]+")")
	}
	for _, n := range sortedNames(c.HeadersSecret) {
		names = append(names, n+"(secret)")
	}
	return fmt.Sprintf("%q", names)
}
