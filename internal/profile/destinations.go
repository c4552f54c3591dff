package profile

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/tools/mcpspec"
)

// Where a profile sends credentials (docs/security.md, "Where a profile may send a
// credential"). A profile names credentials — api_key_env and api_key_secret of a
// provider, headers_env and headers_secret of an MCP server — and each goes to one URL:
// the provider's base_url, the server's url. Checking header names alone let a profile
// send any environment variable to any URL, so the checks follow each value to where it
// goes:
//
//   - the runtime's own environment is never sent: a variable named AWS_… (the
//     function's AWS credentials and settings), LAMBDA_… or _LAMBDA_…, or
//     TERRET_TOKEN (an agent's bearer token for terret tail and chat) is refused;
//   - a credential goes over HTTPS, or to a loopback host (a model or server on the
//     same machine);
//   - one credential, one host: a variable or secret reference sent to two hosts (a
//     provider's key also handed to a tool's server elsewhere) is refused at the second
//     place, naming the first.

// runtimeEnvPrefixes name the variables of the runtime itself, never a provider's or
// a tool's key (a name equal to one, without the trailing "_", counts too).
var runtimeEnvPrefixes = []string{"AWS_", "LAMBDA_", "_LAMBDA_", "TERRET_TOKEN"}

// credentialSend is one credential a profile sends: its reference and where.
type credentialSend struct {
	path string // the JSON path naming it
	ref  string // "env NAME" or "secret REF"
	env  string // the variable's name, for an env reference
	url  string
}

// checkDestinations records the problems of where p sends credentials; provs are its
// parsed providers.
func checkDestinations(pe *tools.ProfileError, p tools.Profile, provs map[string]provider) {
	var sends []credentialSend
	for _, name := range sortedKeys(provs) {
		pr := provs[name]
		if pr.kind != KindOpenAI {
			continue
		}
		path := "providers." + name
		if pr.keyEnv != "" {
			sends = append(sends, credentialSend{path: path + ".api_key_env", ref: "env " + pr.keyEnv, env: pr.keyEnv, url: pr.openai.BaseURL})
		}
		if pr.keySecret != "" {
			sends = append(sends, credentialSend{path: path + ".api_key_secret", ref: "secret " + pr.keySecret, url: pr.openai.BaseURL})
		}
	}
	for i, t := range p.Tools {
		if t.Kind != mcpspec.Kind || len(t.Spec) == 0 {
			continue
		}
		cfg, err := mcpspec.ParseConfig(t.Spec)
		if err != nil || cfg.URL == "" {
			continue // checkTools reports it
		}
		path := fmt.Sprintf("tools[%d].spec", i)
		for _, h := range sortedKeys(cfg.HeadersEnv) {
			v := cfg.HeadersEnv[h]
			sends = append(sends, credentialSend{path: path + ".headers_env." + h, ref: "env " + v, env: v, url: cfg.URL})
		}
		for _, h := range sortedKeys(cfg.HeadersSecret) {
			sends = append(sends, credentialSend{path: path + ".headers_secret." + h, ref: "secret " + cfg.HeadersSecret[h], url: cfg.URL})
		}
	}
	first := map[string]credentialSend{} // by reference: where it went first
	for _, c := range sends {
		upper := strings.ToUpper(c.env)
		for _, pre := range runtimeEnvPrefixes {
			if c.env != "" && (strings.HasPrefix(upper, pre) || upper+"_" == pre) {
				pe.Add(c.path, "%s names the runtime's own environment (%s…), which a profile never sends: give the key a variable of its own", c.env, strings.TrimSuffix(pre, "_"))
				break
			}
		}
		host, secure, ok := destination(c.url)
		if !ok {
			continue // the URL's own check reports it
		}
		if !secure {
			pe.Add(c.path, "a credential is sent over https only, or to a loopback host: %s is plain http", host)
		}
		if f, seen := first[c.ref]; seen {
			if fh, _, _ := destination(f.url); fh != host {
				pe.Add(c.path, "%s also goes to %s (%s): a credential is sent to one host only", strings.TrimPrefix(strings.TrimPrefix(c.ref, "env "), "secret "), fh, f.path)
			}
			continue
		}
		first[c.ref] = c
	}
}

// destination is the scheme and host (with its port) a URL sends to, and whether a
// credential may go there in the clear-text sense: https, or http to a loopback host.
func destination(raw string) (host string, secure, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", false, false
	}
	host = strings.ToLower(u.Scheme + "://" + u.Host)
	if u.Scheme == "https" {
		return host, true, true
	}
	name := u.Hostname()
	if strings.EqualFold(name, "localhost") {
		return host, true, true
	}
	ip := net.ParseIP(name)
	return host, ip != nil && ip.IsLoopback(), true
}
