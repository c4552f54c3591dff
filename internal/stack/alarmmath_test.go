package stack

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The alarms' metric math, evaluated: a small interpreter of the subset of CloudWatch's
// metric-math language the template uses (numbers, series ids, + - * /, comparisons,
// IF, FILL, MAX of a list, and a Metrics Insights SELECT SUM(metric)), so that each
// alarm's expression is checked on the minutes it must and must not breach, not only
// for its shape. A series without a datapoint is NaN, as CloudWatch leaves it missing;
// FILL replaces it; an expression whose value is missing does not breach
// (TreatMissingData notBreaching).
// https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html

type mathExpr interface {
	eval(series map[string]float64) float64
}

type (
	mathNum float64
	mathID  string
	mathBin struct {
		op   string
		l, r mathExpr
	}
	mathCall struct {
		fn   string
		args []mathExpr
	}
	mathList  []mathExpr
	mathQuery string // SELECT SUM(<metric>): the sum over every series of that metric
)

func (n mathNum) eval(map[string]float64) float64 { return float64(n) }

func (id mathID) eval(s map[string]float64) float64 {
	if v, ok := s[string(id)]; ok {
		return v
	}
	return math.NaN()
}

func (q mathQuery) eval(s map[string]float64) float64 {
	sum, any := 0.0, false
	for k, v := range s {
		if strings.HasPrefix(k, "query:"+string(q)+"{") {
			sum, any = sum+v, true
		}
	}
	if !any {
		return math.NaN()
	}
	return sum
}

func truth(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (b mathBin) eval(s map[string]float64) float64 {
	l, r := b.l.eval(s), b.r.eval(s)
	if math.IsNaN(l) || math.IsNaN(r) {
		return math.NaN()
	}
	switch b.op {
	case "+":
		return l + r
	case "-":
		return l - r
	case "*":
		return l * r
	case "/":
		if r == 0 {
			return math.NaN() // CloudWatch: no value for a division by zero
		}
		return l / r
	case ">":
		return truth(l > r)
	case ">=":
		return truth(l >= r)
	case "<":
		return truth(l < r)
	case "<=":
		return truth(l <= r)
	case "==":
		return truth(l == r)
	}
	panic("operator " + b.op)
}

func (c mathCall) eval(s map[string]float64) float64 {
	switch c.fn {
	case "IF":
		cond := c.args[0].eval(s)
		if math.IsNaN(cond) {
			return math.NaN()
		}
		if cond != 0 {
			return c.args[1].eval(s)
		}
		return c.args[2].eval(s)
	case "FILL":
		if v := c.args[0].eval(s); !math.IsNaN(v) {
			return v
		}
		return c.args[1].eval(s)
	case "MAX":
		best := math.NaN()
		for _, e := range c.args[0].(mathList) {
			if v := e.eval(s); !math.IsNaN(v) && (math.IsNaN(best) || v > best) {
				best = v
			}
		}
		return best
	}
	panic("function " + c.fn)
}

func (l mathList) eval(map[string]float64) float64 { panic("a list is no value") }

// mathParser is a recursive-descent parser: comparison < additive < multiplicative <
// primary, each level left-associative.
type mathParser struct {
	toks []string
	i    int
}

var mathToken = regexp.MustCompile(`\s*(>=|<=|==|[-+*/(),\[\]<>]|[0-9]+(?:\.[0-9]+)?|[A-Za-z_][A-Za-z0-9_]*)`)

func parseMath(expr string) (mathExpr, error) {
	if m := regexp.MustCompile(`^SELECT SUM\((\w+)\) FROM "[^"]+"$`).FindStringSubmatch(expr); m != nil {
		return mathQuery(m[1]), nil
	}
	p := &mathParser{}
	rest := expr
	for strings.TrimSpace(rest) != "" {
		m := mathToken.FindStringSubmatchIndex(rest)
		if m == nil || m[0] != 0 {
			return nil, fmt.Errorf("cannot read %q", rest)
		}
		p.toks = append(p.toks, rest[m[2]:m[3]])
		rest = rest[m[1]:]
	}
	e, err := p.comparison()
	if err == nil && p.i != len(p.toks) {
		err = fmt.Errorf("trailing %q", p.toks[p.i:])
	}
	return e, err
}

func (p *mathParser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

func (p *mathParser) expect(tok string) error {
	if p.peek() != tok {
		return fmt.Errorf("want %q at token %d, got %q", tok, p.i, p.peek())
	}
	p.i++
	return nil
}

func (p *mathParser) comparison() (mathExpr, error) {
	l, err := p.additive()
	for err == nil {
		op := p.peek()
		if op != ">" && op != ">=" && op != "<" && op != "<=" && op != "==" {
			break
		}
		p.i++
		var r mathExpr
		r, err = p.additive()
		l = mathBin{op, l, r}
	}
	return l, err
}

func (p *mathParser) additive() (mathExpr, error) {
	l, err := p.multiplicative()
	for err == nil && (p.peek() == "+" || p.peek() == "-") {
		op := p.toks[p.i]
		p.i++
		var r mathExpr
		r, err = p.multiplicative()
		l = mathBin{op, l, r}
	}
	return l, err
}

func (p *mathParser) multiplicative() (mathExpr, error) {
	l, err := p.primary()
	for err == nil && (p.peek() == "*" || p.peek() == "/") {
		op := p.toks[p.i]
		p.i++
		var r mathExpr
		r, err = p.primary()
		l = mathBin{op, l, r}
	}
	return l, err
}

func (p *mathParser) primary() (mathExpr, error) {
	tok := p.peek()
	p.i++
	switch {
	case tok == "(":
		e, err := p.comparison()
		if err != nil {
			return nil, err
		}
		return e, p.expect(")")
	case tok == "[":
		var list mathList
		for {
			e, err := p.comparison()
			if err != nil {
				return nil, err
			}
			list = append(list, e)
			if p.peek() != "," {
				break
			}
			p.i++
		}
		return list, p.expect("]")
	case tok != "" && unicode.IsDigit(rune(tok[0])):
		v, err := strconv.ParseFloat(tok, 64)
		return mathNum(v), err
	case tok == "IF" || tok == "FILL" || tok == "MAX":
		if err := p.expect("("); err != nil {
			return nil, err
		}
		var args []mathExpr
		for {
			e, err := p.comparison()
			if err != nil {
				return nil, err
			}
			args = append(args, e)
			if p.peek() != "," {
				break
			}
			p.i++
		}
		want := map[string]int{"IF": 3, "FILL": 2, "MAX": 1}[tok]
		if len(args) != want {
			return nil, fmt.Errorf("%s takes %d arguments, got %d", tok, want, len(args))
		}
		return mathCall{tok, args}, p.expect(")")
	case tok != "" && (unicode.IsLetter(rune(tok[0])) || tok[0] == '_'):
		return mathID(tok), nil
	}
	return nil, fmt.Errorf("unexpected %q at token %d", tok, p.i-1)
}

// alarmEval is an alarm ready to judge one period: its returned expression, what each
// of its series ids reads (seriesKey), its threshold (the parameter's default) and its
// comparison.
type alarmEval struct {
	expr      mathExpr
	keyOf     map[string]string // series id → seriesKey
	threshold float64
	op        string
}

// seriesKey names a series by metric and dimension values (dimensions in name order,
// the stack name prefix and the API's own dimensions left out): Invocations{connect},
// Turns{runner,failed}, IntegrationError{}.
func seriesKey(metric string, dims []struct{ Name, Value string }) string {
	sort.Slice(dims, func(i, j int) bool { return dims[i].Name < dims[j].Name })
	var vals []string
	for _, d := range dims {
		if d.Name == "ApiId" || d.Name == "Stage" {
			continue
		}
		vals = append(vals, strings.TrimPrefix(d.Value, "${AWS::StackName}-"))
	}
	return metric + "{" + strings.Join(vals, ",") + "}"
}

func loadAlarmEval(t *testing.T, s *Stack, id string) alarmEval {
	t.Helper()
	var a struct {
		Threshold          any
		ComparisonOperator string
		TreatMissingData   string
		Metrics            []struct {
			ID         string `json:"Id"`
			Expression string
			ReturnData bool
			MetricStat *struct {
				Metric struct {
					MetricName string
					Dimensions []struct{ Name, Value string }
				}
			}
		}
	}
	if err := s.Decode(&a, "Resources", id, "Properties"); err != nil {
		t.Fatal(err)
	}
	if a.TreatMissingData != "notBreaching" {
		t.Fatalf("%s: TreatMissingData %q; these checks read a missing value as not breaching", id, a.TreatMissingData)
	}
	params := func(text string) string {
		return regexp.MustCompile(`\$\{(\w+)\}`).ReplaceAllStringFunc(text, func(ref string) string {
			name := strings.Trim(ref, "${}")
			if d := s.Get("Parameters", name, "Default"); d != nil {
				return jsonScalar(d)
			}
			return ref
		})
	}
	ev := alarmEval{keyOf: map[string]string{}, op: a.ComparisonOperator}
	th, err := strconv.ParseFloat(params(jsonScalar(a.Threshold)), 64)
	if err != nil {
		t.Fatalf("%s: threshold %v: %v", id, a.Threshold, err)
	}
	ev.threshold = th
	for _, m := range a.Metrics {
		if m.MetricStat != nil {
			ev.keyOf[m.ID] = seriesKey(m.MetricStat.Metric.MetricName, m.MetricStat.Metric.Dimensions)
		}
		if m.ReturnData {
			expr := params(m.Expression)
			if strings.HasPrefix(expr, "SELECT") {
				expr = regexp.MustCompile(`"terret/[^"]*"`).ReplaceAllString(expr, `"terret/stack"`)
			}
			e, err := parseMath(expr)
			if err != nil {
				t.Fatalf("%s: expression %q: %v", id, m.Expression, err)
			}
			ev.expr = e
		}
	}
	return ev
}

// breaches evaluates one period with the series given by key (absent: no datapoint).
func (a alarmEval) breaches(t *testing.T, byKey map[string]float64) (float64, bool) {
	t.Helper()
	byID := map[string]float64{}
	known := map[string]bool{}
	for id, key := range a.keyOf {
		known[key] = true
		if v, ok := byKey[key]; ok {
			byID[id] = v
		}
	}
	for key, v := range byKey {
		if strings.HasPrefix(key, "query:") {
			byID[key] = v
			continue
		}
		if !known[key] {
			t.Fatalf("series %s is not read by the alarm (it reads %v)", key, a.keyOf)
		}
	}
	v := a.expr.eval(byID)
	if math.IsNaN(v) {
		return v, false
	}
	switch a.op {
	case "GreaterThanThreshold":
		return v, v > a.threshold
	case "GreaterThanOrEqualToThreshold":
		return v, v >= a.threshold
	}
	t.Fatalf("comparison %s", a.op)
	return v, false
}

// TestAlarmMath evaluates every alarm's expression on the minutes the review named:
// a total outage at launch traffic, scanners on the raw URL, a busy API whose posts
// and keepalives outnumber its requests, internal answers, failed turns, model errors,
// throttled clients; and the quiet minute (no datapoint at all) that must never page.
// Every metric-math alarm of the template has cases here.
func TestAlarmMath(t *testing.T) {
	t.Parallel()
	s := loadStack(t)
	type series = map[string]float64
	cases := map[string][]struct {
		name   string
		series series
		breach bool
	}{
		"FunctionErrorsAlarm": {
			{"no traffic", series{}, false},
			{"launch outage: 2 connects, both fail", series{"Invocations{connect}": 2, "Errors{connect}": 2}, true},
			{"one failure in a quiet minute breaches it (3 of 5 page)", series{"Invocations{message}": 3, "Errors{message}": 1}, true},
			{"quiet and healthy", series{"Invocations{message}": 3}, false},
			{"busy, 1% failing", series{"Invocations{message}": 1000, "Errors{message}": 10}, false},
			{"busy, 10% failing", series{"Invocations{message}": 900, "Invocations{connect}": 100, "Errors{connect}": 100}, true},
			{"the http function failing", series{"Invocations{http}": 20, "Errors{http}": 5}, true},
		},
		"BackgroundErrorsAlarm": {
			{"the schedules alone, healthy", series{"Invocations{deliver}": 1, "Invocations{runner}": 1}, false},
			{"agent schedules failing among few", series{"Invocations{schedule}": 3, "Errors{schedule}": 3}, true},
			{"the token sweep failing every minute", series{"Invocations{deliver}": 1, "Invocations{runner}": 1, "Errors{deliver}": 1}, true},
			{"busy, 2% failing", series{"Invocations{deliver}": 1000, "Errors{deliver}": 20}, false},
			{"the webhook function failing among healthy deliver", series{"Invocations{deliver}": 100, "Invocations{webhook}": 20, "Errors{webhook}": 20}, true},
		},
		"WebhookThrottlesAlarm": {
			{"no traffic", series{}, false},
			{"quiet minute, a throttle", series{"Invocations{webhook}": 2, "Throttles{webhook}": 1}, true},
			{"busy, 0.5% throttled", series{"Invocations{webhook}": 995, "Throttles{webhook}": 5}, false},
		},
		"ScheduleThrottlesAlarm": {
			{"no fires", series{}, false},
			{"a fire throttled among few", series{"Invocations{schedule}": 2, "Throttles{schedule}": 1}, true},
			{"many fires, 0.5% throttled", series{"Invocations{schedule}": 995, "Throttles{schedule}": 5}, false},
		},
		"FunctionThrottlesAlarm": {
			{"no traffic", series{}, false},
			{"quiet minute, a throttle", series{"Invocations{connect}": 2, "Throttles{connect}": 1}, true},
			{"busy, 0.5% throttled", series{"Invocations{message}": 995, "Throttles{message}": 5}, false},
			{"busy, 5% throttled", series{"Invocations{runner}": 95, "Throttles{runner}": 5}, true},
		},
		"HttpThrottlesAlarm": {
			{"no traffic", series{}, false},
			{"quiet minute, a throttle", series{"Invocations{http}": 2, "Throttles{http}": 1}, true},
			{"busy, 0.5% throttled", series{"Invocations{http}": 995, "Throttles{http}": 5}, false},
		},
		"ApiErrorsAlarm": {
			{"no traffic", series{}, false},
			{"launch outage: 3 connects, all failing", series{"ConnectCount{}": 3, "IntegrationError{}": 3}, true},
			{"scanners on the raw URL refused for want of the origin header", series{"ConnectCount{}": 500, "IntegrationError{}": 500, "OriginRefused{connect}": 500}, false},
			{"scanners and a real failure among few clients", series{"ConnectCount{}": 502, "IntegrationError{}": 501, "OriginRefused{connect}": 500}, true},
			{"busy: 10% of the requests fail", series{"ConnectCount{}": 100, "Invocations{message}": 800, "Invocations{disconnect}": 100, "IntegrationError{}": 100}, true},
			{"busy: 0.5% fail", series{"ConnectCount{}": 100, "Invocations{message}": 800, "Invocations{disconnect}": 100, "IntegrationError{}": 5}, false},
			{"message function throttled: execution errors", series{"ConnectCount{}": 10, "Invocations{message}": 50, "Throttles{message}": 40, "ExecutionError{}": 40}, true},
		},
		"InternalErrorsAlarm": {
			{"no traffic", series{}, false},
			{"a broken grant at launch traffic", series{"Invocations{message}": 2, "InternalErrors{message}": 2}, true},
			{"busy, one internal answer in a thousand", series{"Invocations{message}": 1000, "InternalErrors{message}": 1}, false},
			{"busy, connect failing", series{"Invocations{message}": 100, "Invocations{connect}": 100, "InternalErrors{connect}": 100}, true},
		},
		"FailedTurnsAlarm": {
			{"no turns", series{}, false},
			{"the only turns fail", series{"Turns{runner,failed}": 2}, true},
			{"a few completed", series{"Turns{runner,completed}": 3, "Turns{runner,empty}": 1}, false},
			{"busy, 1 in 100 failed", series{"Turns{runner,completed}": 99, "Turns{runner,failed}": 1}, false},
			{"busy, 20% failed", series{"Turns{runner,completed}": 70, "Turns{runner,cancelled}": 10, "Turns{runner,failed}": 20}, true},
		},
		"ModelErrorsAlarm": {
			{"none", series{}, false},
			{"one model failing", series{"query:ModelErrors{runner,bedrock,main}": 1}, true},
			{"two models", series{"query:ModelErrors{runner,bedrock,main}": 2, "query:ModelErrors{runner,openai,titler}": 1}, true},
		},
		"ClientErrorsAlarm": {
			{"none", series{}, false},
			{"a few bad requests", series{"ClientError{}": 3}, false},
			{"clients throttled", series{"ClientError{}": 200}, true},
		},
		"AccountConcurrencyAlarm": {
			{"no datapoint", series{}, false},
			{"half the account", series{"ClaimedAccountConcurrency{}": 500}, false},
			{"near the quota", series{"ClaimedAccountConcurrency{}": 900}, true},
		},
		"TableThrottlesAlarm": {
			{"none", series{}, false},
			{"one table throttled", series{"WriteThrottleEvents{${LogTable}}": 3}, true},
		},
		"AsyncEventsDroppedAlarm": {
			{"none", series{}, false},
			{"a dropped hello", series{"AsyncEventsDropped{deliver}": 1}, true},
		},
		"LaggedConnectionsAlarm": {
			{"a few", series{"Lagged{deliver}": 3, "Lagged{message}": 2}, false},
			{"many, over functions", series{"Lagged{deliver}": 6, "Lagged{runner}": 4}, true},
		},
		"StreamIteratorAgeAlarm": {
			{"caught up", series{"IteratorAge{deliver}": 100}, false},
			{"behind", series{"IteratorAge{deliver}": 60000}, true},
		},
		"AsyncEventAgeAlarm": {
			{"fresh", series{"AsyncEventAge{deliver}": 10, "AsyncEventAge{runner}": 10}, false},
			{"runner queue waiting", series{"AsyncEventAge{runner}": 120000}, true},
		},
		"DeliveryLagAlarm": {
			{"quick", series{"DeliveryLag{message}": 100, "DeliveryLag{deliver}": 200}, false},
			{"one function late", series{"DeliveryLag{runner}": 9000}, true},
		},
	}
	for _, id := range s.Resources("AWS::CloudWatch::Alarm") {
		if s.Get("Resources", id, "Properties", "Metrics") == nil {
			continue // a plain metric alarm: no math
		}
		if _, ok := cases[id]; !ok {
			t.Errorf("%s: a metric-math alarm with no case in TestAlarmMath", id)
		}
	}
	for id, cs := range cases {
		a := loadAlarmEval(t, s, id)
		for _, c := range cs {
			if v, got := a.breaches(t, c.series); got != c.breach {
				t.Errorf("%s, %s: value %v against %v (%s): breaching %v, want %v", id, c.name, v, a.threshold, a.op, got, c.breach)
			}
		}
	}
}

// TestDashboardShowsFailures: the runbook points at the dashboard for failed turns,
// model errors, internal answers and throttled clients; each has a widget line: a
// SEARCH over the stack's namespace for the service's own metrics, the API's metric
// for ClientError.
func TestDashboardShowsFailures(t *testing.T) {
	t.Parallel()
	body := loadStack(t).String("Resources", "Dashboard", "Properties", "DashboardBody")
	for _, want := range []string{
		`SEARCH('Namespace=\"` + emfNamespace + `\" MetricName=\"Turns\"', 'Sum', 60)`,
		`SEARCH('Namespace=\"` + emfNamespace + `\" MetricName=\"ModelErrors\"', 'Sum', 60)`,
		`SEARCH('Namespace=\"` + emfNamespace + `\" MetricName=\"InternalErrors\"', 'Sum', 60)`,
		`["AWS/ApiGateway", "ClientError", "ApiId", "${WebSocketApi}", "Stage", "${Stage}"]`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("dashboard has no %s", want)
		}
	}
}
