package eventsource_test

import (
	"errors"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/terret/terret-ws/internal/eventsource"
)

func TestParseFilterRejects(t *testing.T) {
	tests := []struct {
		pattern string
		want    error
	}{
		{`not json`, eventsource.ErrInvalidFilter},
		{`[]`, eventsource.ErrInvalidFilter},
		{`{}`, eventsource.ErrInvalidFilter},
		{`{"eventName":"INSERT"}`, eventsource.ErrInvalidFilter},
		{`{"eventName":[]}`, eventsource.ErrInvalidFilter},
		{`{"dynamodb":{}}`, eventsource.ErrInvalidFilter},
		{`{"eventName":[{"prefix":1}]}`, eventsource.ErrInvalidFilter},
		{`{"eventName":[{"prefix":"a","suffix":"b"}]}`, eventsource.ErrInvalidFilter},
		{`{"eventName":[["nested"]]}`, eventsource.ErrInvalidFilter},
		{`{"eventName":["INSERT"]} {}`, eventsource.ErrInvalidFilter},
		{`{"eventName":[{"anything-but":[1]}]}`, eventsource.ErrUnsupportedFilter},
		{`{"eventName":[{"anything-but":{"prefix":"R"}}]}`, eventsource.ErrUnsupportedFilter},
		{`{"eventName":[{"anything-but":[]}]}`, eventsource.ErrInvalidFilter},
		{`{"dynamodb":{"NewImage":{"n":{"N":[{"numeric":[">",5]}]}}}}`, eventsource.ErrUnsupportedFilter},
		{`{"dynamodb":{"NewImage":{"x":[{"exists":false}]}}}`, eventsource.ErrUnsupportedFilter},
		{`{"eventName":[{"suffix":"RT"}]}`, eventsource.ErrUnsupportedFilter},
		{`{"eventName":[{"equals-ignore-case":"insert"}]}`, eventsource.ErrUnsupportedFilter},
		{`{"$or":[{"eventName":["INSERT"]},{"eventName":["REMOVE"]}]}`, eventsource.ErrUnsupportedFilter},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			if _, err := eventsource.ParseFilter(tt.pattern); !errors.Is(err, tt.want) {
				t.Fatalf("ParseFilter error %v, want %v", err, tt.want)
			}
		})
	}
}

func TestFilterMatch(t *testing.T) {
	rec := events.DynamoDBEventRecord{
		EventName: "INSERT",
		Change: events.DynamoDBStreamRecord{
			Keys: map[string]events.DynamoDBAttributeValue{"pk": events.NewStringAttribute("tokens#abc")},
			NewImage: map[string]events.DynamoDBAttributeValue{
				"pk":   events.NewStringAttribute("tokens#abc"),
				"type": events.NewStringAttribute("x"),
				"tags": events.NewStringSetAttribute([]string{"red", "blue"}),
				"flag": events.NewBooleanAttribute(true),
				"gone": events.NewNullAttribute(),
			},
		},
	}
	tests := []struct {
		pattern string
		want    bool
	}{
		{`{"eventName":["INSERT"]}`, true},
		{`{"eventName":["MODIFY","INSERT"]}`, true},
		{`{"eventName":["REMOVE"]}`, false},
		{`{"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"tokens#"}]}}}}`, true},
		{`{"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"sessions#"}]}}}}`, false},
		{`{"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"sessions#"},"tokens#abc"]}}}}`, true},
		{`{"dynamodb":{"NewImage":{"type":{"S":["x"]}}}}`, true},
		{`{"dynamodb":{"NewImage":{"type":{"S":["y"]}}}}`, false},
		{`{"dynamodb":{"OldImage":{"type":{"S":["x"]}}}}`, false}, // no OldImage on INSERT
		{`{"eventName":["INSERT"],"dynamodb":{"NewImage":{"type":{"S":["y"]}}}}`, false},
		{`{"dynamodb":{"NewImage":{"tags":{"SS":["blue"]}}}}`, true}, // any element of an array
		{`{"dynamodb":{"NewImage":{"flag":{"BOOL":[true]}}}}`, true},
		{`{"dynamodb":{"NewImage":{"gone":{"NULL":[true]}}}}`, true},
		{`{"dynamodb":{"NewImage":{"type":["x"]}}}`, false}, // leaf addresses an object
		{`{"dynamodb":{"NewImage":{"type":{"S":[{"anything-but":["y","z"]}]}}}}`, true},
		{`{"dynamodb":{"NewImage":{"type":{"S":[{"anything-but":["y","x"]}]}}}}`, false},
		{`{"dynamodb":{"NewImage":{"type":{"S":[{"anything-but":"x"}]}}}}`, false},
		{`{"dynamodb":{"NewImage":{"nope":{"S":[{"anything-but":["x"]}]}}}}`, false},    // absent field
		{`{"dynamodb":{"NewImage":{"flag":{"BOOL":[{"anything-but":["x"]}]}}}}`, false}, // not a string
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			f, err := eventsource.ParseFilter(tt.pattern)
			if err != nil {
				t.Fatalf("ParseFilter: %v", err)
			}
			if got := f.Match(rec); got != tt.want {
				t.Fatalf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}
