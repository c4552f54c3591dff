package stack

import (
	"encoding/json"
	"sort"
	"testing"
)

// TestFunctionURLPermissions checks the resource policy of the http function's URL as
// CloudFormation receives it (after the SAM transform): a function URL with AuthType
// NONE needs two statements for anyone to call it, lambda:InvokeFunctionUrl with the
// URL's auth type and, for URLs created since October 2025, lambda:InvokeFunction on the
// condition that the call comes through the URL
// (https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html). SAM's transform writes
// both for a FunctionUrlConfig with AuthType NONE, so the template declares neither;
// this test fails if a transform stops writing the second, writes it twice, or if any
// other function, or the http function other than through its URL, may be invoked by
// anyone.
func TestFunctionURLPermissions(t *testing.T) {
	t.Parallel()
	out := transformed(t)
	var doc struct {
		Resources map[string]struct {
			Type       string
			Properties map[string]any
		}
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("transformed template: %v\n%.2000s", err, out)
	}
	var urls []string
	for id, r := range doc.Resources {
		if r.Type == "AWS::Lambda::Url" {
			urls = append(urls, id)
		}
	}
	if len(urls) != 1 || urls[0] != "HttpFunctionUrl" {
		t.Fatalf("function URLs = %v, want HttpFunctionUrl only", urls)
	}
	ref, _ := json.Marshal(doc.Resources["HttpFunctionUrl"].Properties["TargetFunctionArn"])
	if string(ref) != `{"Ref":"HttpFunction"}` || doc.Resources["HttpFunctionUrl"].Properties["AuthType"] != "NONE" {
		t.Errorf("HttpFunctionUrl = %v, want AuthType NONE on HttpFunction", doc.Resources["HttpFunctionUrl"].Properties)
	}

	// Every statement that lets anyone ("*") invoke something, by what it allows.
	var public []string
	for id, r := range doc.Resources {
		if r.Type != "AWS::Lambda::Permission" {
			continue
		}
		p := r.Properties
		if p["Principal"] != "*" {
			if _, ok := p["InvokedViaFunctionUrl"]; ok {
				t.Errorf("%s: InvokedViaFunctionUrl on a permission for %v", id, p["Principal"])
			}
			continue
		}
		fn, _ := json.Marshal(p["FunctionName"])
		var kind string
		switch {
		case string(fn) != `{"Ref":"HttpFunction"}`:
			kind = "another function " + string(fn)
		case p["Action"] == "lambda:InvokeFunctionUrl" && p["FunctionUrlAuthType"] == "NONE" && p["InvokedViaFunctionUrl"] == nil:
			kind = "url"
		case p["Action"] == "lambda:InvokeFunction" && p["InvokedViaFunctionUrl"] == true && p["FunctionUrlAuthType"] == nil:
			kind = "invoke-via-url"
		default:
			kind = "unscoped"
		}
		public = append(public, kind)
		if kind != "url" && kind != "invoke-via-url" {
			t.Errorf("%s lets anyone invoke: %v (only the http function, through its URL)", id, p)
		}
	}
	sort.Strings(public)
	if !equalSets(public, []string{"invoke-via-url", "url"}) || len(public) != 2 {
		t.Errorf("public permissions = %v, want exactly one lambda:InvokeFunctionUrl (AuthType NONE) and one lambda:InvokeFunction with InvokedViaFunctionUrl true, both on HttpFunction", public)
	}
}
