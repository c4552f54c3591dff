package stack

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	terretws "github.com/terret/terret-ws"
)

// rewriteSource is the CloudFront function's source; template.yaml embeds it.
const rewriteSource = "infra/cloudfront/agent-path.js"

// TestCloudFrontFunctionCode: the FunctionCode embedded in template.yaml is
// infra/cloudfront/agent-path.js byte for byte, under !Sub, and the only reference it
// makes is ${Stage}, a parameter. The two copies cannot drift.
func TestCloudFrontFunctionCode(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), rewriteSource))
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(terretws.Template, &doc); err != nil {
		t.Fatal(err)
	}
	code := yamlPath(doc.Content[0], "Resources", "AgentPathRewrite", "Properties", "FunctionCode")
	if code == nil {
		t.Fatal("template.yaml has no Resources.AgentPathRewrite.Properties.FunctionCode")
	}
	if code.Tag != "!Sub" || code.Kind != yaml.ScalarNode {
		t.Fatalf("FunctionCode is %s %v, want a !Sub of the source text", code.Tag, code.Kind)
	}
	if code.Value != string(src) {
		t.Errorf("template.yaml's FunctionCode differs from %s: paste the file into the !Sub | block (8 spaces of indentation)\n%s",
			rewriteSource, firstDifference(code.Value, string(src)))
	}
	refs := subRefs(string(src))
	if strings.Join(refs, ",") != "Stage" {
		t.Errorf("%s references %v; only ${Stage} may appear (the file is a !Sub template)", rewriteSource, refs)
	}
	if yamlPath(doc.Content[0], "Parameters", "Stage") == nil {
		t.Error("no Stage parameter for the function's ${Stage}")
	}
}

// TestCloudFrontFunctionBehaviour runs the function's unit tests with Node's built-in
// test runner: the rewrite to the stage with ?agent_id=, 400 for a bad agent id, 404 for
// other paths.
func TestCloudFrontFunctionBehaviour(t *testing.T) {
	t.Parallel()
	node := tool(t, "node", "runs the CloudFront function's tests")
	out := run(t, repoRoot(t), nil, time.Minute, node, "--test", strings.TrimSuffix(rewriteSource, ".js")+".test.js")
	if !strings.Contains(out, "# fail 0") || strings.Contains(out, "# pass 0\n") {
		t.Errorf("node --test:\n%s", out)
	}
}

// TestCloudFrontDistribution: the optional front door serves the protocol's URL. Every
// piece is conditional; the function runs at viewer-request; Authorization reaches API
// Gateway through the cache policy (an origin request policy may not carry it, and
// CloudFront takes headers into a cache key only if MaxTTL > 0); the handshake headers
// and the query string through the origin request policy; Host is never forwarded.
func TestCloudFrontDistribution(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	// The socket's pieces, and the agent paths over HTTP's (cloudfront_http_test.go).
	cf := map[string][]string{
		"AWS::CloudFront::Function":            {"AgentPathRewrite"},
		"AWS::CloudFront::CachePolicy":         {"AuthorizationCachePolicy", "HttpCachePolicy"},
		"AWS::CloudFront::OriginRequestPolicy": {"WebSocketOriginRequestPolicy", "HttpOriginRequestPolicy"},
		"AWS::CloudFront::Distribution":        {"Distribution"},
	}
	for typ, ids := range cf {
		if got := s.Resources(typ); !equalSets(got, ids) {
			t.Errorf("%s resources = %v, want %v", typ, got, ids)
		}
		for _, id := range ids {
			if s.Get("Resources", id, "Condition") != "CloudFrontEnabled" {
				t.Errorf("%s must have Condition CloudFrontEnabled", id)
			}
		}
	}
	if got := jsonScalar(s.Get("Parameters", "EnableCloudFront", "Default")); got != "false" {
		t.Errorf("EnableCloudFront default = %q, want false", got)
	}
	p := func(id string, k ...string) any {
		return s.Get(append([]string{"Resources", id, "Properties"}, k...)...)
	}
	if p("AgentPathRewrite", "FunctionConfig", "Runtime") != "cloudfront-js-2.0" || p("AgentPathRewrite", "AutoPublish") != true {
		t.Errorf("function: Runtime %v AutoPublish %v", p("AgentPathRewrite", "FunctionConfig", "Runtime"), p("AgentPathRewrite", "AutoPublish"))
	}

	cp := func(k ...string) any {
		return p("AuthorizationCachePolicy", append([]string{"CachePolicyConfig"}, k...)...)
	}
	if cp("MinTTL") != 0.0 || cp("DefaultTTL") != 0.0 {
		t.Errorf("cache policy MinTTL %v DefaultTTL %v, want 0: nothing is cached unless the origin asks", cp("MinTTL"), cp("DefaultTTL"))
	}
	if ttl, _ := cp("MaxTTL").(float64); ttl < 1 || ttl > 60 {
		t.Errorf("cache policy MaxTTL %v: CloudFront refuses cache-key headers when every TTL is 0; keep it small but >= 1", cp("MaxTTL"))
	}
	// Whatever CloudFront might cache is keyed by everything that tells one client from
	// another: the agent (the query string the viewer-request function sets) and the token
	// in either place it travels. Then no handshake response can reach another agent's
	// client, nor one client's refusal another client of the same agent.
	keyParams := []string{"ParametersInCacheKeyAndForwardedToOrigin"}
	keyHeaders := stringsAt(s, "Resources", "AuthorizationCachePolicy", "Properties", "CachePolicyConfig", keyParams[0], "HeadersConfig", "Headers")
	if cp(append(keyParams, "HeadersConfig", "HeaderBehavior")...) != "whitelist" ||
		!equalSets(keyHeaders, []string{"Authorization", "Sec-WebSocket-Protocol"}) {
		t.Errorf("cache policy headers = %v, want exactly [Authorization Sec-WebSocket-Protocol]", cp(append(keyParams, "HeadersConfig")...))
	}
	if cp(append(keyParams, "QueryStringsConfig", "QueryStringBehavior")...) != "whitelist" ||
		!equalSets(stringsAt(s, "Resources", "AuthorizationCachePolicy", "Properties", "CachePolicyConfig", keyParams[0], "QueryStringsConfig", "QueryStrings"), []string{"agent_id"}) {
		t.Errorf("cache policy query strings = %v, want exactly [agent_id] in the key", cp(append(keyParams, "QueryStringsConfig")...))
	}
	if cp(append(keyParams, "CookiesConfig", "CookieBehavior")...) != "none" {
		t.Error("cache policy: cookies must not be in the key")
	}

	orp := func(k ...string) any {
		return p("WebSocketOriginRequestPolicy", append([]string{"OriginRequestPolicyConfig"}, k...)...)
	}
	headers := stringsAt(s, "Resources", "WebSocketOriginRequestPolicy", "Properties", "OriginRequestPolicyConfig", "HeadersConfig", "Headers")
	if orp("HeadersConfig", "HeaderBehavior") != "whitelist" ||
		!equalSets(headers, []string{"Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Extensions", "CloudFront-Viewer-Address"}) {
		t.Errorf("origin request policy headers = %v %v, want the whitelist of the Sec-WebSocket-* headers not in the cache key and CloudFront-Viewer-Address (the client's address in $connect's log lines)", orp("HeadersConfig", "HeaderBehavior"), headers)
	}
	for _, h := range headers {
		if contains(keyHeaders, h) {
			t.Errorf("origin request policy repeats cache key header %s", h)
		}
		if strings.EqualFold(h, "Authorization") || strings.EqualFold(h, "Host") {
			t.Errorf("origin request policy forwards %s", h)
		}
	}
	qs := orp("QueryStringsConfig", "QueryStringBehavior")
	if qs != "all" && !(qs == "whitelist" && contains(stringsAt(s, "Resources", "WebSocketOriginRequestPolicy", "Properties", "OriginRequestPolicyConfig", "QueryStringsConfig", "QueryStrings"), "agent_id")) {
		t.Errorf("origin request policy query strings %v: agent_id must reach API Gateway", qs)
	}

	dc := func(k ...string) any { return p("Distribution", append([]string{"DistributionConfig"}, k...)...) }
	var origins []struct {
		ID                 string `json:"Id"`
		DomainName         any
		OriginPath         string
		CustomOriginConfig struct{ OriginProtocolPolicy string }
	}
	if err := s.Decode(&origins, "Resources", "Distribution", "Properties", "DistributionConfig", "Origins"); err != nil {
		t.Fatal(err)
	}
	if len(origins) != 2 || origins[0].DomainName != "${WebSocketApi}.execute-api.${AWS::Region}.amazonaws.com" ||
		origins[0].CustomOriginConfig.OriginProtocolPolicy != "https-only" || origins[0].OriginPath != "" {
		t.Fatalf("origins = %+v, want the API's execute-api domain over https, no OriginPath (the function sets the path)", origins)
	}
	b := func(k ...string) any { return dc(append([]string{"DefaultCacheBehavior"}, k...)...) }
	if b("TargetOriginId") != origins[0].ID || b("CachePolicyId") != "${AuthorizationCachePolicy}" || b("OriginRequestPolicyId") != "${WebSocketOriginRequestPolicy}" {
		t.Errorf("default behaviour: origin %v cache policy %v origin request policy %v", b("TargetOriginId"), b("CachePolicyId"), b("OriginRequestPolicyId"))
	}
	if b("ViewerProtocolPolicy") != "https-only" {
		t.Errorf("ViewerProtocolPolicy = %v, want https-only (wss)", b("ViewerProtocolPolicy"))
	}
	var assoc []struct {
		EventType   string
		FunctionARN string
	}
	if err := s.Decode(&assoc, "Resources", "Distribution", "Properties", "DistributionConfig", "DefaultCacheBehavior", "FunctionAssociations"); err != nil {
		t.Fatal(err)
	}
	if len(assoc) != 1 || assoc[0].EventType != "viewer-request" || assoc[0].FunctionARN != "${AgentPathRewrite.FunctionARN}" {
		t.Errorf("function associations = %+v, want AgentPathRewrite at viewer-request", assoc)
	}
	// The default behaviour serves the socket (the function answers 404 for any other
	// path); the agent paths over HTTP have behaviours of their own
	// (TestCloudFrontHttpPaths).

	// CloudFront caches these error codes for 10 s unless told otherwise
	// (https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/HTTPStatusCodes.html):
	// one failed $connect would be served to the clients after it. Each has
	// ErrorCachingMinTTL 0 and no substitute page.
	var errs []struct {
		ErrorCode          int
		ErrorCachingMinTTL *float64
		ResponseCode       any
		ResponsePagePath   any
	}
	if err := s.Decode(&errs, "Resources", "Distribution", "Properties", "DistributionConfig", "CustomErrorResponses"); err != nil {
		t.Fatal(err)
	}
	zero := map[int]bool{}
	for _, e := range errs {
		if e.ErrorCachingMinTTL == nil || *e.ErrorCachingMinTTL != 0 || e.ResponseCode != nil || e.ResponsePagePath != nil {
			t.Errorf("CustomErrorResponses %d: want only ErrorCachingMinTTL 0, got %+v", e.ErrorCode, e)
		}
		zero[e.ErrorCode] = true
	}
	for _, code := range []int{400, 403, 404, 405, 414, 416, 500, 501, 502, 503, 504} {
		if !zero[code] {
			t.Errorf("CustomErrorResponses lacks %d: CloudFront would cache that error for 10 s", code)
		}
	}

	// CloudFront function and policy names are global to the account: a second stack of
	// the same name in another region must not collide.
	for id, name := range map[string]string{
		"AgentPathRewrite":             s.String("Resources", "AgentPathRewrite", "Properties", "Name"),
		"AuthorizationCachePolicy":     s.String("Resources", "AuthorizationCachePolicy", "Properties", "CachePolicyConfig", "Name"),
		"WebSocketOriginRequestPolicy": s.String("Resources", "WebSocketOriginRequestPolicy", "Properties", "OriginRequestPolicyConfig", "Name"),
		"Distribution comment":         s.String("Resources", "Distribution", "Properties", "DistributionConfig", "Comment"),
	} {
		if !strings.Contains(name, "${AWS::StackName}") || !strings.Contains(name, "${AWS::Region}") {
			t.Errorf("%s name %q must hold ${AWS::StackName} and ${AWS::Region}", id, name)
		}
	}
}

func stringsAt(s *Stack, keys ...string) []string {
	var out []string
	_ = s.Decode(&out, keys...)
	return out
}

// yamlPath walks mapping nodes along keys.
func yamlPath(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n
}

// subRefs lists the ${...} references of a !Sub template, skipping ${!literal} escapes.
func subRefs(s string) []string {
	var out []string
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			return out
		}
		j := strings.Index(s[i:], "}")
		if j < 0 {
			return append(out, s[i:])
		}
		if ref := s[i+2 : i+j]; !strings.HasPrefix(ref, "!") {
			out = append(out, ref)
		}
		s = s[i+j+1:]
	}
}

func firstDifference(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(la) || i < len(lb); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n  template: " + x + "\n  file:     " + y
		}
	}
	return ""
}
