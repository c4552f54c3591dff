package stack

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// iamMatch reports whether resource matches an IAM resource pattern: * is any run of
// characters (slashes and colons included), ? one character.
func iamMatch(pattern, resource string) bool {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range pattern {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String()).MatchString(resource)
}

// TestBedrockGrantCoversDocumentedModels: every Bedrock call docs/agents.md shows is
// allowed by the runner's grant, in a stack deployed to us-east-1. A call through an
// inference profile is authorized on the profile, in the region the call is made in
// (the provider's region), and on the foundation model in the region the profile routes
// it to (https://docs.aws.amazon.com/bedrock/latest/userguide/inference-profiles-prereq.html).
// The "bedrock-eu" provider (region eu-central-1) with an eu. profile was denied while
// the grant named the stack's region only.
func TestBedrockGrantCoversDocumentedModels(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "agents.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, shown := range []string{`"bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0"`, `"bedrock-eu": {"kind": "bedrock", "region": "eu-central-1"}`} {
		if !strings.Contains(string(doc), shown) {
			t.Fatalf("docs/agents.md no longer shows %s; update this test's calls", shown)
		}
	}
	const account = "123456789012"
	var granted []string
	for _, g := range grants(t, functions(t, loadStack(t))["RunnerFunction"]) {
		for _, a := range g.Actions {
			if a == "bedrock:InvokeModelWithResponseStream" {
				granted = append(granted, strings.NewReplacer("${AWS::Partition}", "aws", "${AWS::Region}", "us-east-1", "${AWS::AccountId}", account).Replace(g.Resource))
			}
		}
	}
	for _, c := range []struct{ call, resource string }{
		{"bedrock/us.anthropic… from us-east-1: the profile", "arn:aws:bedrock:us-east-1:" + account + ":inference-profile/us.anthropic.claude-sonnet-4-20250514-v1:0"},
		{"bedrock/us.anthropic… routed to us-west-2: the model", "arn:aws:bedrock:us-west-2::foundation-model/anthropic.claude-sonnet-4-20250514-v1:0"},
		{"bedrock-eu/eu.anthropic… from eu-central-1: the profile", "arn:aws:bedrock:eu-central-1:" + account + ":inference-profile/eu.anthropic.claude-sonnet-4-20250514-v1:0"},
		{"bedrock-eu/eu.anthropic… routed to eu-west-3: the model", "arn:aws:bedrock:eu-west-3::foundation-model/anthropic.claude-sonnet-4-20250514-v1:0"},
		{"bedrock-eu/an application profile of eu-central-1", "arn:aws:bedrock:eu-central-1:" + account + ":application-inference-profile/abc123"},
		{"a global profile: the model, no region", "arn:aws:bedrock:::foundation-model/anthropic.claude-sonnet-4-20250514-v1:0"},
	} {
		ok := false
		for _, g := range granted {
			ok = ok || iamMatch(g, c.resource)
		}
		if !ok {
			t.Errorf("%s: %s is not granted by %v", c.call, c.resource, granted)
		}
	}
	// Another account's profile stays out.
	for _, g := range granted {
		if iamMatch(g, "arn:aws:bedrock:eu-central-1:999999999999:inference-profile/eu.anthropic.claude-sonnet-4-20250514-v1:0") {
			t.Errorf("%s grants another account's inference profile", g)
		}
	}
}

// TestMockRoutes: the template's only MOCK route is keepalive, two-way, answering
// {"type":"keepalive"} (the frame `terret dev` answers too: it reads the same map).
func TestMockRoutes(t *testing.T) {
	t.Parallel()
	got, err := loadStack(t).MockRoutes()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["keepalive"] != `{"type":"keepalive"}` {
		t.Errorf("MockRoutes() = %q, want only keepalive answering {\"type\":\"keepalive\"}", got)
	}
}

// TestLogTableWarmThroughput: a new on-demand table serves 4,000 write and 12,000 read
// units per second at first (docs/scale.md, "A new table's first peak"); the optional
// LogTableWarm*Units parameters pre-warm the log table, and left at -1 (the default)
// leave the table as DynamoDB creates it: no WarmThroughput at all. One set alone
// keeps the other at DynamoDB's own start.
func TestLogTableWarmThroughput(t *testing.T) {
	t.Parallel()
	root := rawTemplate(t)
	for _, param := range []string{"LogTableWarmWriteUnits", "LogTableWarmReadUnits"} {
		if d := yamlPath(root, "Parameters", param, "Default"); d == nil || d.Value != "-1" {
			t.Errorf("parameter %s must default to -1 (DynamoDB's own warm throughput)", param)
		}
	}
	cond, yes, no, ok := ifOf(yamlPath(root, "Resources", "LogTable", "Properties", "WarmThroughput"))
	if !ok || no.Tag != "!Ref" || no.Value != "AWS::NoValue" {
		t.Fatal("LogTable WarmThroughput must be !If [C, {...}, !Ref AWS::NoValue]")
	}
	c := yamlPath(root, "Conditions", cond)
	if c == nil || c.Tag != "!Or" || len(c.Content) != 2 {
		t.Fatalf("condition %s must be !Or of the two parameters' conditions", cond)
	}
	for _, w := range []struct{ key, param, start string }{{"WriteUnitsPerSecond", "LogTableWarmWriteUnits", "4000"}, {"ReadUnitsPerSecond", "LogTableWarmReadUnits", "12000"}} {
		sub, v, other, ok := ifOf(yamlPath(yes, w.key))
		if !ok || v.Tag != "!Ref" || v.Value != w.param || other.Value != w.start || !conditionOn(root, sub, w.param, "-1", true) {
			t.Errorf("WarmThroughput.%s must be !If [C, !Ref %s, %s] with C = !Not [!Equals [!Ref %s, -1]]", w.key, w.param, w.start, w.param)
		}
	}
	for _, id := range []string{"ConnectionsTable", "AgentsTable"} {
		if yamlPath(root, "Resources", id, "Properties", "WarmThroughput") != nil {
			t.Errorf("%s has a WarmThroughput; only the log table takes the parameters", id)
		}
	}
}

// TestIdleCostNamesAlarms: docs/cost.md prices what is billed while nothing runs; its
// count of alarms and of the alarm metrics they read ($0.10 each a month) is the
// template's.
func TestIdleCostNamesAlarms(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	alarms, metricsRead := 0, 0
	for _, id := range s.Resources("AWS::CloudWatch::Alarm") {
		alarms++
		var a metricAlarm
		if err := s.Decode(&a, "Resources", id, "Properties"); err != nil {
			t.Fatal(err)
		}
		if len(a.Metrics) == 0 {
			metricsRead++ // a plain metric alarm reads one
			continue
		}
		for _, m := range a.Metrics {
			if m.MetricStat != nil {
				metricsRead++
			}
		}
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "cost.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(doc)), " ")
	if want := fmt.Sprintf("%d of them reading %d alarm metrics", alarms, metricsRead); !strings.Contains(text, want) {
		t.Errorf("docs/cost.md does not say %q", want)
	}
}
