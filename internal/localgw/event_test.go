package localgw

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// TestMessageEventMatchesEncodingJSON checks that the spliced event decodes to the same
// request as encoding/json's encoding of it, for bodies full of what JSON escapes, and
// that its size is what was allocated for it.
func TestMessageEventMatchesEncodingJSON(t *testing.T) {
	tests := map[string]string{
		"empty":           "",
		"plain":           `{"type":"subscribe","from_seq":0}`,
		"quotes":          `"\"\\` + "\\\"",
		"controls":        "\x00\x01\x1f\n\r\t\b\f",
		"html":            "<script>&</script>",
		"unicode":         "é漢字🙂",
		"separators":      "\u2028\u2029",
		"invalid UTF-8":   "a\xffb\xc3(c\xed\xa0\x80",
		"looks like mark": `"body":"\u0000"` + "\x00",
		"long controls":   strings.Repeat("\x01", 4096),
	}
	for name, body := range tests {
		t.Run(name, func(t *testing.T) {
			ev := events.APIGatewayWebsocketProxyRequest{
				RequestContext: events.APIGatewayWebsocketProxyRequestContext{RouteKey: "$default", ConnectionID: "c=+/", MessageID: `m"body":"x"`},
				Body:           bodyMark,
			}
			got, err := messageEvent(ev, body)
			if err != nil {
				t.Fatal(err)
			}
			if cap(got) != len(got) {
				t.Errorf("event is %d bytes in a buffer of %d: the size was not exact", len(got), cap(got))
			}
			ev.Body = body
			want, _ := json.Marshal(ev)
			var a, b events.APIGatewayWebsocketProxyRequest
			if err := json.Unmarshal(got, &a); err != nil {
				t.Fatalf("spliced event is not JSON: %v\n%s", err, got)
			}
			if err := json.Unmarshal(want, &b); err != nil {
				t.Fatal(err)
			}
			if a.Body != b.Body || a.RequestContext.MessageID != b.RequestContext.MessageID || a.RequestContext.ConnectionID != b.RequestContext.ConnectionID {
				t.Fatalf("decoded body %q, want %q (message id %q)", a.Body, b.Body, a.RequestContext.MessageID)
			}
		})
	}
}
