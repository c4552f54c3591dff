package stack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/config"
	connstore "github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/service/agentservice"
	"github.com/terret/terret-ws/internal/tables"
	"github.com/terret/terret-ws/internal/tools"
)

const managementEndpoint = "https://${WebSocketApi}.execute-api.${AWS::Region}.amazonaws.com/${Stage}"

// TestFunctionsDeclared: the template declares exactly the five functions, each one a
// directory under functions/ with a main.go, built by the Makefile (BuildMethod makefile
// with CodeUri the repository root, where the Makefile is), with a fixed name and its own
// log group.
func TestFunctionsDeclared(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	fs := functions(t, s)
	if got := keys(fs); !equalSets(got, wantFunctions) {
		t.Fatalf("template functions = %v, want %v", got, wantFunctions)
	}
	var names []string
	for _, f := range fs {
		names = append(names, f.Name)
	}
	if dirs := functionDirs(t); !equalSets(dirs, names) {
		t.Errorf("directories under functions/ = %v, template functions = %v: every directory is deployed and every function has one", dirs, sorted(names))
	}
	for _, f := range fs {
		if _, err := os.Stat(filepath.Join(repoRoot(t), "functions", f.Name, "main.go")); err != nil {
			t.Errorf("%s: %v", f.LogicalID, err)
		}
		if got := f.Metadata["BuildMethod"]; got != "makefile" {
			t.Errorf("%s: Metadata.BuildMethod = %v, want makefile (sam build runs make build-%s)", f.LogicalID, got, f.LogicalID)
		}
		if f.Props.CodeUri != "." {
			t.Errorf("%s: CodeUri = %q, want \".\" (the directory of the Makefile and go.mod)", f.LogicalID, f.Props.CodeUri)
		}
		if want := "${AWS::StackName}-" + f.Name; f.Props.FunctionName != want {
			t.Errorf("%s: FunctionName = %q, want %q", f.LogicalID, f.Props.FunctionName, want)
		}
		group := strings.TrimSuffix(f.LogicalID, "Function") + "LogGroup"
		if want := "${" + group + "}"; f.Props.LoggingConfig.LogGroup != want {
			t.Errorf("%s: LoggingConfig.LogGroup = %q, want %q", f.LogicalID, f.Props.LoggingConfig.LogGroup, want)
		}
		if got, want := s.String("Resources", group, "Properties", "LogGroupName"), "/aws/lambda/${AWS::StackName}-"+f.Name; got != want {
			t.Errorf("%s: LogGroupName = %q, want %q", group, got, want)
		}
		if got := s.String("Resources", group, "Properties", "RetentionInDays"); got != "${LogRetentionDays}" {
			t.Errorf("%s: RetentionInDays = %q, want ${LogRetentionDays}", group, got)
		}
		for what, v := range map[string]string{"Runtime": f.Props.Runtime, "Handler": f.Props.Handler} {
			if v != "" {
				t.Errorf("%s overrides Globals %s with %q", f.LogicalID, what, v)
			}
		}
		if len(f.Props.Architectures) > 0 {
			t.Errorf("%s overrides Globals Architectures", f.LogicalID)
		}
	}
}

// TestGlobals: the shared function properties live in Globals.
func TestGlobals(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	g, err := s.Globals()
	if err != nil {
		t.Fatal(err)
	}
	if g.Runtime != "provided.al2023" || g.Handler != "bootstrap" || strings.Join(g.Architectures, ",") != "arm64" {
		t.Errorf("Globals: Runtime %q Handler %q Architectures %v, want provided.al2023, bootstrap, [arm64]", g.Runtime, g.Handler, g.Architectures)
	}
	if g.LoggingConfig.LogFormat != "JSON" {
		t.Errorf("Globals LoggingConfig.LogFormat = %q, want JSON", g.LoggingConfig.LogFormat)
	}
	if g.MemorySize < 128 {
		t.Errorf("Globals MemorySize = %d", g.MemorySize)
	}
	// API Gateway stops waiting for an integration after 29 s.
	if g.Timeout < 1 || g.Timeout > 29 {
		t.Errorf("Globals Timeout = %d, want 1..29 (API Gateway's integration timeout)", g.Timeout)
	}
	if want := map[string]string{"LOG_LEVEL": "${LogLevel}", "METRICS_NAMESPACE": emfNamespace}; !equalMaps(g.Environment.Variables, want) {
		t.Errorf("Globals Environment = %v, want %v (everything else is per function)", g.Environment.Variables, want)
	}
	fs := functions(t, s)
	for id, f := range fs {
		timeout := f.Props.Timeout
		if timeout == 0 {
			timeout = g.Timeout
		}
		for _, fn := range routeFunction {
			if fn == id && timeout > 29 {
				t.Errorf("%s serves a route but has Timeout %d > 29", id, timeout)
			}
		}
	}
	if got := fs["RunnerFunction"].Props.Timeout; got != 900 {
		t.Errorf("RunnerFunction Timeout = %d, want 900", got)
	}
}

// TestEnvironment: each function's environment is exactly what internal/config says the
// function reads (config.Vars) plus LOG_LEVEL and METRICS_NAMESPACE, wired to the right resources and
// parameters; the local-only variables are never set.
func TestEnvironment(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	want := map[string]string{
		"LOG_TABLE":              "${LogTable}",
		"CONNECTIONS_TABLE":      "${ConnectionsTable}",
		"AGENTS_TABLE":           "${AgentsTable}",
		"WS_MANAGEMENT_ENDPOINT": managementEndpoint,
		"DELIVER_FUNCTION":       "${AWS::StackName}-deliver",
		"RUNNER_FUNCTION":        "${AWS::StackName}-runner",
		"REPLAY_LIMIT":           "${ReplayLimit}",
		"MAX_CONCURRENT_REPLAYS": "${MaxConcurrentReplays}",
		"OUTBOUND_QUEUE":         "${OutboundQueue}",
		"APPROVALS":              "${Approvals}",
		"MAIN_MODEL":             "${MainModel}",
		"TITLER_MODEL":           "${TitlerModel}",
		"AGENT_PROFILE":          "${AgentProfile}",
		"RETENTION_DAYS":         "${RetentionDays}",
		"LOG_LEVEL":              "${LogLevel}",
		"METRICS_NAMESPACE":      emfNamespace,
		"ORIGIN_SECRET":          "${OriginSecret}",
		"WEBHOOK_QUEUE_URL":      "${WebhookQueue}",
		"SCHEDULE_GROUP":         "${ScheduleGroup}",
		"SCHEDULE_TARGET_ARN":    "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AWS::StackName}-schedule",
		"SCHEDULE_ROLE_ARN":      "${SchedulerRole.Arn}",
		"MAX_OBSERVERS":          "${MaxObservers}",
	}
	fs := functions(t, s)
	for _, f := range fs {
		vars := config.Vars(f.Name)
		if len(vars) == 0 {
			t.Errorf("%s: config.Vars(%q) is empty: internal/config does not know the function", f.LogicalID, f.Name)
			continue
		}
		env, err := s.Environment(f)
		if err != nil {
			t.Fatal(err)
		}
		if got, wantKeys := keys(env), append(vars, "LOG_LEVEL", "METRICS_NAMESPACE"); !equalSets(got, wantKeys) {
			t.Errorf("%s environment = %v, want config.Vars(%q) + LOG_LEVEL + METRICS_NAMESPACE = %v", f.LogicalID, got, f.Name, sorted(wantKeys))
		}
		for k, v := range env {
			if w, ok := want[k]; !ok {
				t.Errorf("%s sets %s, which this check does not know", f.LogicalID, k)
			} else if v != w {
				t.Errorf("%s: %s = %q, want %q", f.LogicalID, k, v, w)
			}
		}
		for _, local := range []string{"DYNAMODB_ENDPOINT", "LAMBDA_ENDPOINT"} {
			if _, ok := env[local]; ok {
				t.Errorf("%s sets %s, which only local runs use", f.LogicalID, local)
			}
		}
	}
	// The *_FUNCTION variables name functions of this template.
	for v, target := range map[string]string{"DELIVER_FUNCTION": "DeliverFunction", "RUNNER_FUNCTION": "RunnerFunction"} {
		if got := fs[target].Props.FunctionName; got != want[v] {
			t.Errorf("%s = %q but %s is named %q", v, want[v], target, got)
		}
	}
	defaults := map[string]string{
		"ReplayLimit": "10000", "MaxConcurrentReplays": "4", "OutboundQueue": "1024", "Approvals": "false",
		"MainModel": "scripted", "TitlerModel": "scripted", "EnableCloudFront": "false", "AgentProfile": "", "LogLevel": "info", "RetentionDays": "0",
		"Stage": "prod",
	}
	for p, d := range defaults {
		v, ok := s.Get("Parameters", p).(map[string]any)
		if !ok {
			t.Errorf("no parameter %s", p)
			continue
		}
		if got := jsonScalar(v["Default"]); got != d {
			t.Errorf("parameter %s default = %q, want %q", p, got, d)
		}
	}
}

// TestEnvironmentReaders: internal/config is the only reader of the environment, every
// name it reads is one config.Vars lists for some function (or one of the optional
// LOG_LEVEL, METRICS_NAMESPACE, DYNAMODB_ENDPOINT, LAMBDA_ENDPOINT, or a TERRET_* variable of the command
// line), and each functions/X/main.go loads the configuration of its own name X.
func TestEnvironmentReaders(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	listed := map[string]bool{"LOG_LEVEL": true, "METRICS_NAMESPACE": true, "DYNAMODB_ENDPOINT": true, "LAMBDA_ENDPOINT": true}
	for _, v := range config.LambdaRuntimeVars { // Lambda sets them itself
		listed[v] = true
	}
	for _, fn := range wantFunctions {
		for _, v := range config.Vars(FunctionName(fn)) {
			listed[v] = true
		}
	}
	read, err := envNamesRead(filepath.Join(root, "internal", "config"))
	if err != nil {
		t.Fatal(err)
	}
	if len(read) == 0 {
		t.Fatal("found no environment reads in internal/config: the scan is broken")
	}
	for name, where := range read {
		if name == "<non-constant name>" && strings.Contains(where, filepath.Join("internal", "config", "keys.go")) {
			continue // config.LookupKey: api_key_env names a variable of the profile's choosing
		}
		if !listed[name] && !strings.HasPrefix(name, "TERRET_") {
			t.Errorf("internal/config reads %s (%s) but config.Vars lists it for no function, so the template need not set it", name, where)
		}
	}
	for _, dir := range functionDirs(t) {
		got, err := envNamesRead(filepath.Join(root, "functions", dir))
		if err != nil {
			t.Fatal(err)
		}
		for name, where := range got {
			t.Errorf("functions/%s reads %s itself (%s): only internal/config reads the environment", dir, name, where)
		}
		loads, err := configLoads(filepath.Join(root, "functions", dir))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(loads, ",") != dir {
			t.Errorf("functions/%s calls config.Load with %q, want exactly one config.Load(%q)", dir, loads, dir)
		}
	}
}

// TestSchema: every CloudFormation resource decodes into goformation's type for it,
// which refuses unknown properties and wrong types.
func TestSchema(t *testing.T) {
	t.Parallel()
	for _, err := range CheckSchema(terretws.Template) {
		t.Error(err)
	}
	// The check is live: a misspelt property is caught.
	broken := bytes.Replace(terretws.Template, []byte("      RouteSelectionExpression:"), []byte("      RouteSelectionExpresion:"), 1)
	if bytes.Equal(broken, terretws.Template) {
		t.Fatal("could not plant the misspelling")
	}
	if errs := CheckSchema(broken); len(errs) != 1 || !strings.Contains(errs[0].Error(), "RouteSelectionExpresion") {
		t.Errorf("CheckSchema on a misspelt property = %v, want one error naming it", errs)
	}
}

// TestDeliverEventSources: deliver consumes the log table's stream and the token items
// of the connections table's stream, with bounded retries that end in the dead-letter
// queue; asynchronous invocations of deliver and runner end there too. Runner's one
// event source is the quota sweep's schedule.
func TestDeliverEventSources(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	fs := functions(t, s)
	for id, f := range fs {
		if id == "WebhookFunction" {
			continue // its log stream and queue: TestWebhookFunction
		}
		evs, err := f.StreamEvents()
		if err != nil {
			t.Fatal(err)
		}
		if id != "DeliverFunction" && len(evs) > 0 {
			t.Errorf("%s has stream event sources %v; only deliver consumes streams", id, keys(f.Props.Events))
		}
		if id == "RunnerFunction" && strings.Join(keys(f.Props.Events), ",") != "QuotaSweep" {
			t.Errorf("runner's event sources = %v, want the quota sweep", keys(f.Props.Events))
		}
		if id != "DeliverFunction" && id != "RunnerFunction" && len(f.Props.Events) > 0 {
			t.Errorf("%s has event sources %v; want none", id, keys(f.Props.Events))
		}
		if id == "DeliverFunction" && len(evs)+1 != len(f.Props.Events) {
			t.Errorf("deliver's event sources = %v, want the two streams and the token sweep", keys(f.Props.Events))
		}
	}
	evs, err := fs["DeliverFunction"].StreamEvents()
	if err != nil {
		t.Fatal(err)
	}
	byStream := map[string]StreamEvent{}
	for _, e := range evs {
		byStream[e.Stream] = e
	}
	if got := keys(byStream); !equalSets(got, []string{"${LogTable.StreamArn}", "${ConnectionsTable.StreamArn}"}) {
		t.Fatalf("deliver streams = %v, want the log and connections tables' streams", got)
	}
	for stream, e := range byStream {
		if e.StartingPosition != "LATEST" || e.BatchSize < 1 || e.BatchSize > 1000 {
			t.Errorf("%s: StartingPosition %q BatchSize %d", stream, e.StartingPosition, e.BatchSize)
		}
		if e.MaximumBatchingWindowInSeconds == nil || *e.MaximumBatchingWindowInSeconds != 0 {
			t.Errorf("%s: MaximumBatchingWindowInSeconds must be 0: tail latency", stream)
		}
		if strings.Join(e.FunctionResponseTypes, ",") != "ReportBatchItemFailures" || !e.BisectBatchOnFunctionError {
			t.Errorf("%s: want ReportBatchItemFailures and BisectBatchOnFunctionError", stream)
		}
		if e.MaximumRetryAttempts == nil || *e.MaximumRetryAttempts < 0 || *e.MaximumRetryAttempts > 100 {
			t.Errorf("%s: MaximumRetryAttempts must be bounded (0..100), got %v", stream, e.MaximumRetryAttempts)
		}
		if e.MaximumRecordAgeInSeconds == nil || *e.MaximumRecordAgeInSeconds < 60 || *e.MaximumRecordAgeInSeconds > 604800 {
			t.Errorf("%s: MaximumRecordAgeInSeconds must be bounded (60..604800), got %v", stream, e.MaximumRecordAgeInSeconds)
		}
		if d := e.DestinationConfig; d == nil || d.OnFailure.Type != "SQS" || d.OnFailure.Destination != "${DeadLetterQueue.Arn}" {
			t.Errorf("%s: DestinationConfig.OnFailure must be the SQS DeadLetterQueue, got %+v", stream, d)
		}
	}
	if f := byStream["${LogTable.StreamArn}"].FilterCriteria; f != nil {
		t.Errorf("the log stream is filtered (%+v): every appended event is news", f)
	}
	tok := byStream["${ConnectionsTable.StreamArn}"].FilterCriteria
	if tok == nil || len(tok.Filters) != 1 || tok.Filters[0].Pattern != TokenFilterPattern {
		t.Errorf("connections stream filter = %+v, want the one pattern %s", tok, TokenFilterPattern)
	}
	for table, view := range map[string]string{"LogTable": "NEW_IMAGE", "ConnectionsTable": "NEW_AND_OLD_IMAGES"} {
		if got := s.String("Resources", table, "Properties", "StreamSpecification", "StreamViewType"); got != view {
			t.Errorf("%s StreamViewType = %q, want %q (deliver reads it)", table, got, view)
		}
	}
	// Whatever is invoked asynchronously (the *_FUNCTION targets) retries a bounded
	// number of times and then lands in the dead-letter queue.
	for _, id := range []string{"DeliverFunction", "RunnerFunction"} {
		c := fs[id].Props.EventInvokeConfig
		if c == nil || c.MaximumRetryAttempts == nil || *c.MaximumRetryAttempts > 2 || c.MaximumEventAgeInSeconds == nil ||
			c.DestinationConfig == nil || c.DestinationConfig.OnFailure.Type != "SQS" || c.DestinationConfig.OnFailure.Destination != "${DeadLetterQueue.Arn}" {
			t.Errorf("%s: EventInvokeConfig must bound retries and age and send failures to the DeadLetterQueue, got %+v", id, c)
		}
	}
	// A refused connection's departure record outlives every deliver invocation that
	// may still post its unauthorized frame: one that starts as late as Lambda keeps an
	// asynchronous event, and posts for the hello grace.
	if c := fs["DeliverFunction"].Props.EventInvokeConfig; c != nil && c.MaximumEventAgeInSeconds != nil {
		if latest := time.Duration(*c.MaximumEventAgeInSeconds)*time.Second + delivery.DefaultHelloGrace; connstore.DepartTTL < latest {
			t.Errorf("connstore.DepartTTL %s: a deliver invocation may post to a refused connection until %s after it was asked for", connstore.DepartTTL, latest)
		}
	}
	// The token sweep: every minute, the payload service.DeliverHandler routes to
	// auth.Store.Sweep.
	sweep := fs["DeliverFunction"].Props.Events["TokenSweep"]
	var sp struct{ Schedule, Input string }
	if err := json.Unmarshal(sweep.Properties, &sp); err != nil || sweep.Type != "Schedule" || sp.Schedule != "rate(1 minute)" || sp.Input != service.SweepInput {
		t.Errorf("deliver TokenSweep = %s %s, want Schedule rate(1 minute) with Input %s", sweep.Type, sweep.Properties, service.SweepInput)
	}
	// The quota sweep: every minute, the payload agent.Runner.Handle routes to
	// SweepQuotas.
	qs := fs["RunnerFunction"].Props.Events["QuotaSweep"]
	var qp struct{ Schedule, Input string }
	if err := json.Unmarshal(qs.Properties, &qp); err != nil || qs.Type != "Schedule" || qp.Schedule != "rate(1 minute)" || qp.Input != agentservice.QuotaSweepInput {
		t.Errorf("runner QuotaSweep = %s %s, want Schedule rate(1 minute) with Input %s", qs.Type, qs.Properties, agentservice.QuotaSweepInput)
	}
	if got := s.Resources("AWS::SQS::Queue"); !equalSets(got, []string{"DeadLetterQueue", "WebhookQueue", "WebhookDeadLetterQueue"}) {
		t.Errorf("queues = %v, want DeadLetterQueue and the webhooks' two", got)
	}
}

// TokenFilterPattern selects the token items (pk "tokens#<agent_id>") of the connections
// table's stream: the revocation input of the deliver function.
const TokenFilterPattern = `{"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"tokens#"}]}}}}`

// TestRoutes: the WebSocket API sends $connect, $default and $disconnect to their
// functions through AWS_PROXY integrations, API Gateway may invoke exactly those
// functions on exactly those routes of this API and stage, and the stage deploys them.
func TestRoutes(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	apis := s.Resources("AWS::ApiGatewayV2::Api")
	if strings.Join(apis, ",") != "WebSocketApi" {
		t.Fatalf("APIs = %v, want WebSocketApi", apis)
	}
	if got := s.String("Resources", "WebSocketApi", "Properties", "ProtocolType"); got != "WEBSOCKET" {
		t.Errorf("ProtocolType = %q", got)
	}
	if got := s.String("Resources", "WebSocketApi", "Properties", "RouteSelectionExpression"); got != "$request.body.type" {
		t.Errorf("RouteSelectionExpression = %q, want $request.body.type", got)
	}
	routes := map[string]string{} // route key → logical id
	for _, id := range s.Resources("AWS::ApiGatewayV2::Route") {
		routes[s.String("Resources", id, "Properties", "RouteKey")] = id
		if got := s.String("Resources", id, "Properties", "ApiId"); got != "${WebSocketApi}" {
			t.Errorf("%s ApiId = %q", id, got)
		}
	}
	if got, want := keys(routes), append(keys(routeFunction), keys(mockRoutes)...); !equalSets(got, want) {
		t.Fatalf("routes = %v, want %v: every frame but keepalive goes to $default", got, want)
	}
	for key := range mockRoutes {
		id := routes[key]
		checkMockRoute(t, s, key, id)
		delete(routes, key)
	}
	if n := len(s.Resources("AWS::ApiGatewayV2::RouteResponse")); n != len(mockRoutes) {
		t.Errorf("%d route responses: only the MOCK routes (%d) answer a frame through API Gateway", n, len(mockRoutes))
	}
	invoked := map[string]string{} // function → source ARN
	for _, id := range s.Resources("AWS::Lambda::Permission") {
		p := "Resources." + id + ".Properties."
		get := func(k string) string { return s.String(strings.Split(p+k, ".")...) }
		if get("Principal") != "apigateway.amazonaws.com" || get("Action") != "lambda:InvokeFunction" {
			t.Errorf("%s: Principal %q Action %q", id, get("Principal"), get("Action"))
		}
		invoked[strings.Trim(get("FunctionName"), "${}")] = get("SourceArn")
	}
	for key, id := range routes {
		fn := routeFunction[key]
		target := s.String("Resources", id, "Properties", "Target")
		integration, ok := strings.CutPrefix(target, "integrations/")
		integration = strings.Trim(integration, "${}")
		if !ok || integration == "" {
			t.Errorf("route %s: Target %q, want integrations/${...}", key, target)
			continue
		}
		ip := func(k string) string { return s.String("Resources", integration, "Properties", k) }
		if typ := s.String("Resources", integration, "Type"); typ != "AWS::ApiGatewayV2::Integration" {
			t.Errorf("route %s targets %s of type %q", key, integration, typ)
		}
		if ip("IntegrationType") != "AWS_PROXY" || ip("ApiId") != "${WebSocketApi}" {
			t.Errorf("%s: IntegrationType %q ApiId %q, want AWS_PROXY on the WebSocketApi", integration, ip("IntegrationType"), ip("ApiId"))
		}
		wantURI := "arn:${AWS::Partition}:apigateway:${AWS::Region}:lambda:path/2015-03-31/functions/${" + fn + ".Arn}/invocations"
		if got := ip("IntegrationUri"); got != wantURI {
			t.Errorf("route %s: IntegrationUri %q, want %q", key, got, wantURI)
		}
		wantSource := "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${WebSocketApi}/${Stage}/" + key
		if got, ok := invoked[fn]; !ok {
			t.Errorf("no Lambda permission lets API Gateway invoke %s", fn)
		} else if got != wantSource {
			t.Errorf("permission for %s: SourceArn %q, want %q", fn, got, wantSource)
		}
		delete(invoked, fn)
	}
	for fn, src := range invoked {
		t.Errorf("API Gateway may invoke %s (%s), which serves no route", fn, src)
	}

	stages := s.Resources("AWS::ApiGatewayV2::Stage")
	if strings.Join(stages, ",") != "WebSocketStage" {
		t.Fatalf("stages = %v", stages)
	}
	st := func(k ...string) any {
		return s.Get(append([]string{"Resources", "WebSocketStage", "Properties"}, k...)...)
	}
	if st("ApiId") != "${WebSocketApi}" || st("StageName") != "${Stage}" || st("AutoDeploy") != true {
		t.Errorf("stage: ApiId %v StageName %v AutoDeploy %v", st("ApiId"), st("StageName"), st("AutoDeploy"))
	}
	if len(s.Resources("AWS::ApiGatewayV2::Deployment")) > 0 {
		t.Error("an explicit Deployment next to AutoDeploy would deploy a stale snapshot")
	}
	var deps []string
	if err := s.Decode(&deps, "Resources", "WebSocketStage", "DependsOn"); err != nil {
		t.Fatal(err)
	}
	var routeIDs []string
	for _, typ := range []string{"AWS::ApiGatewayV2::Route", "AWS::ApiGatewayV2::RouteResponse", "AWS::ApiGatewayV2::IntegrationResponse"} {
		routeIDs = append(routeIDs, s.Resources(typ)...)
	}
	if !equalSets(deps, routeIDs) {
		t.Errorf("stage DependsOn = %v, want the routes and their responses %v", deps, sorted(routeIDs))
	}
	if st("DefaultRouteSettings", "ThrottlingBurstLimit") != "${ThrottlingBurstLimit}" || st("DefaultRouteSettings", "ThrottlingRateLimit") != "${ThrottlingRateLimit}" {
		t.Errorf("stage default route throttling = %v", st("DefaultRouteSettings"))
	}
	if s.Get("Resources", "AccessLogGroup", "Condition") != "AccessLogsEnabled" || st("AccessLogSettings", "DestinationArn") != "${AccessLogGroup.Arn}" {
		t.Errorf("access logs must be optional (Condition AccessLogsEnabled) and go to AccessLogGroup")
	}
}

// mockRoutes are the routes API Gateway answers itself, with the frame type each
// carries: keepalive (docs/protocol.md, "Extension: keepalive").
var mockRoutes = map[string]bool{"keepalive": true}

// checkMockRoute: route key (logical id id) targets a MOCK integration that invokes
// nothing and answers with a frame of its own type: no function, a route response (so
// that bytes go back to the client, which CloudFront's idle rule counts; the answer's
// template is checked by TestTransformedTemplate and TestMockRoutes), and the request
// template that gives API Gateway the status code a WebSocket MOCK integration needs,
// selected whatever the frame's content (\$default).
func checkMockRoute(t *testing.T, s *Stack, key, id string) {
	t.Helper()
	target := s.String("Resources", id, "Properties", "Target")
	integration, ok := strings.CutPrefix(target, "integrations/")
	integration = strings.Trim(integration, "${}")
	if !ok || s.String("Resources", integration, "Type") != "AWS::ApiGatewayV2::Integration" {
		t.Fatalf("route %s: Target %q, want integrations/${...} of an AWS::ApiGatewayV2::Integration", key, target)
	}
	var in struct {
		ApiId, IntegrationType, IntegrationUri, TemplateSelectionExpression string
		RequestTemplates                                                    map[string]string
	}
	if err := s.Decode(&in, "Resources", integration, "Properties"); err != nil {
		t.Fatal(err)
	}
	if in.ApiId != "${WebSocketApi}" || in.IntegrationType != "MOCK" || in.IntegrationUri != "" {
		t.Errorf("route %s: integration %+v, want a MOCK integration of the WebSocketApi with no URI", key, in)
	}
	if in.TemplateSelectionExpression != `\$default` || len(in.RequestTemplates) != 1 {
		t.Errorf("route %s: TemplateSelectionExpression %q, templates %v; want \\$default selecting the one $default template", key, in.TemplateSelectionExpression, in.RequestTemplates)
	}
	var tmpl struct{ StatusCode *int }
	if err := json.Unmarshal([]byte(in.RequestTemplates["$default"]), &tmpl); err != nil || tmpl.StatusCode == nil || *tmpl.StatusCode != 200 {
		t.Errorf("route %s: $default request template %q (%v), want JSON {\"statusCode\": 200}", key, in.RequestTemplates["$default"], err)
	}
	if rse := s.String("Resources", id, "Properties", "RouteResponseSelectionExpression"); rse != "$default" {
		t.Errorf("route %s: RouteResponseSelectionExpression %q, want $default: the keepalive is answered", key, rse)
	}
	if got := s.String("Resources", id, "Properties", "RouteKey"); got != key {
		t.Errorf("route %s: RouteKey %q", key, got)
	}
}

// TestOutputs: the URLs and names an operator needs.
func TestOutputs(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	want := map[string]string{
		"WebSocketURL":                "wss://${WebSocketApi}.execute-api.${AWS::Region}.amazonaws.com/${Stage}",
		"AgentWebSocketURL":           "wss://${WebSocketApi}.execute-api.${AWS::Region}.amazonaws.com/${Stage}?agent_id={agent_id}",
		"CloudFrontAgentWebSocketURL": "wss://${Distribution.DomainName}/agents/{agent_id}/ws",
		"CloudFrontAgentEventsURL":    "https://${Distribution.DomainName}/agents/{agent_id}/events",
		"HttpFunctionURL":             "${HttpFunctionUrl.FunctionUrl}",
		"ManagementEndpoint":          managementEndpoint,
		"Region":                      "${AWS::Region}",
		"LogTableName":                "${LogTable}",
		"ConnectionsTableName":        "${ConnectionsTable}",
		"AgentsTableName":             "${AgentsTable}",
		"DeadLetterQueueUrl":          "${DeadLetterQueue}",
	}
	outs, _ := s.Get("Outputs").(map[string]any)
	if got := keys(outs); !equalSets(got, keys(want)) {
		t.Errorf("outputs = %v, want %v", got, keys(want))
	}
	for k, v := range want {
		if got := s.String("Outputs", k, "Value"); got != v {
			t.Errorf("output %s = %q, want %q", k, got, v)
		}
	}
	if s.Get("Outputs", "CloudFrontAgentWebSocketURL", "Condition") != "CloudFrontEnabled" {
		t.Error("the CloudFront URL output needs Condition CloudFrontEnabled")
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// jsonScalar prints a JSON scalar the way CloudFormation passes it on: 10000, false.
func jsonScalar(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case string:
		return x
	}
	return fmt.Sprint(v)
}

// TestRetention: the RetentionDays parameter is bounded as RETENTION_DAYS and a
// profile's retention_days are (0, the default, keeps events forever), reaches the
// functions that run the agent (TestEnvironment), and the log table has TTL on
// expires_at, which the local stack's table creation (internal/tables) enables too.
func TestRetention(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	p, ok := s.Get("Parameters", "RetentionDays").(map[string]any)
	if !ok {
		t.Fatal("no parameter RetentionDays")
	}
	for k, want := range map[string]string{"Type": "Number", "Default": "0", "MinValue": "0", "MaxValue": strconv.Itoa(config.MaxRetentionDays)} {
		if got := jsonScalar(p[k]); got != want {
			t.Errorf("RetentionDays %s = %q, want %q", k, got, want)
		}
	}
	if config.MaxRetentionDays != tools.MaxRetentionDays {
		t.Errorf("config.MaxRetentionDays %d, tools.MaxRetentionDays %d: one bound for both", config.MaxRetentionDays, tools.MaxRetentionDays)
	}
	ttl, ok := s.Get("Resources", "LogTable", "Properties", "TimeToLiveSpecification").(map[string]any)
	if !ok || jsonScalar(ttl["AttributeName"]) != "expires_at" || jsonScalar(ttl["Enabled"]) != "true" {
		t.Errorf("LogTable TimeToLiveSpecification = %v, want expires_at enabled", ttl)
	}
	defs, err := tables.Parse(terretws.Template)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if d.LogicalID == "LogTable" && d.TTLAttr != "expires_at" {
			t.Errorf("the local LogTable's TTL attribute = %q, want expires_at", d.TTLAttr)
		}
	}
}
