// Package metrics records the service's own metrics in two forms at once: CloudWatch
// embedded metric format (EMF) JSON lines written to the function's stdout, which
// CloudWatch Logs turns into metrics with no API call, and in-memory aggregates served in
// Prometheus text format (`terret dev`'s /metrics). Dimensions are few and bounded: the
// function name and, per metric, a small closed set (never an agent or connection id).
package metrics

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
)

// Unit is a CloudWatch unit.
type Unit string

// The units the service uses.
const (
	Count        Unit = "Count"
	Milliseconds Unit = "Milliseconds"
)

// DefaultNamespace is the CloudWatch namespace of a Recorder given none. A deployed
// stack sets its own (METRICS_NAMESPACE, "terret/<stack name>" in template.yaml), so
// two stacks in one account and region never mix their metrics.
const DefaultNamespace = "terret"

// Dim is one dimension.
type Dim struct{ Name, Value string }

type key struct {
	name string
	dims string // "k=v,k=v", sorted
}

type agg struct {
	unit       Unit
	dims       []Dim
	count, sum float64
}

// Recorder records metric points. It is safe for concurrent use. A nil *Recorder
// records nothing.
type Recorder struct {
	mu     sync.Mutex
	emf    io.Writer // nil: no EMF lines
	ns     string    // CloudWatch namespace of the EMF lines
	base   []Dim
	now    func() time.Time
	series map[key]*agg
}

// New returns a Recorder writing EMF lines of namespace ns (empty: DefaultNamespace) to
// emf (nil: none) with the dimensions base on every point (e.g. the function name).
func New(emf io.Writer, ns string, base ...Dim) *Recorder {
	if ns == "" {
		ns = DefaultNamespace
	}
	return &Recorder{emf: emf, ns: ns, base: base, now: time.Now, series: map[key]*agg{}}
}

// Add records one point: value v of metric name (CamelCase) in unit, with dims beyond the
// base ones. Cost: one short JSON line on stdout when EMF is on, no call.
func (r *Recorder) Add(name string, unit Unit, v float64, dims ...Dim) {
	if r == nil {
		return
	}
	r.add(name, unit, v, []float64{v}, dims)
}

// MaxValues is the most values one EMF line carries for a metric: CloudWatch takes an
// array of up to 100 values per metric in a document
// (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html).
const MaxValues = 100

// AddValues records len(vs) points of one metric at once, for a caller that aggregates
// (a latency per event): CloudWatch reads a value array as that many points, so its
// percentiles see each one. Cost: one EMF line per MaxValues values.
func (r *Recorder) AddValues(name string, unit Unit, vs []float64, dims ...Dim) {
	for r != nil && len(vs) > 0 {
		n := min(len(vs), MaxValues)
		sum := 0.0
		for _, v := range vs[:n] {
			sum += v
		}
		r.add(name, unit, sum, vs[:n], dims)
		vs = vs[n:]
	}
}

// add records the points vs (at least one), of sum sum.
func (r *Recorder) add(name string, unit Unit, sum float64, vs []float64, dims []Dim) {
	all := append(append([]Dim(nil), r.base...), dims...)
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	parts := make([]string, len(all))
	for i, d := range all {
		parts[i] = d.Name + "=" + d.Value
	}
	k := key{name, strings.Join(parts, ",")}
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.series[k]
	if a == nil {
		a = &agg{unit: unit, dims: all}
		r.series[k] = a
	}
	a.count += float64(len(vs))
	a.sum += sum
	if r.emf != nil {
		var v any = vs[0]
		if len(vs) > 1 {
			v = vs
		}
		_, _ = r.emf.Write(r.line(name, unit, v, all))
	}
}

// line is one EMF document: the dimension values and the metric (a number, or an array
// of numbers) as top-level members, the _aws metadata naming them
// (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html).
func (r *Recorder) line(name string, unit Unit, v any, dims []Dim) []byte {
	names := make([]string, len(dims))
	doc := map[string]any{}
	for i, d := range dims {
		names[i] = d.Name
		doc[d.Name] = d.Value
	}
	doc[name] = v
	doc["_aws"] = map[string]any{
		"Timestamp": r.now().UnixMilli(),
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace":  r.ns,
			"Dimensions": [][]string{names},
			"Metrics":    []any{map[string]any{"Name": name, "Unit": string(unit)}},
		}},
	}
	b, _ := json.Marshal(doc)
	return append(b, '\n')
}

// WritePrometheus writes every series in Prometheus text format: a Count metric as a
// counter terret_<snake_name>_total, any other as a summary's _sum and _count.
func (r *Recorder) WritePrometheus(w io.Writer) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	type row struct {
		k key
		a agg
	}
	rows := make([]row, 0, len(r.series))
	for k, a := range r.series {
		rows = append(rows, row{k, *a})
	}
	r.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].k.name != rows[j].k.name {
			return rows[i].k.name < rows[j].k.name
		}
		return rows[i].k.dims < rows[j].k.dims
	})
	typed := map[string]bool{}
	for _, rw := range rows {
		base := "terret_" + snake(rw.k.name)
		labels := promLabels(rw.a.dims)
		var err error
		if rw.a.unit == Count {
			if !typed[base] {
				_, err = fmt.Fprintf(w, "# TYPE %s_total counter\n", base)
				typed[base] = true
			}
			if err == nil {
				_, err = fmt.Fprintf(w, "%s_total%s %g\n", base, labels, rw.a.sum)
			}
		} else {
			base += "_" + strings.ToLower(string(rw.a.unit))
			if !typed[base] {
				_, err = fmt.Fprintf(w, "# TYPE %s summary\n", base)
				typed[base] = true
			}
			if err == nil {
				_, err = fmt.Fprintf(w, "%s_sum%s %g\n%s_count%s %g\n", base, labels, rw.a.sum, base, labels, rw.a.count)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Handler serves WritePrometheus.
func (r *Recorder) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = r.WritePrometheus(w)
	})
}

func promLabels(dims []Dim) string {
	if len(dims) == 0 {
		return ""
	}
	parts := make([]string, len(dims))
	for i, d := range dims {
		v := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(d.Value)
		parts[i] = snake(d.Name) + `="` + v + `"`
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// snake turns RefusedConnections into refused_connections.
func snake(s string) string {
	var b strings.Builder
	for i, c := range s {
		if unicode.IsUpper(c) {
			if i > 0 {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// std is the process's recorder, set once by the wiring (service.Boot, terret dev).
var std atomic.Pointer[Recorder]

// SetDefault makes r the recorder Add writes to.
func SetDefault(r *Recorder) { std.Store(r) }

// Default returns the recorder set by SetDefault, or nil.
func Default() *Recorder { return std.Load() }

// Add records on the default recorder; without one it does nothing. Handlers call it in
// one line at the points they already pass (a refused connection, a replay read).
func Add(name string, unit Unit, v float64, dims ...Dim) { std.Load().Add(name, unit, v, dims...) }

// AddValues records on the default recorder (Recorder.AddValues); without one it does
// nothing.
func AddValues(name string, unit Unit, vs []float64, dims ...Dim) {
	std.Load().AddValues(name, unit, vs, dims...)
}
