package stack

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// metricAlarm is a metric-math AWS::CloudWatch::Alarm as these checks read it.
type metricAlarm struct {
	EvaluationPeriods, DatapointsToAlarm int
	Threshold                            any
	Metrics                              []struct {
		ID         string `json:"Id"`
		Expression string
		ReturnData bool
		MetricStat *struct {
			Stat   string
			Period int
			Metric struct {
				Namespace, MetricName string
				Dimensions            []struct{ Name, Value string }
			}
		}
	}
}

func mathAlarm(t *testing.T, s *Stack, id string) metricAlarm {
	t.Helper()
	var a metricAlarm
	if err := s.Decode(&a, "Resources", id, "Properties"); err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	if len(a.Metrics) == 0 {
		t.Fatalf("%s is not a metric-math alarm", id)
	}
	return a
}

// returned is the one query whose data the alarm evaluates.
func (a metricAlarm) returned() (out struct{ ID, Expression string }) {
	for _, m := range a.Metrics {
		if m.ReturnData {
			out.ID, out.Expression = m.ID, m.Expression
		}
	}
	return out
}

// summed lists the dimension dim's values of the namespace/metric series the alarm reads.
func (a metricAlarm) summed(namespace, metric, dim string) []string {
	var out []string
	for _, m := range a.Metrics {
		if ms := m.MetricStat; ms != nil && ms.Metric.Namespace == namespace && ms.Metric.MetricName == metric {
			for _, d := range ms.Metric.Dimensions {
				if d.Name == dim {
					out = append(out, d.Value)
				}
			}
			if dim == "" && len(ms.Metric.Dimensions) == 0 {
				out = append(out, "")
			}
		}
	}
	return out
}

// TestOperationalAlarms: the signals a review of the stack found unwatched each have an
// alarm — the stream's IteratorAge, asynchronous events' age and drops, DynamoDB
// throttling on every table, the WebSocket API's integration and execution errors, and
// the account's claimed concurrency — reading exactly the series named here.
func TestOperationalAlarms(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	fn := func(name string) string { return "${AWS::StackName}-" + name }
	for _, c := range []struct {
		id, namespace, metric, dim string
		want                       []string
	}{
		{"StreamIteratorAgeAlarm", "AWS/Lambda", "IteratorAge", "FunctionName", []string{fn("deliver")}},
		{"AsyncEventAgeAlarm", "AWS/Lambda", "AsyncEventAge", "FunctionName", []string{fn("deliver"), fn("runner")}},
		{"AsyncEventsDroppedAlarm", "AWS/Lambda", "AsyncEventsDropped", "FunctionName", []string{fn("deliver"), fn("runner")}},
		{"TableThrottlesAlarm", "AWS/DynamoDB", "ReadThrottleEvents", "TableName", []string{"${LogTable}", "${ConnectionsTable}", "${AgentsTable}"}},
		{"TableThrottlesAlarm", "AWS/DynamoDB", "WriteThrottleEvents", "TableName", []string{"${LogTable}", "${ConnectionsTable}", "${AgentsTable}"}},
		{"ApiErrorsAlarm", "AWS/ApiGateway", "IntegrationError", "ApiId", []string{"${WebSocketApi}"}},
		{"ApiErrorsAlarm", "AWS/ApiGateway", "ExecutionError", "ApiId", []string{"${WebSocketApi}"}},
		// MessageCount counts posts to clients and keepalives too: not a denominator.
		{"ApiErrorsAlarm", "AWS/ApiGateway", "MessageCount", "Stage", nil},
		{"ApiErrorsAlarm", "AWS/ApiGateway", "ConnectCount", "Stage", []string{"${Stage}"}},
		{"ApiErrorsAlarm", emfNamespace, "OriginRefused", "function", []string{"connect"}},
		{"ApiErrorsAlarm", "AWS/Lambda", "Invocations", "FunctionName", []string{fn("message"), fn("disconnect")}},
		{"ApiErrorsAlarm", "AWS/Lambda", "Throttles", "FunctionName", []string{fn("message")}},
		{"InternalErrorsAlarm", emfNamespace, "InternalErrors", "function", []string{"connect", "message"}},
		{"InternalErrorsAlarm", "AWS/Lambda", "Invocations", "FunctionName", []string{fn("connect"), fn("message")}},
		{"FailedTurnsAlarm", emfNamespace, "Turns", "status", []string{"completed", "cancelled", "rejected", "empty", "failed"}},
		{"FailedTurnsAlarm", emfNamespace, "Turns", "function", []string{"runner", "runner", "runner", "runner", "runner"}},
		{"ClientErrorsAlarm", "AWS/ApiGateway", "ClientError", "ApiId", []string{"${WebSocketApi}"}},
		{"AccountConcurrencyAlarm", "AWS/Lambda", "ClaimedAccountConcurrency", "", []string{""}},
	} {
		a := mathAlarm(t, s, c.id)
		if got := a.summed(c.namespace, c.metric, c.dim); !equalSets(got, c.want) {
			t.Errorf("%s reads %s/%s of %s %q, want %q", c.id, c.namespace, c.metric, c.dim, got, c.want)
		}
	}
	if expr := mathAlarm(t, s, "AccountConcurrencyAlarm").returned().Expression; expr != "100 * claimed / ${AccountConcurrencyLimit}" {
		t.Errorf("AccountConcurrencyAlarm expression %q, want the percent of AccountConcurrencyLimit claimed", expr)
	}
}

// TestAlarmsActionable: every alarm can clear by itself and says what to do. A metric
// alarm needs DatapointsToAlarm of at most EvaluationPeriods; one over many periods
// needs more than one datapoint (no single bad minute pages); a metric-math alarm
// returns exactly one series and reads at most 10 metrics (CloudWatch's limit); and
// docs/deploy.md has a runbook line naming each alarm.
func TestAlarmsActionable(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	runbook := string(doc)
	if i := strings.Index(runbook, "### Alarms and what to do"); i >= 0 {
		runbook = runbook[i:]
	} else {
		t.Fatal(`docs/deploy.md has no "### Alarms and what to do" section`)
	}
	ids := s.Resources("AWS::CloudWatch::Alarm")
	if len(ids) < 12 {
		t.Fatalf("%d alarms, want at least 12", len(ids))
	}
	for _, id := range ids {
		var a metricAlarm
		if err := s.Decode(&a, "Resources", id, "Properties"); err != nil {
			t.Fatal(err)
		}
		if a.DatapointsToAlarm < 1 || a.DatapointsToAlarm > a.EvaluationPeriods {
			t.Errorf("%s: DatapointsToAlarm %d of %d periods", id, a.DatapointsToAlarm, a.EvaluationPeriods)
		}
		if a.EvaluationPeriods > 1 && a.DatapointsToAlarm < 2 {
			t.Errorf("%s: one datapoint of %d pages", id, a.EvaluationPeriods)
		}
		if len(a.Metrics) > 0 {
			returned, stats := 0, 0
			for _, m := range a.Metrics {
				if m.ReturnData {
					returned++
				}
				if m.MetricStat != nil {
					stats++
				}
			}
			if returned != 1 || stats > 10 {
				t.Errorf("%s returns %d series and reads %d metrics; want 1 and at most 10", id, returned, stats)
			}
		}
		name := strings.TrimPrefix(s.String("Resources", id, "Properties", "AlarmName"), "${AWS::StackName}-")
		if !strings.Contains(runbook, "`"+name+"`") {
			t.Errorf("docs/deploy.md's runbook has no line for %s (`%s`)", id, name)
		}
	}
}

// TestAlarmMathFillsMissing: an alarm expression that adds, subtracts, multiplies or
// divides two or more series reads each of them only as FILL(id, 0). CloudWatch
// publishes no datapoint for a function, table or route that had nothing to count in a
// period, and a sum over a series without one must still be the sum of the others, not
// missing: an idle connect function must not blind the route-error alarm to the message
// function's errors. Every such alarm is found by scanning the template, so a new one is
// checked too; the ones the review named must be among them.
func TestAlarmMathFillsMissing(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	ident := regexp.MustCompile(`[a-z][A-Za-z0-9_]*`)
	checked := map[string]bool{}
	for _, id := range s.Resources("AWS::CloudWatch::Alarm") {
		var a metricAlarm
		if err := s.Decode(&a, "Resources", id, "Properties"); err != nil {
			t.Fatal(err)
		}
		series := map[string]bool{}
		for _, m := range a.Metrics {
			if m.MetricStat != nil {
				series[m.ID] = true
			}
		}
		for _, m := range a.Metrics {
			if m.Expression == "" || !strings.ContainsAny(m.Expression, "+-*/") {
				continue // MAX([...]) of ages, or a plain series
			}
			read := map[string]bool{}
			for _, name := range ident.FindAllString(m.Expression, -1) {
				if series[name] {
					read[name] = true
				}
			}
			if len(read) < 2 {
				continue // one series scaled (a percent of a constant): missing stays missing
			}
			checked[id] = true
			rest := m.Expression
			for name := range read {
				rest = strings.ReplaceAll(rest, "FILL("+name+", 0)", "")
			}
			for _, name := range ident.FindAllString(rest, -1) {
				if read[name] {
					t.Errorf("%s: %s is read without FILL(%s, 0) in %q", id, name, name, m.Expression)
				}
			}
		}
	}
	for _, id := range []string{"FunctionErrorsAlarm", "BackgroundErrorsAlarm", "FunctionThrottlesAlarm",
		"AsyncEventsDroppedAlarm", "TableThrottlesAlarm", "ApiErrorsAlarm", "LaggedConnectionsAlarm"} {
		if !checked[id] {
			t.Errorf("%s has no expression combining its series: the check did not cover it", id)
		}
	}
}
