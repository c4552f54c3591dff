package stack

import (
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/terret/terret-ws/internal/socket"
)

// TestOriginSecret: the optional OriginSecret parameter is NoEcho with an empty default;
// when set, CloudFront adds it as socket.OriginHeader to every origin request, and the
// connect function (the one that checks it) gets it as ORIGIN_SECRET; no other function
// sees it. A rule refuses the secret without CloudFront, which would lock every client
// out.
func TestOriginSecret(t *testing.T) {
	t.Parallel()
	root := rawTemplate(t)
	p := yamlPath(root, "Parameters", "OriginSecret")
	if p == nil || yamlPath(p, "NoEcho") == nil || yamlPath(p, "NoEcho").Value != "true" ||
		yamlPath(p, "Default") == nil || yamlPath(p, "Default").Value != "" {
		t.Fatal(`parameter OriginSecret must exist with NoEcho: true and Default: ""`)
	}
	h := yamlPath(root, "Resources", "Distribution", "Properties", "DistributionConfig", "Origins")
	if h == nil || h.Kind != yaml.SequenceNode || len(h.Content) != 2 {
		t.Fatal("Distribution has not exactly two origins (the socket's API, the http function)")
	}
	for _, origin := range h.Content {
		cond, yes, no, ok := ifOf(yamlPath(origin, "OriginCustomHeaders"))
		if !ok || !conditionOn(root, cond, "OriginSecret", "", true) || no.Value != "AWS::NoValue" ||
			yes.Kind != yaml.SequenceNode || len(yes.Content) != 1 {
			t.Fatal("the origin's OriginCustomHeaders must be !If [HasOriginSecret, [one header], !Ref AWS::NoValue]")
		}
		name, value := yamlPath(yes.Content[0], "HeaderName"), yamlPath(yes.Content[0], "HeaderValue")
		if name == nil || name.Value != socket.OriginHeader || value == nil || value.Tag != "!Ref" || value.Value != "OriginSecret" {
			t.Errorf("origin custom header = %v: %v, want %s: !Ref OriginSecret", name, value, socket.OriginHeader)
		}
	}

	s := loadStack(t)
	for _, f := range functions(t, s) {
		env, err := s.Environment(f)
		if err != nil {
			t.Fatal(err)
		}
		v, has := env["ORIGIN_SECRET"]
		if want := f.LogicalID == "ConnectFunction" || f.LogicalID == "HttpFunction"; has != want || (has && v != "${OriginSecret}") {
			t.Errorf("%s: ORIGIN_SECRET = %q (set %v); want it on ConnectFunction and HttpFunction alone, from OriginSecret", f.LogicalID, v, has)
		}
	}

	rule := yamlPath(root, "Rules", "OriginSecretNeedsCloudFront")
	rc := yamlPath(rule, "RuleCondition")
	if rule == nil || rc == nil || rc.Tag != "!Not" || len(rc.Content) != 1 || rc.Content[0].Tag != "!Equals" ||
		rc.Content[0].Content[0].Value != "OriginSecret" {
		t.Fatal("no rule OriginSecretNeedsCloudFront conditioned on a non-empty OriginSecret")
	}
	as := yamlPath(rule, "Assertions")
	if as == nil || len(as.Content) != 1 {
		t.Fatal("OriginSecretNeedsCloudFront has not one assertion")
	}
	a := yamlPath(as.Content[0], "Assert")
	if a == nil || a.Tag != "!Equals" || a.Content[0].Value != "EnableCloudFront" || a.Content[1].Value != "true" {
		t.Error(`OriginSecretNeedsCloudFront must assert !Equals [!Ref EnableCloudFront, "true"]`)
	}
}
