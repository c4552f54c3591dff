package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/httpapi"
	"github.com/terret/terret-ws/internal/schedule"
	"github.com/terret/terret-ws/internal/webhook"
)

// atRoot runs the test from the repository's root, as the bench runs (functions/ and
// events/ are read relative to it).
func atRoot(t *testing.T) {
	t.Helper()
	t.Chdir(filepath.Join("..", ".."))
}

var testSubs = coldSubs{ConnID: "test00cold=", Token: "tt_test-token", Origin: "test-origin-secret-0123456789abcdef", FireAt: "2026-12-07T05:38:30Z"}

// TestColdEventForEveryFunction fails when a function under functions/ has no sample
// event, or is missing from the cold phase's order: the phase would fail at its end.
func TestColdEventForEveryFunction(t *testing.T) {
	atRoot(t)
	names, err := functionNames()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 2 {
		t.Fatalf("functionNames() = %v, want every functions/X and hello", names)
	}
	for _, n := range names {
		if !slices.Contains(coldOrder, n) {
			t.Errorf("function %s is not in coldOrder %v", n, coldOrder)
		}
		if n == "hello" {
			continue
		}
		ev, err := coldEvent(n, testSubs)
		if err != nil {
			t.Errorf("coldEvent(%s): %v", n, err)
			continue
		}
		var v map[string]any
		if err := json.Unmarshal(ev, &v); err != nil || len(v) == 0 {
			t.Errorf("coldEvent(%s) = %s: want a non-empty JSON object (%v)", n, ev, err)
		}
	}
}

// TestColdEventSubstitutions checks what each round puts into the sample events.
func TestColdEventSubstitutions(t *testing.T) {
	atRoot(t)
	raw, err := coldEvent("connect", testSubs)
	if err != nil {
		t.Fatal(err)
	}
	var ws events.APIGatewayWebsocketProxyRequest
	if err := json.Unmarshal(raw, &ws); err != nil {
		t.Fatal(err)
	}
	if ws.RequestContext.ConnectionID != testSubs.ConnID || ws.Headers["Authorization"] != "Bearer "+testSubs.Token ||
		ws.Headers[httpapi.OriginHeader] != testSubs.Origin {
		t.Errorf("connect event: connection %q, headers %v", ws.RequestContext.ConnectionID, ws.Headers)
	}

	raw, err = coldEvent("http", testSubs)
	if err != nil {
		t.Fatal(err)
	}
	var url events.LambdaFunctionURLRequest
	if err := json.Unmarshal(raw, &url); err != nil {
		t.Fatal(err)
	}
	if url.RequestContext.HTTP.Method != "GET" || url.RawPath != "/agents/agent-1/events" || !strings.Contains(url.RawQueryString, "from_seq=") {
		t.Errorf("http event: %s %s?%s, want GET of agent-1's events", url.RequestContext.HTTP.Method, url.RawPath, url.RawQueryString)
	}
	if url.Headers["authorization"] != "Bearer "+testSubs.Token || url.Headers[strings.ToLower(httpapi.OriginHeader)] != testSubs.Origin {
		t.Errorf("http event headers: %v", url.Headers)
	}
	for k := range url.Headers {
		if k != strings.ToLower(k) {
			t.Errorf("http event header %q: a function URL event's header names are lower case", k)
		}
	}

	raw, err = coldEvent("schedule", testSubs)
	if err != nil {
		t.Fatal(err)
	}
	var fire schedule.FireInput
	if err := json.Unmarshal(raw, &fire); err != nil {
		t.Fatal(err)
	}
	if fire.AgentID == "" || fire.AgentID == "agent-1" || fire.ScheduleID == "" || fire.FireAt != testSubs.FireAt {
		t.Errorf("schedule event: %+v", fire)
	}

	raw, err = coldEvent("webhook", testSubs)
	if err != nil {
		t.Fatal(err)
	}
	var sqs events.SQSEvent
	if err := json.Unmarshal(raw, &sqs); err != nil {
		t.Fatal(err)
	}
	if len(sqs.Records) == 0 || sqs.Records[0].EventSource != "aws:sqs" {
		t.Fatalf("webhook event: %s, want a batch of the webhook queue", raw)
	}
	for _, m := range sqs.Records {
		var job webhook.Job
		if err := json.Unmarshal([]byte(m.Body), &job); err != nil || job.AgentID == "" || job.URL == "" || job.ID == "" {
			t.Errorf("webhook event: message %s's body is no job: %s (%v)", m.MessageId, m.Body, err)
		}
	}
}

// TestSampleEventsAreJSON checks every sample event of events/ (they are also `sam
// local invoke` fixtures).
func TestSampleEventsAreJSON(t *testing.T) {
	atRoot(t)
	files, err := filepath.Glob(filepath.Join("events", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no events/*.json")
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for n, f := range coldEvents {
		if _, err := os.Stat(filepath.Join("events", f)); err != nil {
			t.Errorf("%s's sample event: %v", n, err)
		}
	}
}

// TestColdSampleEventsDecodeStrictly: the samples of the functions whose events are
// not WebSocket or stream events decode, with no field left over, into the type their
// handler takes (internal/stack's TestSampleEvents holds every file of events/ to this).
func TestColdSampleEventsDecodeStrictly(t *testing.T) {
	atRoot(t)
	for name, v := range map[string]any{
		"http":     &events.LambdaFunctionURLRequest{},
		"schedule": &schedule.FireInput{},
		"webhook":  &events.SQSEvent{},
	} {
		raw, err := os.ReadFile(filepath.Join("events", coldEvents[name]))
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil || dec.More() {
			t.Errorf("%s: not exactly a %T: %v", coldEvents[name], v, err)
		}
	}
}

// TestLambdaEnvLoads checks that every function's environment under the emulator has
// every variable config.Vars names, with values the function's configuration accepts.
func TestLambdaEnvLoads(t *testing.T) {
	atRoot(t)
	names, err := functionNames()
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{st: &stack{cfg: config.Config{LogTable: "log", ConnectionsTable: "connections", AgentsTable: "agents",
		DynamoDBEndpoint: "http://127.0.0.1:8000", ReplayLimit: config.DefaultReplayLimit,
		MaxConcurrentReplays: config.DefaultMaxConcurrentReplays, OutboundQueue: config.DefaultOutboundQueue}}}
	for _, n := range names {
		env, err := b.lambdaEnv(n, "http://127.0.0.1:1234", testSubs.Origin)
		if err != nil {
			t.Errorf("lambdaEnv(%s): %v", n, err)
			continue
		}
		if n == "hello" {
			continue
		}
		vars := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
		for _, v := range config.Vars(n) {
			if _, ok := vars[v]; !ok {
				t.Errorf("%s: %s not set", n, v)
			}
		}
		if _, err := config.LoadFrom(n, func(k string) string { return vars[k] }); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

// TestColdAnswer checks that a refusal or a failed record fails a cold start.
func TestColdAnswer(t *testing.T) {
	nul := "\x00\x00\x00\x00\x00\x00\x00\x00"
	for _, c := range []struct {
		name, body string
		ok         bool
	}{
		{"connect", `{"statusCode":200,"headers":null,"body":""}`, true},
		{"connect", `{"statusCode":401,"headers":null,"body":""}`, false},
		{"http", `{"statusCode":200,"headers":{}}` + nul + `{"epoch":"e","events":[{"seq":0}],"next_seq":1,"last_seq":0}` + "\n", true},
		{"http", `{"statusCode":401,"headers":{}}` + nul + `{"type":"error","code":"unauthorized"}` + "\n", false},
		{"http", `{"statusCode":200,"headers":{}}` + nul + `{"epoch":"e","events":[],"next_seq":0,"last_seq":0}` + "\n", false},
		{"webhook", `{"batchItemFailures":null}`, true},
		{"webhook", `{"batchItemFailures":[{"itemIdentifier":"m1"}]}`, false},
		{"deliver", `{"batchItemFailures":[]}`, true},
		{"schedule", `null`, true},
	} {
		if err := coldAnswer(c.name, []byte(c.body)); (err == nil) != c.ok {
			t.Errorf("coldAnswer(%s, %q) = %v, want ok %v", c.name, c.body, err, c.ok)
		}
	}
}
