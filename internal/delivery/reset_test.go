package delivery

import (
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// TestWasReset: a token item's stream record closes the owner connection for a reset
// only when it carries a reset marker that is new (absent before, or another value).
func TestWasReset(t *testing.T) {
	t.Parallel()
	img := func(reset string) map[string]events.DynamoDBAttributeValue {
		m := map[string]events.DynamoDBAttributeValue{"pk": events.NewStringAttribute("tokens#a1")}
		if reset != "" {
			m[resetAttr] = events.NewStringAttribute(reset)
		}
		return m
	}
	cases := []struct {
		name     string
		old, new map[string]events.DynamoDBAttributeValue
		want     bool
	}{
		{"first reset", img(""), img("e1"), true},
		{"another reset", img("e1"), img("e2"), true},
		{"token rotated since a reset", img("e1"), img("e1"), false},
		{"no reset ever", img(""), img(""), false},
		{"token item removed (delete)", img("e1"), nil, false},
		{"marker not a string", img(""), map[string]events.DynamoDBAttributeValue{resetAttr: events.NewNumberAttribute("1")}, false},
	}
	for _, c := range cases {
		r := events.DynamoDBEventRecord{EventName: "MODIFY", Change: events.DynamoDBStreamRecord{OldImage: c.old, NewImage: c.new}}
		if got := wasReset(r); got != c.want {
			t.Errorf("%s: wasReset = %v, want %v", c.name, got, c.want)
		}
	}
}
