package main

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100..1, unsorted
	}
	tests := []struct {
		name string
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"p50 of 4 is the 2nd", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p0 is the least", ms(4, 1, 3, 2), 0, 1 * time.Millisecond},
		{"p100 is the most", ms(4, 1, 3, 2), 100, 4 * time.Millisecond},
		{"p99 of 100", ms(hundred...), 99, 99 * time.Millisecond},
		{"p95 of 100", ms(hundred...), 95, 95 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.ds, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.ds, tt.p, got, tt.want)
			}
		})
	}
}

func TestNum(t *testing.T) {
	tests := []struct {
		v    float64
		unit string
		want string
	}{
		{3.14159, "ms", "3.14 ms"},
		{12.5, "s", "12.50 s"},
		{2353.4, "events/s", "2353 ev/s"},
		{5, "events", "5"},
		{5.25, "events", "5.2"},
		{0.0544, "RRU", "0.054"},
	}
	for _, tt := range tests {
		if got := num(tt.v, tt.unit); got != tt.want {
			t.Errorf("num(%v, %q) = %q, want %q", tt.v, tt.unit, got, tt.want)
		}
	}
}

func TestWithConsumedCapacity(t *testing.T) {
	in := &dynamodb.GetItemInput{TableName: aws.String("t1")}
	out, table := withConsumedCapacity(in)
	if table != "t1" {
		t.Errorf("table = %q, want t1", table)
	}
	if got := out.(*dynamodb.GetItemInput).ReturnConsumedCapacity; got != types.ReturnConsumedCapacityTotal {
		t.Errorf("ReturnConsumedCapacity = %q, want TOTAL", got)
	}
	if in.ReturnConsumedCapacity != "" {
		t.Error("the caller's input was changed")
	}
	set := &dynamodb.PutItemInput{TableName: aws.String("t2"), ReturnConsumedCapacity: types.ReturnConsumedCapacityIndexes}
	if out, _ := withConsumedCapacity(set); out.(*dynamodb.PutItemInput).ReturnConsumedCapacity != types.ReturnConsumedCapacityIndexes {
		t.Error("a caller's own ReturnConsumedCapacity was overridden")
	}
}

func TestCostRowOf(t *testing.T) {
	c := phaseCost{
		DDB: usage{
			{"DynamoDB", "PutItem", "log"}:                          {Calls: 10, WRU: 10},
			{"DynamoDB", "UpdateItem", "conns"}:                     {Calls: 20, WRU: 20},
			{"DynamoDB", "GetItem", "conns"}:                        {Calls: 5, RRU: 5},
			{"ApiGatewayManagementApi", "PostToConnection", ""}:     {Calls: 40},
			{"DynamoDB Streams", "GetRecords", ""}:                  {Calls: 99},
			{"Lambda", "Invoke", ""}:                                {Calls: 2},
			{"ApiGatewayManagementApi", "DeleteConnection", "none"}: {Calls: 1},
		},
		Inv: invocationCounts{
			N:    map[string]int64{"runner": 2, "deliver (log stream)": 8},
			Busy: map[string]time.Duration{"runner": 4 * time.Second, "deliver (log stream)": 2 * time.Second},
		},
	}
	r := costRowOf("turn", c, 2, "log", 40)
	want := costRow{Per: "turn", Units: 2, DynamoDBWriteUnits: 15, DynamoDBReadUnits: 2.5, LogTableWriteUnits: 5,
		LambdaInvocations: 5, LambdaGBSeconds: (4*0.5 + 2*0.25) / 2, GatewayMessages: 20, EventsPerUnit: 20, LambdaInvocPerEvent: 0.25}
	if r != want {
		t.Errorf("costRowOf = %+v\nwant        %+v", r, want)
	}
}

// TestTurnTarget: the turn targets of docs/cost.md, checked against their floor.
func TestTurnTarget(t *testing.T) {
	for _, tc := range []struct {
		kind  string
		ratio float64
		label string
		ok    bool
	}{
		{"plain", 2.0, "≤ 2× floor", true},
		{"plain", 2.05, "≤ 2× floor", false},
		{"40-event", 1.25, "≤ 1.3× floor", true},
		{"40-event", 1.31, "≤ 1.3× floor", false},
		{"tool", 9, "", true},
	} {
		tg := turnTarget(tc.kind)
		if tg.text != tc.label {
			t.Errorf("turnTarget(%q) label = %q, want %q", tc.kind, tg.text, tc.label)
		}
		if tg.ok != nil {
			if got := tg.ok(0, tc.ratio); got != tc.ok {
				t.Errorf("turnTarget(%q) at %g× = %v, want %v", tc.kind, tc.ratio, got, tc.ok)
			}
		}
	}
}

// TestAgeFigures: the age phase's inject → turn/end is the median of the paired
// rounds' ratios (not the ratio of the two logs' medians, which a slow moment on one
// side would swing), and each figure of the oldest log is held to 1.2× the youngest
// log's, the model request to the budget's bound.
func TestAgeFigures(t *testing.T) {
	res := []ageResult{
		{Events: 100, RRU: 7, WRU: 10.8, Invocations: 1, RequestBytes: 8000, TurnsMS: []float64{100, 300, 110}, HeapMB: []float64{1.5, 1.9, 1.6}},
		{Events: 10_000, RRU: 9, WRU: 10.8, Invocations: 1, RequestBytes: 7000, TurnsMS: []float64{400, 290, 100}, HeapMB: []float64{1.5, 1.5, 1.5}},
		{Events: 100_000, RRU: 8.5, WRU: 12, Invocations: 1, RequestBytes: ageRequestBound + 1, TurnsMS: []float64{110, 290, 150}, HeapMB: []float64{1.4, 1.6, 9}, Compacted: []bool{false, true, true}},
	}
	summarizeAge(res)
	// Rounds' ratios at 100,000: 1.1, 0.97, 1.36 — the median is round 0's; the logs'
	// own medians (150 against 110) would make 1.36. The heap: the larger of the least
	// plain turn's (1.4) and the least compacting turn's (1.6; 9 is a turn the stack's
	// own work fell into).
	if x := res[2]; x.Paired != 110 || x.PairedFloor != 100 || x.P50 != 150 || x.PeakHeapMB != 1.6 {
		t.Fatalf("100,000 events: paired %v/%v, p50 %v, heap %v; want 110/100, 150, 1.6", x.Paired, x.PairedFloor, x.P50, x.PeakHeapMB)
	}
	if x := res[0]; x.PeakHeapMB != 1.5 {
		t.Fatalf("100 events: heap %v, want the least of its turns, 1.5 (none compacted)", x.PeakHeapMB)
	}
	// Lower middle of an even count, as the replay's rounds.
	if got := medianIndex([]float64{4, 1, 3, 2}); got != 3 {
		t.Fatalf("medianIndex of 4 1 3 2 = %d, want 3 (the 2)", got)
	}
	b := &bench{o: options{ageSizes: "100,10000,100000", ageRounds: 3}}
	b.res.age = res
	r := &report{Settings: map[string]any{}}
	b.reportAge(r, r.add)
	want := map[string]string{ // name → target and verdict ("" none)
		"100 events: inject → turn/end p50":                             "",
		"10000 events: inject → turn/end, median round":                 "",
		"100000 events: inject → turn/end, median round":                "≤ 1.2× floor ok",
		"10000 events: read units / turn":                               "",
		"100000 events: read units / turn":                              "≤ 1.2× floor MISS",
		"100000 events: write units / turn":                             "≤ 1.2× floor ok",
		"100000 events: runner invocations / turn":                      "≤ 1.2× floor ok",
		"100000 events: runner peak heap over the heap before the turn": "≤ 1.2× floor ok",
		"100000 events: largest model request":                          "≤ 1.2× floor MISS",
		"100 events: largest model request, bounded by the budget":      "≤ 16000 B (budget 2000 tokens) ok",
		"100000 events: largest model request, bounded by the budget":   "≤ 16000 B (budget 2000 tokens) MISS",
	}
	seen := map[string]bool{}
	for _, f := range r.Figures {
		got := f.Target
		if f.Meets != nil {
			got += map[bool]string{true: " ok", false: " MISS"}[*f.Meets]
		}
		if w, ok := want[f.Name]; ok {
			seen[f.Name] = true
			if got != w {
				t.Errorf("%s: target %q, want %q", f.Name, got, w)
			}
		}
		if f.Name == "100000 events: inject → turn/end, median round" && (f.Value != 110 || *f.Floor != 100) {
			t.Errorf("%s: %v beside %v, want 110 beside 100", f.Name, f.Value, *f.Floor)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("no figure %q", name)
		}
	}
	if len(r.Age) != 3 || r.Settings["age_rounds"] != 3 {
		t.Errorf("the JSON lacks the age results or settings: %d results, settings %v", len(r.Age), r.Settings)
	}
}

// TestObserversFigures: the observers phase shows the driver's tail with observers
// beside its tail with none, the most observers held to 1.2× of none, and gateway posts
// per appended event beside their floor of one per reader (the driver and each
// observer), held to it.
func TestObserversFigures(t *testing.T) {
	ms := func(v int) []time.Duration { return []time.Duration{time.Duration(v) * time.Millisecond} }
	posts := func(n int64) phaseCost {
		return phaseCost{DDB: usage{{"ApiGatewayManagementApi", "PostToConnection", ""}: {Calls: n},
			{"DynamoDB", "GetItem", "conns"}: {Calls: 10, RRU: 10}, {"DynamoDB", "Scan", "agents"}: {Calls: 5, RRU: 50}}}
	}
	for _, tc := range []struct {
		name           string
		sevenMS        int   // the driver's tail with 7 observers; 10 ms with none
		sevenPosts     int64 // posts for its 10 events
		wantTail       bool
		wantPosts      bool
		wantPostsValue float64
	}{
		{"within both", 12, 80, true, true, 8},
		{"tail past 1.2×", 13, 80, false, true, 8},
		{"a post more than one per reader", 11, 81, true, false, 8.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := observersResult{
				Counts: []int{0, 1, 7},
				Driver: []tailResult{
					{Lat: ms(10), Cost: posts(10), Events: 10},
					{Lat: ms(30), Cost: posts(20), Events: 10}, // no target on 1 observer
					{Lat: ms(tc.sevenMS), Cost: posts(tc.sevenPosts), Events: 10},
				},
				Obs:   [][]time.Duration{nil, ms(11), ms(14)},
				Floor: ms(5),
			}
			r := &report{}
			res.figures(r.add)
			byName := map[string]figure{}
			for _, f := range r.Figures {
				byName[f.Name] = f
			}
			none := byName["driver p50, no observers (floor: PutItem + post)"]
			if none.Value != 10 || none.Floor == nil || *none.Floor != 5 || none.Meets != nil {
				t.Errorf("no observers: %+v; want 10 ms beside the 5 ms floor, no target", none)
			}
			if one := byName["driver p50, 1 observer (floor: no observers)"]; one.Meets != nil || one.Ratio == nil || *one.Ratio != 3 {
				t.Errorf("1 observer: %+v; want ratio 3, no target", one)
			}
			for _, p := range []string{"p50", "p99"} {
				f := byName["driver "+p+", 7 observers (floor: no observers)"]
				if f.Target != "≤ 1.2× none" || f.Meets == nil || *f.Meets != tc.wantTail || *f.Floor != 10 {
					t.Errorf("7 observers %s: %+v; want target ≤ 1.2× none, meets %v, floor 10", p, f, tc.wantTail)
				}
			}
			f := byName["gateway posts / event, 7 observers (floor: one per reader)"]
			if f.Value != tc.wantPostsValue || *f.Floor != 8 || f.Meets == nil || *f.Meets != tc.wantPosts {
				t.Errorf("posts with 7 observers: %+v; want %v beside 8, meets %v", f, tc.wantPostsValue, tc.wantPosts)
			}
			if f := byName["read units / event, 0 observers (no Scan)"]; f.Value != 1 {
				t.Errorf("read units with none: %+v; want 1, the local engine's Scan left out", f)
			}
			if f := byName["gateway posts / event, 0 observers (floor: one per reader)"]; f.Value != 1 || *f.Floor != 1 || !*f.Meets {
				t.Errorf("posts with none: %+v; want 1 beside 1, met", f)
			}
			if f := byName["observers p50, 7 observers (floor: their driver)"]; f.Value != 14 || *f.Floor != float64(tc.sevenMS) {
				t.Errorf("observers' tail: %+v; want 14 ms beside their driver's %d ms", f, tc.sevenMS)
			}
		})
	}
	if _, err := observerCounts("1,7"); err == nil {
		t.Error("observerCounts(1,7): no error; want one (0 first)")
	}
	if got, err := observerCounts(" 0, 1,7"); err != nil || len(got) != 3 || got[2] != 7 {
		t.Errorf("observerCounts(0,1,7) = %v, %v", got, err)
	}
	if _, err := observerCounts("0,7,1"); err == nil {
		t.Error("observerCounts(0,7,1): no error; want one (ascending)")
	}
}
