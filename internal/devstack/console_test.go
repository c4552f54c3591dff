package devstack

import (
	"reflect"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// TestConsoleFrameAttrs: the console line of a client frame names its type and what
// it does, never an inject's text; a frame the server refuses names the problem in the
// words of the bad_frame reply (a JSON object without "type" is not "not JSON").
func TestConsoleFrameAttrs(t *testing.T) {
	c := &console{}
	c.agents.Store("c1", "demo")
	for _, tc := range []struct {
		name, body string
		want       []any
	}{
		{"subscribe", `{"type":"subscribe","from_seq":3}`, []any{"type", "subscribe", "from_seq", int64(3)}},
		{"inject", `{"type":"inject","text":"secret words","wake":true}`, []any{"type", "inject", "chars", 12, "wake", true}},
		{"a script without its frame", `{"script":[{"say":"x"}]}`, []any{"type", "(bad frame)", "bad_frame", `frame has no "type" field`, "bytes", 24}},
		{"not JSON", `hello`, []any{"type", "(bad frame)", "bad_frame", "frame is not valid JSON: invalid character 'h' looking for beginning of value (after reading 1 byte)", "bytes", 5}},
		{"type not a string", `{"type":7}`, []any{"type", "(bad frame)", "bad_frame", `field "type" must be a string, got number`, "bytes", 10}},
		{"a field missing", `{"type":"inject","wake":true}`, []any{"type", "inject", "bad_frame", `inject: field "text" is required`, "chars", 0, "wake", true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := events.APIGatewayWebsocketProxyRequest{Body: tc.body}
			req.RequestContext.ConnectionID = "c1"
			got := c.frameAttrs(req)
			want := append([]any{"agent_id", "demo", "connection_id", "c1"}, tc.want...)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("attrs %#v\nwant  %#v", got, want)
			}
		})
	}
}
