package stack

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestCloudFrontHttpPaths: the agent paths over HTTP reach the http function's URL
// through the socket's distribution — events, frames and schedules each by a behaviour
// of their own, to an origin that is the function URL's host with the origin secret;
// the URL streams (RESPONSE_STREAM) with the token checked in code (AuthType NONE); the
// cache key holds the token, Accept, Last-Event-ID and the whole query so that nothing
// could be served to another client, and Host is never forwarded.
func TestCloudFrontHttpPaths(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	fn := func(k ...string) any {
		return s.Get(append([]string{"Resources", "HttpFunction", "Properties"}, k...)...)
	}
	if fn("FunctionUrlConfig", "AuthType") != "NONE" || fn("FunctionUrlConfig", "InvokeMode") != "RESPONSE_STREAM" {
		t.Errorf("HttpFunction FunctionUrlConfig = %v, want AuthType NONE and InvokeMode RESPONSE_STREAM", fn("FunctionUrlConfig"))
	}
	if fn("Timeout") != 900.0 {
		t.Errorf("HttpFunction Timeout = %v, want 900 (a stream lasts its invocation: Lambda's 15 minutes)", fn("Timeout"))
	}
	var origins []struct {
		ID                 string `json:"Id"`
		DomainName         any
		OriginPath         string
		CustomOriginConfig struct {
			OriginProtocolPolicy string
			OriginReadTimeout    float64
		}
	}
	if err := s.Decode(&origins, "Resources", "Distribution", "Properties", "DistributionConfig", "Origins"); err != nil {
		t.Fatal(err)
	}
	// The origin's DomainName is the function URL's host: !Select [2, !Split ["/", URL]].
	raw := yamlPath(rawTemplate(t), "Resources", "Distribution", "Properties", "DistributionConfig", "Origins")
	var httpOrigin string
	for i, o := range origins {
		dn, err := yaml.Marshal(yamlPath(raw.Content[i], "DomainName"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(dn), "HttpFunctionUrl.FunctionUrl") && strings.Contains(string(dn), "!Select") {
			httpOrigin = o.ID
			if o.CustomOriginConfig.OriginProtocolPolicy != "https-only" || o.OriginPath != "" || o.CustomOriginConfig.OriginReadTimeout < 21 {
				t.Errorf("http origin %+v: want https-only, no path, a read timeout above a long-poll's 20 s", o)
			}
		}
	}
	if httpOrigin == "" {
		t.Fatalf("no origin is the http function's URL: %+v", origins)
	}
	var behaviours []struct {
		PathPattern, TargetOriginId, ViewerProtocolPolicy, CachePolicyId, OriginRequestPolicyId string
		AllowedMethods                                                                          []string
	}
	if err := s.Decode(&behaviours, "Resources", "Distribution", "Properties", "DistributionConfig", "CacheBehaviors"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"/agents/*/events": "GET", "/agents/*/frames": "POST", "/agents/*/schedules*": "DELETE"}
	for _, b := range behaviours {
		method, ok := want[b.PathPattern]
		if !ok {
			t.Errorf("behaviour for %s: not an agent path over HTTP", b.PathPattern)
			continue
		}
		delete(want, b.PathPattern)
		if b.TargetOriginId != httpOrigin || b.ViewerProtocolPolicy != "https-only" || b.CachePolicyId != "${HttpCachePolicy}" || b.OriginRequestPolicyId != "${HttpOriginRequestPolicy}" || !contains(b.AllowedMethods, method) {
			t.Errorf("behaviour %+v: want the http origin over https with the http policies, allowing %s", b, method)
		}
	}
	if len(want) > 0 {
		t.Errorf("no behaviour for %v", keys(want))
	}
	key := []string{"Resources", "HttpCachePolicy", "Properties", "CachePolicyConfig", "ParametersInCacheKeyAndForwardedToOrigin"}
	if h := stringsAt(s, append(key, "HeadersConfig", "Headers")...); !equalSets(h, []string{"Authorization", "Accept", "Last-Event-ID"}) {
		t.Errorf("http cache key headers %v, want Authorization, Accept, Last-Event-ID", h)
	}
	if q := s.Get(append(key, "QueryStringsConfig", "QueryStringBehavior")...); q != "all" {
		t.Errorf("http cache key query strings %v, want all", q)
	}
	if ttl := s.Get("Resources", "HttpCachePolicy", "Properties", "CachePolicyConfig", "DefaultTTL"); ttl != 0.0 {
		t.Errorf("http cache policy DefaultTTL %v, want 0", ttl)
	}
	for _, h := range stringsAt(s, "Resources", "HttpOriginRequestPolicy", "Properties", "OriginRequestPolicyConfig", "HeadersConfig", "Headers") {
		if strings.EqualFold(h, "Host") || strings.EqualFold(h, "Authorization") {
			t.Errorf("http origin request policy forwards %s", h)
		}
	}
}
