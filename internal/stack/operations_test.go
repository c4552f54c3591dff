package stack

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	terretws "github.com/terret/terret-ws"
)

// rawTemplate is template.yaml as YAML nodes, intrinsic tags kept (Parse resolves !If to
// its true branch; these checks need to see the condition itself).
func rawTemplate(t *testing.T) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(terretws.Template, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Content[0]
}

// ifOf returns the condition name and the two branches of a !If node, or ok false.
func ifOf(n *yaml.Node) (cond string, yes, no *yaml.Node, ok bool) {
	if n == nil || n.Tag != "!If" || n.Kind != yaml.SequenceNode || len(n.Content) != 3 {
		return "", nil, nil, false
	}
	return n.Content[0].Value, n.Content[1], n.Content[2], true
}

// conditionOn reports whether condition name is !Equals [!Ref param, want] or its !Not.
func conditionOn(root *yaml.Node, name, param, want string, negated bool) bool {
	c := yamlPath(root, "Conditions", name)
	if c == nil {
		return false
	}
	if negated {
		if c.Tag != "!Not" || len(c.Content) != 1 {
			return false
		}
		c = c.Content[0]
	}
	return c.Tag == "!Equals" && len(c.Content) == 2 && c.Content[0].Tag == "!Ref" && c.Content[0].Value == param && c.Content[1].Value == want
}

// TestRecursiveLoop: deliver and runner invoke themselves on purpose (replay hand-over,
// the turn hand-over before the 15-minute limit). Lambda's recursive loop detection
// covers chains of functions invoking each other, asynchronously too, and stops one after
// about 16 invocations
// (https://docs.aws.amazon.com/lambda/latest/dg/invocation-recursion.html), so each
// function that names itself in a *_FUNCTION variable has RecursiveLoop Allow, and no
// other function has it.
func TestRecursiveLoop(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	selfInvokers := 0
	for id, f := range functions(t, s) {
		env, err := s.Environment(f)
		if err != nil {
			t.Fatal(err)
		}
		self := false
		for k, v := range env {
			if strings.HasSuffix(k, "_FUNCTION") && v == f.Props.FunctionName {
				self = true
			}
		}
		if self {
			selfInvokers++
		}
		want := map[bool]string{true: "Allow", false: ""}[self]
		if f.Props.RecursiveLoop != want {
			t.Errorf("%s: RecursiveLoop = %q, want %q (invokes itself: %v)", id, f.Props.RecursiveLoop, want, self)
		}
	}
	if selfInvokers != 2 {
		t.Errorf("%d functions invoke themselves, want 2 (deliver, runner)", selfInvokers)
	}
}

// TestReservedConcurrency: runner and deliver take an optional reserved concurrency, a
// parameter that leaves them unreserved by default (-1), so that an operator can cap
// turns and stream fan-out, or guarantee them capacity, without editing the template.
func TestReservedConcurrency(t *testing.T) {
	t.Parallel()
	root := rawTemplate(t)
	for fn, param := range map[string]string{"RunnerFunction": "RunnerReservedConcurrency", "DeliverFunction": "DeliverReservedConcurrency"} {
		n := yamlPath(root, "Resources", fn, "Properties", "ReservedConcurrentExecutions")
		cond, yes, no, ok := ifOf(n)
		if !ok || yes.Tag != "!Ref" || yes.Value != param || no.Tag != "!Ref" || no.Value != "AWS::NoValue" {
			t.Errorf("%s ReservedConcurrentExecutions must be !If [COND, !Ref %s, !Ref AWS::NoValue]", fn, param)
			continue
		}
		if !conditionOn(root, cond, param, "-1", true) {
			t.Errorf("condition %s must be !Not [!Equals [!Ref %s, -1]]", cond, param)
		}
		if d := yamlPath(root, "Parameters", param, "Default"); d == nil || d.Value != "-1" {
			t.Errorf("parameter %s default must be -1 (unreserved)", param)
		}
	}
	for _, fn := range []string{"ConnectFunction", "MessageFunction", "DisconnectFunction"} {
		if yamlPath(root, "Resources", fn, "Properties", "ReservedConcurrentExecutions") != nil {
			t.Errorf("%s reserves concurrency; only runner and deliver take the parameter", fn)
		}
	}
}

// TestTablesRetained: every table outlives a stack deletion or a replacement (the
// connections table holds the only copy of the token hashes, the log the sessions) and
// has point-in-time recovery, on unless the PointInTimeRecovery parameter says "false".
func TestTablesRetained(t *testing.T) {
	t.Parallel()
	root := rawTemplate(t)
	s := loadStack(t)
	tables := s.Resources("AWS::DynamoDB::Table")
	if !equalSets(tables, keys(tableVar)) {
		t.Fatalf("tables = %v, want %v", tables, keys(tableVar))
	}
	if d := yamlPath(root, "Parameters", "PointInTimeRecovery", "Default"); d == nil || d.Value != "true" {
		t.Error("parameter PointInTimeRecovery must default to \"true\"")
	}
	for _, id := range tables {
		for _, policy := range []string{"DeletionPolicy", "UpdateReplacePolicy"} {
			if got := s.String("Resources", id, policy); got != "Retain" {
				t.Errorf("%s %s = %q, want Retain", id, policy, got)
			}
		}
		if got := s.Get("Resources", id, "Properties", "DeletionProtectionEnabled"); got != true {
			t.Errorf("%s DeletionProtectionEnabled = %v, want true", id, got)
		}
		for unit, param := range map[string]string{"MaxReadRequestUnits": "TableMaxReadRequestUnits", "MaxWriteRequestUnits": "TableMaxWriteRequestUnits"} {
			cond, yes, no, ok := ifOf(yamlPath(root, "Resources", id, "Properties", "OnDemandThroughput", unit))
			if !ok || yes.Tag != "!Ref" || yes.Value != param || no.Value != "AWS::NoValue" || !conditionOn(root, cond, param, "-1", true) {
				t.Errorf("%s OnDemandThroughput.%s must be !If [C, !Ref %s, !Ref AWS::NoValue] with C = !Not [!Equals [!Ref %s, -1]]", id, unit, param, param)
			}
			if d := yamlPath(root, "Parameters", param, "Default"); d == nil || d.Value != "-1" {
				t.Errorf("parameter %s must default to -1 (no cap)", param)
			}
		}
		n := yamlPath(root, "Resources", id, "Properties", "PointInTimeRecoverySpecification", "PointInTimeRecoveryEnabled")
		cond, yes, no, ok := ifOf(n)
		if !ok || yes.Value != "true" || no.Value != "false" || !conditionOn(root, cond, "PointInTimeRecovery", "true", false) {
			t.Errorf("%s PointInTimeRecoveryEnabled must be !If [C, true, false] with C = !Equals [!Ref PointInTimeRecovery, \"true\"]", id)
		}
	}
}

// alarm is the part of an AWS::CloudWatch::Alarm these checks read.
type alarm struct {
	Namespace, MetricName, Statistic, ComparisonOperator, TreatMissingData string
	Dimensions                                                             []struct{ Name, Value string }
	Threshold                                                              any
	Period                                                                 int
	AlarmActions                                                           []string
}

func alarms(t *testing.T, s *Stack) map[string]alarm {
	t.Helper()
	out := map[string]alarm{}
	for _, id := range s.Resources("AWS::CloudWatch::Alarm") {
		var a alarm
		if err := s.Decode(&a, "Resources", id, "Properties"); err != nil {
			t.Fatal(err)
		}
		out[id] = a
	}
	return out
}

// TestAlarms: every dead-letter queue has an alarm on its first visible message, refused
// connections have a metric (from the connect function's own log line, so the refused
// path makes no extra call) and an alarm on its rate, and every alarm notifies
// AlarmTopicArn when it is set.
func TestAlarms(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	root := rawTemplate(t)
	as := alarms(t, s)
	queues := s.Resources("AWS::SQS::Queue")
	if len(queues) == 0 {
		t.Fatal("no queues")
	}
	// A queue's alarm counts the messages sent to it per 5 minutes, so it clears once
	// nothing new arrives; the number visible would stay up until somebody read them.
	// The webhooks' queue carries every delivery, and its redrive into the dead-letter
	// queue is no send: WebhookDeadLetterAlarm counts the function's give-up lines
	// (TestWebhookFunction).
	for _, q := range queues {
		if q == "WebhookQueue" || q == "WebhookDeadLetterQueue" {
			continue
		}
		found := false
		for id, a := range as {
			if a.Namespace == "AWS/SQS" && a.MetricName == "ApproximateNumberOfMessagesVisible" {
				t.Errorf("%s alarms on the level of messages visible: it stays in alarm until the queue is read", id)
			}
			if a.Namespace == "AWS/SQS" && a.MetricName == "NumberOfMessagesSent" && a.Statistic == "Sum" && a.Period == 300 && len(a.Dimensions) == 1 &&
				a.Dimensions[0].Name == "QueueName" && a.Dimensions[0].Value == "${"+q+".QueueName}" &&
				jsonScalar(a.Threshold) == "0" && a.ComparisonOperator == "GreaterThanThreshold" && a.TreatMissingData == "notBreaching" {
				found = true
			}
		}
		if !found {
			t.Errorf("queue %s has no alarm on NumberOfMessagesSent (Sum per 5 minutes) > 0", q)
		}
	}

	// The refused-connection metric counts the line the connect handler writes.
	var filter struct {
		LogGroupName, FilterPattern string
		MetricTransformations       []struct{ MetricNamespace, MetricName, MetricValue string }
	}
	if err := s.Decode(&filter, "Resources", "RefusedConnectionsMetric", "Properties"); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^\{ \$\.msg = "([^"]+)" \}$`).FindStringSubmatch(filter.FilterPattern)
	if filter.LogGroupName != "${ConnectLogGroup}" || m == nil || len(filter.MetricTransformations) != 1 {
		t.Fatalf("RefusedConnectionsMetric = %+v, want one metric from a { $.msg = \"...\" } filter on ConnectLogGroup", filter)
	}
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "internal", "socket", "socket.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), `.Warn("`+m[1]+`"`) {
		t.Errorf("internal/socket logs no Warn %q: the refused-connection metric would stay 0 (and a Warn line counts at every LogLevel but error)", m[1])
	}
	mt := filter.MetricTransformations[0]
	refused, ok := as["RefusedConnectionsAlarm"]
	if !ok || refused.Namespace != mt.MetricNamespace || refused.MetricName != mt.MetricName || refused.Statistic != "Sum" ||
		jsonScalar(refused.Threshold) != "${RefusedConnectionsAlarmThreshold}" {
		t.Errorf("RefusedConnectionsAlarm = %+v, want the Sum of %s/%s against RefusedConnectionsAlarmThreshold", refused, mt.MetricNamespace, mt.MetricName)
	}

	for id := range as {
		cond, yes, no, ok := ifOf(yamlPath(root, "Resources", id, "Properties", "AlarmActions"))
		if !ok || yes.Kind != yaml.SequenceNode || len(yes.Content) != 1 || yes.Content[0].Value != "AlarmTopicArn" ||
			no.Value != "AWS::NoValue" || !conditionOn(root, cond, "AlarmTopicArn", "", true) {
			t.Errorf("%s AlarmActions must be !If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]", id)
		}
	}
}

// TestConnectThrottle: $connect has a stage throttle of its own, below the stage-wide
// one, because every new connection costs invocations whether its token is good or not.
func TestConnectThrottle(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	rs := func(k string) any {
		return s.Get("Resources", "WebSocketStage", "Properties", "RouteSettings", "$connect", k)
	}
	if rs("ThrottlingBurstLimit") != "${ConnectThrottlingBurstLimit}" || rs("ThrottlingRateLimit") != "${ConnectThrottlingRateLimit}" {
		t.Errorf("stage RouteSettings.$connect = %v, want the Connect throttling parameters", s.Get("Resources", "WebSocketStage", "Properties", "RouteSettings"))
	}
	num := func(p string) string { return jsonScalar(s.Get("Parameters", p, "Default")) }
	for _, pair := range [][2]string{{"ConnectThrottlingBurstLimit", "ThrottlingBurstLimit"}, {"ConnectThrottlingRateLimit", "ThrottlingRateLimit"}} {
		var connect, stage float64
		if _, err := fmt.Sscan(num(pair[0]), &connect); err != nil {
			t.Fatalf("parameter %s: %v", pair[0], err)
		}
		if _, err := fmt.Sscan(num(pair[1]), &stage); err != nil {
			t.Fatalf("parameter %s: %v", pair[1], err)
		}
		if connect > stage {
			t.Errorf("default %s %v above %s %v", pair[0], connect, pair[1], stage)
		}
	}
}

// TestKeepaliveThrottle: the keepalive route has a throttle of its own, so the
// stage-wide limit (which guards the functions) does not cap the keepalives every
// connection sends once per 9 minutes: its default rate covers at least 1,000,000
// connections (1,000,000 / 540 s ≈ 1,852/s), where the stage-wide default covers 540,000.
func TestKeepaliveThrottle(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	rs := func(k string) any {
		return s.Get("Resources", "WebSocketStage", "Properties", "RouteSettings", "keepalive", k)
	}
	if rs("ThrottlingBurstLimit") != "${KeepaliveThrottlingBurstLimit}" || rs("ThrottlingRateLimit") != "${KeepaliveThrottlingRateLimit}" {
		t.Errorf("stage RouteSettings.keepalive = %v, want the Keepalive throttling parameters", s.Get("Resources", "WebSocketStage", "Properties", "RouteSettings"))
	}
	if key := s.String("Resources", "KeepaliveRoute", "Properties", "RouteKey"); key != "keepalive" {
		t.Errorf("KeepaliveRoute's RouteKey %q: the route settings name no route", key)
	}
	num := func(p string) float64 {
		var f float64
		if _, err := fmt.Sscan(jsonScalar(s.Get("Parameters", p, "Default")), &f); err != nil {
			t.Fatalf("parameter %s: %v", p, err)
		}
		return f
	}
	const connections, interval = 1_000_000, 540.0 // the clients' 9-minute keepalive
	if rate := num("KeepaliveThrottlingRateLimit"); rate < connections/interval {
		t.Errorf("default KeepaliveThrottlingRateLimit %v covers %v connections, want at least %d", rate, rate*interval, connections)
	}
}

// TestLocalStackArchitecture: the LocalStack recipe says which architecture the
// functions are built for: the template's arm64 bootstraps run on an x86_64 host only
// under emulation, so the recipe builds with LAMBDA_GOARCH=amd64 and creates the
// functions as x86_64.
func TestLocalStackArchitecture(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## LocalStack\n")
	if !ok {
		t.Fatal("docs/deploy.md has no LocalStack section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	compose, err := os.ReadFile(filepath.Join(root, "localstack", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"docs/deploy.md LocalStack section": section, "localstack/docker-compose.yml": string(compose)} {
		for _, want := range []string{"LAMBDA_GOARCH=amd64", "arm64"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not mention %s", what, want)
			}
		}
	}
	if !strings.Contains(section, "--architectures x86_64") {
		t.Error("docs/deploy.md LocalStack section: the create-function recipe must pass --architectures x86_64 with the amd64 build")
	}
}

// TestFunctionAlarmsAndDashboard: errors and throttles of every function raise an alarm
// (one metric-math sum each), and the dashboard shows every function, the delivery lag
// (deliver's stream iterator age), the dead letters and the service's own metrics.
func TestFunctionAlarmsAndDashboard(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	fs := functions(t, s)
	var all []string
	for _, f := range fs {
		all = append(all, f.Props.FunctionName)
	}
	// Errors are a share of invocations, route and background functions apart (together
	// every function); throttles a share of all requests, every function in one alarm.
	// An alarm reads at most 10 metrics (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-limits.html):
	// the webhook, http and schedule functions' throttles have their own alarms.
	var errorsCovered, throttlesCovered []string
	for _, c := range []struct{ id, part, param string }{
		{"FunctionErrorsAlarm", "Errors", "${FunctionErrorRateAlarmPercent}"},
		{"BackgroundErrorsAlarm", "Errors", "${FunctionErrorRateAlarmPercent}"},
		{"FunctionThrottlesAlarm", "Throttles", "${FunctionThrottleRateAlarmPercent}"},
		{"WebhookThrottlesAlarm", "Throttles", "${FunctionThrottleRateAlarmPercent}"},
		{"HttpThrottlesAlarm", "Throttles", "${FunctionThrottleRateAlarmPercent}"},
		{"ScheduleThrottlesAlarm", "Throttles", "${FunctionThrottleRateAlarmPercent}"},
	} {
		m := mathAlarm(t, s, c.id)
		parts, invocations := m.summed("AWS/Lambda", c.part, "FunctionName"), m.summed("AWS/Lambda", "Invocations", "FunctionName")
		if len(parts) == 0 || !equalSets(parts, invocations) {
			t.Errorf("%s: %s of %v against Invocations of %v, want the same functions", c.id, c.part, parts, invocations)
		}
		expr := " " + m.returned().Expression + " "
		for _, ms := range m.Metrics {
			if ms.MetricStat != nil && !strings.Contains(strings.NewReplacer("(", " ", ")", " ", ",", " ").Replace(expr), " "+ms.ID+" ") {
				t.Errorf("%s: %s is not in the expression %q", c.id, ms.ID, expr)
			}
		}
		if !strings.Contains(expr, "/") || !strings.Contains(expr, "100 *") || !strings.HasPrefix(strings.TrimSpace(expr), "IF(") {
			t.Errorf("%s: expression %q, want a percentage of invocations that is 0 on too few", c.id, expr)
		}
		if jsonScalar(m.Threshold) != c.param {
			t.Errorf("%s: threshold %v, want %s", c.id, m.Threshold, c.param)
		}
		if c.part == "Errors" {
			errorsCovered = append(errorsCovered, parts...)
		} else {
			throttlesCovered = append(throttlesCovered, parts...)
		}
		stats := 0
		for _, ms := range m.Metrics {
			if ms.MetricStat != nil {
				stats++
			}
		}
		if stats > 10 {
			t.Errorf("%s: %d metrics; an alarm's metric math takes at most 10", c.id, stats)
		}
	}
	if !equalSets(throttlesCovered, all) {
		t.Errorf("throttle alarms cover %v, want every function once %v", throttlesCovered, all)
	}
	if !equalSets(throttlesCovered, all) || len(throttlesCovered) != len(all) {
		t.Errorf("throttle alarms cover %v, want every function once %v", throttlesCovered, all)
	}
	if !equalSets(errorsCovered, all) {
		t.Errorf("error alarms cover %v, want every function once %v", errorsCovered, all)
	}
	body := s.String("Resources", "Dashboard", "Properties", "DashboardBody")
	var doc struct{ Widgets []any }
	if err := json.Unmarshal([]byte(body), &doc); err != nil || len(doc.Widgets) == 0 {
		t.Fatalf("DashboardBody is not dashboard JSON with widgets: %v", err)
	}
	for _, f := range fs {
		if !strings.Contains(body, `"`+f.Props.FunctionName+`"`) {
			t.Errorf("dashboard lacks %s", f.Props.FunctionName)
		}
	}
	for _, want := range []string{`"IteratorAge"`, `"${DeadLetterQueue.QueueName}"`, `"RefusedConnections"`, `["` + emfNamespace + `", "Connections"`} {
		if !strings.Contains(body, want) {
			t.Errorf("dashboard lacks %s", want)
		}
	}
}

// TestTracing: X-Ray active tracing for every function behind the Tracing parameter,
// off by default (SAM then adds no X-Ray policy: TestTransformedRoles).
func TestTracing(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	g, err := s.Globals()
	if err != nil {
		t.Fatal(err)
	}
	if g.Tracing != "${Tracing}" {
		t.Errorf("Globals Tracing = %q, want ${Tracing}", g.Tracing)
	}
	var allowed []string
	_ = s.Decode(&allowed, "Parameters", "Tracing", "AllowedValues")
	if d := jsonScalar(s.Get("Parameters", "Tracing", "Default")); d != "Disabled" || !equalSets(allowed, []string{"Disabled", "Active"}) {
		t.Errorf("parameter Tracing default %q allowed %v, want Disabled of [Disabled Active]", d, allowed)
	}
	for id, f := range functions(t, s) {
		if f.Props.Tracing != "" {
			t.Errorf("%s overrides Globals Tracing", id)
		}
	}
}
