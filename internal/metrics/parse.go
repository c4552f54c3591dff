package metrics

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Line is one EMF line read back as CloudWatch reads it: what tests of the handlers'
// metrics assert on.
type Line struct {
	Namespace string
	Name      string
	Unit      Unit
	Values    []float64 // one point, or every point of a value array (AddValues)
	Dims      string    // "k=v,k=v" in the order of the line's dimension set
}

// Parse reads one line written by a Recorder. A line that is not one metric of a
// namespace with one dimension set is an error.
func Parse(line string) (Line, error) {
	var doc struct {
		AWS struct {
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		} `json:"_aws"`
	}
	var members map[string]any
	if err := json.Unmarshal([]byte(line), &doc); err != nil {
		return Line{}, fmt.Errorf("metrics: EMF line %q: %w", line, err)
	}
	_ = json.Unmarshal([]byte(line), &members)
	m := doc.AWS.CloudWatchMetrics
	if len(m) != 1 || m[0].Namespace == "" || len(m[0].Metrics) != 1 || len(m[0].Dimensions) != 1 {
		return Line{}, fmt.Errorf("metrics: EMF line %s: want one metric of a namespace with one dimension set", line)
	}
	var dims []string
	for _, d := range m[0].Dimensions[0] {
		dims = append(dims, fmt.Sprintf("%s=%v", d, members[d]))
	}
	l := Line{Namespace: m[0].Namespace, Name: m[0].Metrics[0].Name, Unit: Unit(m[0].Metrics[0].Unit), Dims: strings.Join(dims, ",")}
	switch v := members[l.Name].(type) {
	case float64:
		l.Values = []float64{v}
	case []any:
		for _, x := range v {
			f, ok := x.(float64)
			if !ok {
				return Line{}, fmt.Errorf("metrics: EMF line %s: %v in %s is no number", line, x, l.Name)
			}
			l.Values = append(l.Values, f)
		}
	default:
		return Line{}, fmt.Errorf("metrics: EMF line %s: value %v of %s is no number nor array of numbers", line, v, l.Name)
	}
	return l, nil
}
