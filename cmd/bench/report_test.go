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
