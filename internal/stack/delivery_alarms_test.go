package stack

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// deliveryMetrics are the delivery metrics the dashboard shows, with the statistics
// it shows them by: EventsDelivered (dimension Path = fast, stream, replay), DeliveryLag
// (milliseconds, append → post) and the replay and drop counters.
var deliveryMetrics = map[string][]string{
	"EventsDelivered": {"Sum"},
	"DeliveryLag":     {"p50", "p99"},
	"Replays":         {"Sum"},
	"ReplayLength":    {"Maximum"},
	"ReplayTruncated": {"Sum"},
	"Lagged":          {"Sum"},
	"Superseded":      {"Sum"},
}

// postingFunctions are the functions that post events to clients, so record delivery
// metrics: message (a subscribe's first second of replay), deliver, runner (fast path).
var postingFunctions = []string{"deliver", "message", "runner"}

// emfNamespace is the functions' EMF namespace as the template sets it (Globals'
// METRICS_NAMESPACE): one per stack, and what every alarm and widget on those metrics
// reads.
const emfNamespace = "terret/${AWS::StackName}"

// TestDeliveryAlarmsAndDashboard: the delivery lag alarm takes the worst p99 of
// DeliveryLag over the functions that post, against DeliveryLagAlarmMilliseconds; the
// lagged alarm sums Lagged over them against LaggedConnectionsAlarmThreshold; both read
// the functions' EMF namespace. The dashboard searches every delivery metric in that
// namespace, whatever further dimensions it carries (Path).
func TestDeliveryAlarmsAndDashboard(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	for _, c := range []struct {
		id, metric, stat, threshold, exprPattern, idPattern string
	}{
		{"DeliveryLagAlarm", "DeliveryLag", "p99", "${DeliveryLagAlarmMilliseconds}", `^MAX\(\[(\w+(?:, \w+)*)\]\)$`, `(\w+)`},
		// A sum: each series filled with 0 where a function published nothing (TestAlarmMathFillsMissing).
		{"LaggedConnectionsAlarm", "Lagged", "Sum", "${LaggedConnectionsAlarmThreshold}", `^(FILL\(\w+, 0\)(?: \+ FILL\(\w+, 0\))*)$`, `FILL\((\w+), 0\)`},
	} {
		var a struct {
			Threshold any
			Metrics   []struct {
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
		if err := s.Decode(&a, "Resources", c.id, "Properties"); err != nil {
			t.Fatalf("%s: %v", c.id, err)
		}
		if jsonScalar(a.Threshold) != c.threshold {
			t.Errorf("%s threshold = %v, want %s", c.id, a.Threshold, c.threshold)
		}
		var expr string
		ids := map[string]string{} // metric id → function
		for _, m := range a.Metrics {
			if m.ReturnData {
				expr = m.Expression
				continue
			}
			ms := m.MetricStat
			if ms == nil || ms.Metric.Namespace != emfNamespace || ms.Metric.MetricName != c.metric || ms.Stat != c.stat ||
				len(ms.Metric.Dimensions) != 1 || ms.Metric.Dimensions[0].Name != "function" {
				t.Errorf("%s: metric %s = %+v, want the %s of %s/%s by function", c.id, m.ID, ms, c.stat, emfNamespace, c.metric)
				continue
			}
			ids[m.ID] = ms.Metric.Dimensions[0].Value
		}
		mm := regexp.MustCompile(c.exprPattern).FindStringSubmatch(expr)
		if mm == nil {
			t.Errorf("%s expression %q does not match %s", c.id, expr, c.exprPattern)
			continue
		}
		var fns []string
		for _, sub := range regexp.MustCompile(c.idPattern).FindAllStringSubmatch(mm[1], -1) {
			id := sub[1]
			fn, ok := ids[id]
			if !ok {
				t.Errorf("%s: %s in %q is no metric of the alarm", c.id, id, expr)
			}
			fns = append(fns, fn)
		}
		sort.Strings(fns)
		if strings.Join(fns, ",") != strings.Join(postingFunctions, ",") {
			t.Errorf("%s covers functions %v, want %v", c.id, fns, postingFunctions)
		}
	}

	body := s.String("Resources", "Dashboard", "Properties", "DashboardBody")
	var doc struct {
		Widgets []struct {
			Properties struct {
				Metrics [][]json.RawMessage
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("DashboardBody: %v", err)
	}
	searched := map[string]bool{}
	search := regexp.MustCompile(`^SEARCH\('Namespace="` + regexp.QuoteMeta(emfNamespace) + `" MetricName="(\w+)"', '(\w+)', \d+\)$`)
	for _, w := range doc.Widgets {
		for _, line := range w.Properties.Metrics {
			var e struct{ Expression string }
			if len(line) == 1 && json.Unmarshal(line[0], &e) == nil && e.Expression != "" {
				if m := search.FindStringSubmatch(e.Expression); m != nil {
					searched[m[1]+"/"+m[2]] = true
				}
			}
		}
	}
	for name, stats := range deliveryMetrics {
		for _, st := range stats {
			if !searched[name+"/"+st] {
				t.Errorf("dashboard has no SEARCH of %s/%s by %s", emfNamespace, name, st)
			}
		}
	}
}

// TestMaxConcurrentReplaysCap: a poll for a replay slot reads one group of
// connections.SlotGroupSize slots, so the 100 keys one BatchGetItem takes no longer
// bound the parameter; 1000 does, past what the log table's default read quota serves
// (docs/scale.md, "The replay slots").
func TestMaxConcurrentReplaysCap(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	if got := jsonScalar(s.Get("Parameters", "MaxConcurrentReplays", "MaxValue")); got != "1000" {
		t.Errorf("MaxConcurrentReplays MaxValue = %q, want 1000", got)
	}
}
