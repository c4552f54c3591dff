package stack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/config"
)

// TestLint runs cfn-lint, AWS's CloudFormation linter, on template.yaml. cfn-lint works
// offline: it carries the resource specifications of every region and runs the SAM
// transform itself (samtranslator), so it checks the template CloudFormation would
// receive. It is part of this kind of machine (pip); PyPI is out of reach here, so
// scripts/deps.sh checks for it rather than installing it.
func TestLint(t *testing.T) {
	t.Parallel()
	lint := tool(t, "cfn-lint", "lints template.yaml")
	root := repoRoot(t)
	// Warnings and informational findings count too: the template lints clean.
	if out, err := runErr(root, nil, 2*time.Minute, lint, "--include-checks", "I", "--", "template.yaml"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("cfn-lint template.yaml: %v\n%s", err, out)
	}
	// The linter is live: a broken copy fails it, in a SAM event source property (checked
	// only through the transform) and in a CloudFront attribute.
	broken := bytes.Replace(terretws.Template, []byte("StartingPosition: LATEST"), []byte("StartingPosition: NEWEST"), 1)
	broken = bytes.Replace(broken, []byte("AgentPathRewrite.FunctionARN"), []byte("AgentPathRewrite.Arn"), 1)
	path := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(path, broken, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runErr(root, nil, 2*time.Minute, lint, "--", path)
	if err == nil || !strings.Contains(out, "'NEWEST'") || !strings.Contains(out, "'Arn' is not one of") {
		t.Errorf("cfn-lint passed a broken template (err %v):\n%s", err, out)
	}
}

// samTranslate is run by python3 with cfn-lint's own SAM transform (the same code path
// as TestLint) and prints the CloudFormation template SAM makes of template.yaml.
const samTranslate = `
import json, sys
from cfnlint.decode import decode
from cfnlint.template.transforms._sam import Transform
tpl, matches = decode(sys.argv[1])
if matches:
    sys.exit("decode: %s" % matches)
t = Transform(sys.argv[1], tpl, "us-east-1")
matches = t.transform_template()
if matches:
    sys.exit("transform: %s" % matches)
json.dump(t.template(), sys.stdout)
`

// transformed returns template.yaml as SAM's transform (cfn-lint's) expands it, as JSON.
func transformed(t *testing.T) string {
	t.Helper()
	tool(t, "cfn-lint", "its SAM transform expands the template")
	py := tool(t, "python3", "runs cfn-lint's SAM transform")
	out, err := runErr(repoRoot(t), nil, 2*time.Minute, py, "-c", samTranslate, "template.yaml")
	if err != nil {
		t.Fatalf("SAM transform: %v\n%s", err, out)
	}
	return out
}

// TestTransformedRoles checks the execution roles SAM generates, which are what a
// function can do in the end: the inline statements of the template, AWS's basic
// execution policy (CloudWatch Logs) for every function, the DynamoDB streams policy for
// deliver (its event source mappings read the streams), sqs:SendMessage on the
// dead-letter queue for the functions that fail into it, and nothing else.
func TestTransformedRoles(t *testing.T) {
	t.Parallel()
	out := transformed(t)
	var doc struct {
		Resources map[string]struct {
			Type       string
			Properties json.RawMessage
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("transformed template: %v\n%.2000s", err, out)
	}
	const (
		basic   = "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
		streams = "arn:aws:iam::aws:policy/service-role/AWSLambdaDynamoDBExecutionRole"
	)
	wantManaged := map[string][]string{
		"ConnectFunctionRole":    {basic},
		"MessageFunctionRole":    {basic},
		"DisconnectFunctionRole": {basic},
		"DeliverFunctionRole":    {basic, streams},
		"RunnerFunctionRole":     {basic},
		// The webhook function reads the log's stream and polls its queue.
		"WebhookFunctionRole":  {basic, streams, "arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole"},
		"HttpFunctionRole":     {basic},
		"ScheduleFunctionRole": {basic},
	}
	sqsSenders := map[string]bool{"DeliverFunctionRole": true, "RunnerFunctionRole": true, "WebhookFunctionRole": true, "ScheduleFunctionRole": true}
	var roles []string
	for id, r := range doc.Resources {
		if r.Type == "AWS::IAM::Role" && id != "SchedulerRole" { // TestSchedulerRole
			roles = append(roles, id)
		}
		if r.Type == "AWS::IAM::Policy" || r.Type == "AWS::IAM::ManagedPolicy" {
			t.Errorf("the transform made a separate policy %s", id)
		}
	}
	sort.Strings(roles)
	if !equalSets(roles, keys(wantManaged)) {
		t.Fatalf("roles = %v, want one per function %v", roles, keys(wantManaged))
	}
	for _, id := range roles {
		var role struct {
			AssumeRolePolicyDocument struct {
				Statement []struct {
					Action    StringList
					Principal struct{ Service StringList }
				}
			}
			ManagedPolicyArns []string
			Policies          []struct {
				PolicyName     string
				PolicyDocument struct {
					Statement []struct {
						Action   StringList
						Resource any
					}
				}
			}
			PermissionsBoundary any
		}
		if err := json.Unmarshal(doc.Resources[id].Properties, &role); err != nil {
			t.Fatal(err)
		}
		if !equalSets(role.ManagedPolicyArns, wantManaged[id]) {
			t.Errorf("%s managed policies = %v, want %v", id, role.ManagedPolicyArns, wantManaged[id])
		}
		if a := role.AssumeRolePolicyDocument.Statement; len(a) != 1 || strings.Join(a[0].Principal.Service, ",") != "lambda.amazonaws.com" {
			t.Errorf("%s trusts %+v, want lambda.amazonaws.com only", id, a)
		}
		fn := strings.TrimSuffix(id, "Role")
		var sqs int
		for _, p := range role.Policies {
			switch p.PolicyName {
			case fn + "RolePolicy0": // the template's statements, checked by TestGrants
			default:
				for _, st := range p.PolicyDocument.Statement {
					ref, _ := json.Marshal(st.Resource)
					if strings.Join(st.Action, ",") != "sqs:SendMessage" || string(ref) != `{"Fn::GetAtt":["DeadLetterQueue","Arn"]}` {
						t.Errorf("%s: SAM added %s: %v on %s", id, p.PolicyName, st.Action, ref)
					}
					sqs++
				}
			}
		}
		if sqsSenders[id] != (sqs > 0) {
			t.Errorf("%s: sqs:SendMessage on the dead-letter queue = %v, want %v", id, sqs > 0, sqsSenders[id])
		}
	}
}

// TestTransformedTemplate checks what SAM makes of the template's functions and routes,
// which DynamoDB Local and the local gateway never see: every function, once the
// Globals are merged in, has each variable internal/config needs for it, and
// METRICS_NAMESPACE names the stack (two stacks in one account keep their metrics
// apart); the keepalive route is served by a MOCK integration (no Lambda, no DynamoDB).
func TestTransformedTemplate(t *testing.T) {
	t.Parallel()
	out := transformed(t)
	var doc struct {
		Resources map[string]struct {
			Type       string
			Properties struct {
				Environment struct {
					Variables map[string]any
				}
				RouteKey        string
				Target          map[string]string
				IntegrationType string
				// The keepalive's route response and integration response.
				RouteResponseSelectionExpression string
				RouteID                          map[string]string `json:"RouteId"`
				IntegrationID                    map[string]string `json:"IntegrationId"`
				RouteResponseKey                 string
				IntegrationResponseKey           string
				TemplateSelectionExpression      string
				ResponseTemplates                map[string]string
			}
			DependsOn any
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("transformed template: %v\n%.2000s", err, out)
	}
	for _, fn := range wantFunctions {
		r, ok := doc.Resources[fn]
		if !ok || r.Type != "AWS::Lambda::Function" {
			t.Errorf("%s: %s after the transform, want AWS::Lambda::Function", fn, r.Type)
			continue
		}
		vars := r.Properties.Environment.Variables
		for _, v := range config.Vars(FunctionName(fn)) {
			if _, ok := vars[v]; !ok {
				t.Errorf("%s: no %s in its environment after the transform", fn, v)
			}
		}
		if ns := fmt.Sprint(vars["METRICS_NAMESPACE"]); !strings.Contains(ns, "${AWS::StackName}") {
			t.Errorf("%s: METRICS_NAMESPACE %s, want one naming the stack", fn, ns)
		}
	}
	var keepalive, keepaliveRoute string
	for id, r := range doc.Resources {
		if r.Type == "AWS::ApiGatewayV2::Route" && r.Properties.RouteKey == "keepalive" {
			keepalive = strings.TrimSuffix(strings.TrimPrefix(r.Properties.Target["Fn::Sub"], "integrations/${"), "}")
			keepaliveRoute = id
			// Two-way: without a route response API Gateway sends nothing back, and a
			// connection through CloudFront, which counts only bytes from the origin to
			// the client, is closed after 10 minutes however often the client sends.
			if r.Properties.RouteResponseSelectionExpression != "$default" {
				t.Errorf("the keepalive route's RouteResponseSelectionExpression is %q, want $default (two-way)", r.Properties.RouteResponseSelectionExpression)
			}
		}
	}
	if in, ok := doc.Resources[keepalive]; !ok || in.Properties.IntegrationType != "MOCK" {
		t.Errorf("the keepalive route's integration %q is %q, want a MOCK integration", keepalive, in.Properties.IntegrationType)
	}
	// Exactly one route response, on the keepalive route, and one integration response,
	// on its MOCK integration, whose one template is the frame the local gateway answers.
	var routeResponses, integrationResponses []string
	for id, r := range doc.Resources {
		switch r.Type {
		case "AWS::ApiGatewayV2::RouteResponse":
			routeResponses = append(routeResponses, id)
			if r.Properties.RouteID["Ref"] != keepaliveRoute || r.Properties.RouteResponseKey != "$default" {
				t.Errorf("%s: route response on %v key %q, want on %s key $default", id, r.Properties.RouteID, r.Properties.RouteResponseKey, keepaliveRoute)
			}
		case "AWS::ApiGatewayV2::IntegrationResponse":
			integrationResponses = append(integrationResponses, id)
			p := r.Properties
			if p.IntegrationID["Ref"] != keepalive || p.IntegrationResponseKey != "$default" || p.TemplateSelectionExpression != `\$default` {
				t.Errorf("%s: integration response on %v key %q selection %q, want on %s, key $default, selection \\$default", id, p.IntegrationID, p.IntegrationResponseKey, p.TemplateSelectionExpression, keepalive)
			}
			if len(p.ResponseTemplates) != 1 || p.ResponseTemplates["$default"] != `{"type":"keepalive"}` {
				t.Errorf("%s: response templates %q, want only $default = {\"type\":\"keepalive\"}", id, p.ResponseTemplates)
			}
		}
	}
	if len(routeResponses) != 1 || len(integrationResponses) != 1 {
		t.Errorf("route responses %v and integration responses %v, want one of each (the keepalive's)", routeResponses, integrationResponses)
	}
	deps, _ := json.Marshal(doc.Resources["WebSocketStage"].DependsOn)
	for _, id := range append(routeResponses, integrationResponses...) {
		if !strings.Contains(string(deps), `"`+id+`"`) {
			t.Errorf("WebSocketStage does not depend on %s: its first deployment may lack the keepalive's answer", id)
		}
	}
}
