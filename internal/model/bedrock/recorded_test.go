package bedrock_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// The recorded ConverseStream response bodies under testdata/ are generated from the
// scenarios below with the SDK's event-stream encoder, framed exactly as Bedrock frames
// them (:event-type / :content-type / :message-type headers, JSON payloads with
// Bedrock's field names, including its "p" padding field). Regenerate them with
//
//	go test ./internal/model/bedrock/ -run TestRecordedStreams -update
//
// TestRecordedStreams fails when a committed file differs from its scenario.
var update = flag.Bool("update", false, "rewrite testdata/*.eventstream from the scenarios")

// frame is one event-stream message of a recorded response.
type frame struct {
	exception bool   // an exception message instead of an event
	typ       string // :event-type or :exception-type
	payload   string // JSON
}

func event(typ, payload string) frame     { return frame{typ: typ, payload: payload} }
func exception(typ, payload string) frame { return frame{exception: true, typ: typ, payload: payload} }

// scenarios are the recorded streams, by file name (without extension).
var scenarios = map[string][]frame{
	// Text streamed in three deltas, then stop and usage.
	"text": {
		event("messageStart", `{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXY","role":"assistant"}`),
		event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Hel"},"p":"abcdefghijklmn"}`),
		event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"lo, "},"p":"abcdefghijklmnopqrstu"}`),
		event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"world"},"p":"abcd"}`),
		event("contentBlockStop", `{"contentBlockIndex":0,"p":"abcdefghijklmnopqrstuvwxyzABCDEF"}`),
		event("messageStop", `{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN","stopReason":"end_turn"}`),
		event("metadata", `{"metrics":{"latencyMs":321},"p":"abcdefghij","usage":{"inputTokens":12,"outputTokens":5,"totalTokens":17}}`),
	},
	// A text block, then two tool uses: the first with its input split across three
	// deltas, the second with an empty input.
	"tool_use": {
		event("messageStart", `{"p":"abcdefghijklmnopqrstuvwxyz","role":"assistant"}`),
		event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Let me look that up."},"p":"abcdefghijklmnopqrstuvwxyzABCDEFGH"}`),
		event("contentBlockStop", `{"contentBlockIndex":0,"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ"}`),
		event("contentBlockStart", `{"contentBlockIndex":1,"p":"abcdefghijklmnopqrstuv","start":{"toolUse":{"name":"lookup","toolUseId":"tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"}}}`),
		event("contentBlockDelta", `{"contentBlockIndex":1,"delta":{"toolUse":{"input":""}},"p":"abcdefghijklmnopqrstuvwxyzABCDE"}`),
		event("contentBlockDelta", `{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"id\": 4"}},"p":"abcdefghijklmnopqrstuvwxy"}`),
		event("contentBlockDelta", `{"contentBlockIndex":1,"delta":{"toolUse":{"input":"2, \"verb"}},"p":"abcdefghijklmnopqrst"}`),
		event("contentBlockDelta", `{"contentBlockIndex":1,"delta":{"toolUse":{"input":"ose\": true}"}},"p":"abcdefghijklmn"}`),
		event("contentBlockStop", `{"contentBlockIndex":1,"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU"}`),
		event("contentBlockStart", `{"contentBlockIndex":2,"p":"abcdefghijklmnop","start":{"toolUse":{"name":"clock","toolUseId":"tooluse_Qm9XcRT1SvKj0bC3aDl2Ew"}}}`),
		event("contentBlockDelta", `{"contentBlockIndex":2,"delta":{"toolUse":{"input":""}},"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"}`),
		event("contentBlockStop", `{"contentBlockIndex":2,"p":"abcdefghijklmnopqrstuvwxyzABCDEFG"}`),
		event("messageStop", `{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0","stopReason":"tool_use"}`),
		event("metadata", `{"metrics":{"latencyMs":1234},"p":"abcdefghijklmnopqrstu","usage":{"inputTokens":431,"outputTokens":88,"totalTokens":519}}`),
	},
	// Bedrock throttles mid-stream: an exception message after the first delta.
	"throttling": {
		event("messageStart", `{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXY","role":"assistant"}`),
		event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"partial"},"p":"abcdefghijklmn"}`),
		exception("throttlingException", `{"message":"Too many tokens, please wait before trying again."}`),
	},
	// The model fails mid-stream.
	"model_stream_error": {
		event("messageStart", `{"p":"abcdefghijklmnopqrstuvwxyz","role":"assistant"}`),
		exception("modelStreamErrorException", `{"message":"Model stream processing failed.","originalMessage":"upstream reset","originalStatusCode":500}`),
	},
	// A stream that ends cleanly at a frame boundary but before messageStop.
	"truncated": {
		event("messageStart", `{"p":"abcdefghijklmnopqrstuvwxyz","role":"assistant"}`),
		event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Hel"},"p":"abcdefghijklmn"}`),
	},
	// A guardrail stops the answer.
	"guardrail": {
		event("messageStart", `{"p":"abcdefghijklmnopqrstuvwxyz","role":"assistant"}`),
		event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Sorry, the model cannot answer this question."},"p":"abcdefghijklmn"}`),
		event("contentBlockStop", `{"contentBlockIndex":0,"p":"abcdefghijklmnopqrstuvwxyzABCDEFG"}`),
		event("messageStop", `{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN","stopReason":"guardrail_intervened"}`),
		event("metadata", `{"metrics":{"latencyMs":210},"p":"abcdefghij","usage":{"inputTokens":31,"outputTokens":0,"totalTokens":31}}`),
	},
	// A tool use whose assembled input is not a JSON object.
	"bad_tool_input": {
		event("messageStart", `{"p":"abcdefghijklmnopqrstuvwxyz","role":"assistant"}`),
		event("contentBlockStart", `{"contentBlockIndex":0,"p":"abcdefghijklmnopqrstuv","start":{"toolUse":{"name":"lookup","toolUseId":"tooluse_bad"}}}`),
		event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"toolUse":{"input":"{\"id\": "}},"p":"abcdefghijklmnopqrstuvwxy"}`),
		event("contentBlockStop", `{"contentBlockIndex":0,"p":"abcdefghijklmnopqrstuvwxyzABCDEFG"}`),
		event("messageStop", `{"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN","stopReason":"tool_use"}`),
		event("metadata", `{"metrics":{"latencyMs":97},"p":"abcdefghij","usage":{"inputTokens":20,"outputTokens":9,"totalTokens":29}}`),
	},
}

// encodeStream frames a scenario as an application/vnd.amazon.eventstream body.
func encodeStream(t *testing.T, frames []frame) []byte {
	t.Helper()
	enc := eventstream.NewEncoder()
	var buf bytes.Buffer
	for _, f := range frames {
		var msg eventstream.Message
		if f.exception {
			msg.Headers.Set(":exception-type", eventstream.StringValue(f.typ))
			msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
			msg.Headers.Set(":message-type", eventstream.StringValue("exception"))
		} else {
			msg.Headers.Set(":event-type", eventstream.StringValue(f.typ))
			msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
			msg.Headers.Set(":message-type", eventstream.StringValue("event"))
		}
		msg.Payload = []byte(f.payload)
		if err := enc.Encode(&buf, msg); err != nil {
			t.Fatalf("encode %s: %v", f.typ, err)
		}
	}
	return buf.Bytes()
}

// recorded returns the committed recording of a scenario.
func recorded(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".eventstream"))
	if err != nil {
		t.Fatalf("read recording: %v", err)
	}
	return b
}

func TestRecordedStreams(t *testing.T) {
	for name, frames := range scenarios {
		got := encodeStream(t, frames)
		path := filepath.Join("testdata", name+".eventstream")
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (regenerate with -update)", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from its scenario (regenerate with -update)", path)
		}
	}
}
