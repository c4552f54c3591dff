package metrics_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/metrics"
)

// emfDoc is the part of an EMF line CloudWatch reads.
type emfDoc struct {
	AWS struct {
		Timestamp         int64
		CloudWatchMetrics []struct {
			Namespace  string
			Dimensions [][]string
			Metrics    []struct{ Name, Unit string }
		}
	} `json:"_aws"`
}

// TestEMF: every point is one JSON line in CloudWatch's embedded metric format: the
// namespace, one dimension set naming exactly the dimensions present as members, the
// metric with its unit, and its value as a member. The namespace is the one given (a
// stack's own), or DefaultNamespace.
func TestEMF(t *testing.T) {
	t.Parallel()
	var other bytes.Buffer
	metrics.New(&other, "", metrics.Dim{Name: "function", Value: "connect"}).Add("Connections", metrics.Count, 1)
	if l, err := metrics.Parse(strings.TrimSpace(other.String())); err != nil || l.Namespace != metrics.DefaultNamespace {
		t.Errorf("namespace of a Recorder given none = %+v (%v), want %s", l, err, metrics.DefaultNamespace)
	}
	const ns = "terret/prod-stack"
	var buf bytes.Buffer
	r := metrics.New(&buf, ns, metrics.Dim{Name: "function", Value: "connect"})
	r.Add("RefusedConnections", metrics.Count, 1)
	r.Add("DeliveryLag", metrics.Milliseconds, 12.5, metrics.Dim{Name: "path", Value: "stream"})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("EMF output = %q, want two lines", buf.String())
	}
	want := []struct {
		name, unit string
		value      float64
		dims       map[string]string
	}{
		{"RefusedConnections", "Count", 1, map[string]string{"function": "connect"}},
		{"DeliveryLag", "Milliseconds", 12.5, map[string]string{"function": "connect", "path": "stream"}},
	}
	for i, w := range want {
		var doc emfDoc
		var members map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &doc); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal([]byte(lines[i]), &members)
		m := doc.AWS.CloudWatchMetrics
		if doc.AWS.Timestamp == 0 || len(m) != 1 || m[0].Namespace != ns || len(m[0].Metrics) != 1 ||
			m[0].Metrics[0].Name != w.name || m[0].Metrics[0].Unit != w.unit {
			t.Fatalf("line %d = %s, want %s in %s of namespace %s", i, lines[i], w.name, w.unit, ns)
		}
		if members[w.name] != w.value {
			t.Errorf("line %d: %s = %v, want %v", i, w.name, members[w.name], w.value)
		}
		if len(m[0].Dimensions) != 1 || len(m[0].Dimensions[0]) != len(w.dims) {
			t.Fatalf("line %d dimensions %v, want one set of %v", i, m[0].Dimensions, w.dims)
		}
		for _, d := range m[0].Dimensions[0] {
			if members[d] != w.dims[d] {
				t.Errorf("line %d: dimension %s = %v, want %q", i, d, members[d], w.dims[d])
			}
		}
	}
}

// TestPrometheus: the same points, aggregated, in Prometheus text format: counters for
// counts, a summary's sum and count otherwise, one series per dimension set.
func TestPrometheus(t *testing.T) {
	t.Parallel()
	r := metrics.New(nil, "", metrics.Dim{Name: "function", Value: "deliver"})
	r.Add("ReplayReads", metrics.Count, 1)
	r.Add("ReplayReads", metrics.Count, 2)
	r.Add("DeliveryLag", metrics.Milliseconds, 10, metrics.Dim{Name: "path", Value: "stream"})
	r.Add("DeliveryLag", metrics.Milliseconds, 30, metrics.Dim{Name: "path", Value: "stream"})
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	want := `# TYPE terret_delivery_lag_milliseconds summary
terret_delivery_lag_milliseconds_sum{function="deliver",path="stream"} 40
terret_delivery_lag_milliseconds_count{function="deliver",path="stream"} 2
# TYPE terret_replay_reads_total counter
terret_replay_reads_total{function="deliver"} 3
`
	if got := rec.Body.String(); got != want {
		t.Errorf("/metrics =\n%s\nwant\n%s", got, want)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type = %q", ct)
	}
	var nilRec *metrics.Recorder
	nilRec.Add("X", metrics.Count, 1) // a nil recorder records nothing, without panicking
}

// TestAddValues: many points of one metric go out as EMF value arrays of at most
// MaxValues values each (CloudWatch's limit), every point counted in /metrics.
func TestAddValues(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	r := metrics.New(&buf, "", metrics.Dim{Name: "function", Value: "deliver"})
	vs := make([]float64, metrics.MaxValues+2)
	for i := range vs {
		vs[i] = float64(i)
	}
	r.AddValues("DeliveryLag", metrics.Milliseconds, vs)
	r.AddValues("DeliveryLag", metrics.Milliseconds, nil) // nothing to record: no line
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("EMF output has %d lines, want 2:\n%s", len(lines), buf.String())
	}
	var got []float64
	for i, line := range lines {
		var doc emfDoc
		var members map[string]any
		if err := json.Unmarshal([]byte(line), &doc); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal([]byte(line), &members)
		if m := doc.AWS.CloudWatchMetrics; len(m) != 1 || m[0].Metrics[0].Name != "DeliveryLag" || m[0].Metrics[0].Unit != "Milliseconds" ||
			len(m[0].Dimensions) != 1 || strings.Join(m[0].Dimensions[0], ",") != "function" {
			t.Fatalf("line %d = %s, want DeliveryLag in Milliseconds by function", i, line)
		}
		arr, ok := members["DeliveryLag"].([]any)
		if !ok || len(arr) > metrics.MaxValues {
			t.Fatalf("line %d: DeliveryLag = %v, want an array of at most %d values", i, members["DeliveryLag"], metrics.MaxValues)
		}
		for _, v := range arr {
			got = append(got, v.(float64))
		}
	}
	if len(got) != len(vs) || got[0] != 0 || got[len(got)-1] != vs[len(vs)-1] {
		t.Errorf("values %v, want %v", got, vs)
	}
	var prom bytes.Buffer
	_ = r.WritePrometheus(&prom)
	sum := float64(len(vs)*(len(vs)-1)) / 2
	want := fmt.Sprintf("# TYPE terret_delivery_lag_milliseconds summary\nterret_delivery_lag_milliseconds_sum{function=\"deliver\"} %g\nterret_delivery_lag_milliseconds_count{function=\"deliver\"} %d\n", sum, len(vs))
	if prom.String() != want {
		t.Errorf("/metrics =\n%s\nwant\n%s", prom.String(), want)
	}
}

// TestParse reads back what a Recorder writes: one value, a value array, the
// dimensions in their set's order (sorted by name); a line of another shape is an error.
func TestParse(t *testing.T) {
	var b bytes.Buffer
	r := metrics.New(&b, "", metrics.Dim{Name: "function", Value: "deliver"})
	r.Add("Lagged", metrics.Count, 1)
	r.AddValues("DeliveryLag", metrics.Milliseconds, []float64{3, 5}, metrics.Dim{Name: "Path", Value: "fast"})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []metrics.Line{
		{Namespace: "terret", Name: "Lagged", Unit: metrics.Count, Values: []float64{1}, Dims: "function=deliver"},
		{Namespace: "terret", Name: "DeliveryLag", Unit: metrics.Milliseconds, Values: []float64{3, 5}, Dims: "Path=fast,function=deliver"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), b.String())
	}
	for i, line := range lines {
		got, err := metrics.Parse(line)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want[i]) {
			t.Errorf("Parse(%s) = %+v, %v; want %+v", line, got, err, want[i])
		}
	}
	for _, bad := range []string{`{}`, `not json`, `{"_aws":{"CloudWatchMetrics":[{"Namespace":"terret","Dimensions":[[]],"Metrics":[{"Name":"X"}]}]},"X":"y"}`} {
		if got, err := metrics.Parse(bad); err == nil {
			t.Errorf("Parse(%s) = %+v, want an error", bad, got)
		}
	}
}
