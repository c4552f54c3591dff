package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// goInternals are fragments that would betray Go internals in a client-facing
// message.
var goInternals = []string{"json:", "json.", "protocol.", "struct", "map[", "[]", "int64", "float64", "reflect", "Go value", "unmarshal"}

// assertBadFrame checks that err is a well-formed bad frame error whose
// client message contains want, and returns it.
func assertBadFrame(t *testing.T, input []byte, frame ClientFrame, err error, want string) *BadFrameError {
	t.Helper()
	if err == nil {
		t.Fatalf("Parse(%.80q) = %#v, nil; want error containing %q", input, frame, want)
	}
	if frame != nil {
		t.Errorf("Parse(%.80q) returned frame %#v along with error %v", input, frame, err)
	}
	if !errors.Is(err, ErrBadFrame) {
		t.Errorf("errors.Is(%v, ErrBadFrame) = false", err)
	}
	var bfe *BadFrameError
	if !errors.As(err, &bfe) {
		t.Fatalf("error %v (%T) is not a *BadFrameError", err, err)
	}
	if bfe.Error() != bfe.Message {
		t.Errorf("Error() = %q, Message = %q; want equal", bfe.Error(), bfe.Message)
	}
	if !strings.Contains(bfe.Message, want) {
		t.Errorf("Parse(%.80q) message = %q; want it to contain %q", input, bfe.Message, want)
	}
	for _, frag := range goInternals {
		if strings.Contains(bfe.Message, frag) {
			t.Errorf("message %q leaks Go internals (%q)", bfe.Message, frag)
		}
	}
	return bfe
}

// mustParse parses input and fails the test on error.
func mustParse(t *testing.T, input []byte) ClientFrame {
	t.Helper()
	f, err := Parse(input)
	if err != nil {
		t.Fatalf("Parse(%.120q) error: %v", input, err)
	}
	if f == nil {
		t.Fatalf("Parse(%.120q) = nil, nil", input)
	}
	return f
}

// assertRoundTrip checks that encoding f and parsing it again yields f. A
// SetPolicy with nil Patterns encodes as [] and so parses back as an empty,
// non-nil slice.
func assertRoundTrip(t *testing.T, f ClientFrame) {
	t.Helper()
	enc := Marshal(f)
	if p, ok := f.(SetPolicy); ok && p.Patterns == nil {
		f = SetPolicy{Patterns: []string{}}
	}
	g, err := Parse(enc)
	if err != nil {
		t.Fatalf("Parse(Marshal(%#v)) = %q: error %v", f, enc, err)
	}
	if !reflect.DeepEqual(f, g) {
		t.Fatalf("round trip mismatch:\n  frame  %#v\n  wire   %s\n  parsed %#v", f, enc, g)
	}
	if strings.Contains(string(enc), `"seq"`) {
		t.Errorf("encoded client frame %s carries a seq key", enc)
	}
}

func strs(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func policyJSON(t *testing.T, patterns any) string {
	t.Helper()
	b, err := json.Marshal(patterns)
	if err != nil {
		t.Fatal(err)
	}
	return `{"type":"set_policy","patterns":` + string(b) + `}`
}

func TestParseRejects(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct {
		name  string
		input string
		want  string
		field string // expected BadFrameError.Field, "-" to skip
		ftype string // expected BadFrameError.FrameType, "-" to skip
	}{
		// Not JSON.
		{"empty input", ``, "frame is not valid JSON", "", ""},
		{"whitespace only", "  \n", "frame is not valid JSON", "", ""},
		{"bare word", `hello`, "frame is not valid JSON: invalid character 'h' looking for beginning of value (after reading 1 byte)", "", ""},
		{"syntax error offset", `{"type":"cancel",}`, "(after reading 18 bytes)", "", ""},
		{"truncated object", `{"type":"cancel"`, "frame is not valid JSON", "", ""},
		{"trailing comma", `{"type":"cancel",}`, "frame is not valid JSON", "", ""},
		{"trailing data", `{"type":"cancel"} {}`, "frame is not valid JSON", "", ""},
		{"two objects", `{"type":"cancel"}{"type":"cancel"}`, "frame is not valid JSON", "", ""},
		{"single quotes", `{'type':'cancel'}`, "frame is not valid JSON", "", ""},
		{"invalid utf-8", "{\"type\":\"inject\",\"text\":\"\xff\",\"wake\":true}", "frame is not valid UTF-8", "", ""},
		// Not an object.
		{"array", `[{"type":"cancel"}]`, "frame is not a JSON object, got array", "", ""},
		{"empty array", `[]`, "frame is not a JSON object, got array", "", ""},
		{"string", `"cancel"`, "frame is not a JSON object, got string", "", ""},
		{"number", `42`, "frame is not a JSON object, got number", "", ""},
		{"null", `null`, "frame is not a JSON object, got null", "", ""},
		{"boolean", `true`, "frame is not a JSON object, got boolean", "", ""},
		// Type.
		{"empty object", `{}`, `frame has no "type" field`, "", ""},
		{"type missing", `{"from_seq":0}`, `frame has no "type" field`, "", ""},
		{"type wrong case key", `{"Type":"cancel"}`, `frame has no "type" field`, "", ""},
		{"type number", `{"type":1}`, `field "type" must be a string, got number`, "", ""},
		{"type null", `{"type":null}`, `field "type" must be a string, got null`, "", ""},
		{"type boolean", `{"type":true}`, `field "type" must be a string, got boolean`, "", ""},
		{"type array", `{"type":["cancel"]}`, `field "type" must be a string, got array`, "", ""},
		{"type object", `{"type":{}}`, `field "type" must be a string, got object`, "", ""},
		{"unknown type", `{"type":"foo"}`, `unknown frame type "foo"`, "", ""},
		{"empty type", `{"type":""}`, `unknown frame type ""`, "", ""},
		{"type wrong case", `{"type":"Subscribe","from_seq":0}`, `unknown frame type "Subscribe"`, "", ""},
		{"server type hello", `{"type":"hello"}`, `unknown frame type "hello"`, "", ""},
		{"server type error", `{"type":"error","code":"internal","message":"x"}`, `unknown frame type "error"`, "", ""},
		{"long unknown type truncated", `{"type":"` + long + `"}`, `unknown frame type "` + strings.Repeat("x", 64) + `…"`, "", ""},
		{"unknown type control chars quoted", `{"type":"a\nb"}`, `unknown frame type "a\nb"`, "", ""},
		// Duplicate fields.
		{"duplicate type", `{"type":"cancel","type":"cancel"}`, `frame has duplicate field "type"`, "", ""},
		{"duplicate field", `{"type":"inject","text":"a","wake":true,"wake":false}`, `frame has duplicate field "wake"`, "", ""},
		{"duplicate after unescaping", `{"type":"inject","text":"a","t\u0065xt":"b","wake":true}`, `frame has duplicate field "text"`, "", ""},
		{"duplicate unknown field", `{"type":"cancel","x":1,"x":2}`, `frame has duplicate field "x"`, "", ""},

		// subscribe.
		{"subscribe missing from_seq", `{"type":"subscribe"}`, `subscribe: field "from_seq" is required`, "from_seq", "subscribe"},
		{"subscribe from_seq wrong case", `{"type":"subscribe","From_seq":1}`, `subscribe: field "from_seq" is required`, "from_seq", "subscribe"},
		{"subscribe from_seq string", `{"type":"subscribe","from_seq":"1"}`, `subscribe: field "from_seq" must be an integer, got string`, "from_seq", "subscribe"},
		{"subscribe from_seq null", `{"type":"subscribe","from_seq":null}`, `subscribe: field "from_seq" must be an integer, got null`, "from_seq", "subscribe"},
		{"subscribe from_seq boolean", `{"type":"subscribe","from_seq":true}`, `subscribe: field "from_seq" must be an integer, got boolean`, "from_seq", "subscribe"},
		{"subscribe from_seq array", `{"type":"subscribe","from_seq":[1]}`, `subscribe: field "from_seq" must be an integer, got array`, "from_seq", "subscribe"},
		{"subscribe from_seq object", `{"type":"subscribe","from_seq":{}}`, `subscribe: field "from_seq" must be an integer, got object`, "from_seq", "subscribe"},
		{"subscribe from_seq float", `{"type":"subscribe","from_seq":1.5}`, `subscribe: field "from_seq" must be an integer`, "from_seq", "subscribe"},
		{"subscribe from_seq integral float", `{"type":"subscribe","from_seq":1.0}`, `subscribe: field "from_seq" must be an integer`, "from_seq", "subscribe"},
		{"subscribe from_seq exponent", `{"type":"subscribe","from_seq":1e2}`, `subscribe: field "from_seq" must be an integer`, "from_seq", "subscribe"},
		{"subscribe from_seq huge exponent", `{"type":"subscribe","from_seq":1e400}`, `subscribe: field "from_seq" must be an integer`, "from_seq", "subscribe"},
		{"subscribe from_seq negative", `{"type":"subscribe","from_seq":-1}`, `subscribe: field "from_seq" must not be negative`, "from_seq", "subscribe"},
		// expect_seq: an integer ≥ 0 where present.
		{"cancel expect_seq negative", `{"type":"cancel","expect_seq":-1}`, `cancel: field "expect_seq" must not be negative`, "expect_seq", "cancel"},
		{"inject expect_seq string", `{"type":"inject","text":"x","wake":true,"expect_seq":"3"}`, `inject: field "expect_seq" must be an integer, got string`, "expect_seq", "inject"},
		{"approve expect_seq fraction", `{"type":"approve","call_id":"c","expect_seq":1.5}`, `approve: field "expect_seq" must be an integer, got a fraction or exponent`, "expect_seq", "approve"},
		{"subscribe from_seq negative float", `{"type":"subscribe","from_seq":-0.5}`, `subscribe: field "from_seq" must be an integer`, "from_seq", "subscribe"},
		{"subscribe from_seq very negative", `{"type":"subscribe","from_seq":-9223372036854775809}`, `subscribe: field "from_seq" must not be negative`, "from_seq", "subscribe"},
		{"subscribe from_seq beyond int64", `{"type":"subscribe","from_seq":9223372036854775808}`, `subscribe: field "from_seq" is too large, at most 9223372036854775807 allowed`, "from_seq", "subscribe"},
		{"subscribe batch string", `{"type":"subscribe","from_seq":1,"batch":"true"}`, `subscribe: field "batch" must be a boolean, got string`, "batch", "subscribe"},
		{"subscribe batch number", `{"type":"subscribe","from_seq":1,"batch":1}`, `subscribe: field "batch" must be a boolean, got number`, "batch", "subscribe"},
		{"subscribe from_seq far beyond int64", `{"type":"subscribe","from_seq":123456789012345678901234567890}`, `subscribe: field "from_seq" is too large`, "from_seq", "subscribe"},

		// inject.
		{"inject missing text", `{"type":"inject","wake":true}`, `inject: field "text" is required`, "text", "inject"},
		{"inject missing wake", `{"type":"inject","text":"hi"}`, `inject: field "wake" is required`, "wake", "inject"},
		{"inject missing both", `{"type":"inject"}`, `inject: field "text" is required`, "text", "inject"},
		{"inject text number", `{"type":"inject","text":1,"wake":true}`, `inject: field "text" must be a string, got number`, "text", "inject"},
		{"inject text null", `{"type":"inject","text":null,"wake":true}`, `inject: field "text" must be a string, got null`, "text", "inject"},
		{"inject text array", `{"type":"inject","text":["hi"],"wake":true}`, `inject: field "text" must be a string, got array`, "text", "inject"},
		{"inject text object", `{"type":"inject","text":{"script":[]},"wake":true}`, `inject: field "text" must be a string, got object`, "text", "inject"},
		{"inject wake string", `{"type":"inject","text":"hi","wake":"true"}`, `inject: field "wake" must be a boolean, got string`, "wake", "inject"},
		{"inject wake number", `{"type":"inject","text":"hi","wake":1}`, `inject: field "wake" must be a boolean, got number`, "wake", "inject"},
		{"inject wake null", `{"type":"inject","text":"hi","wake":null}`, `inject: field "wake" must be a boolean, got null`, "wake", "inject"},
		{"inject wake array", `{"type":"inject","text":"hi","wake":[true]}`, `inject: field "wake" must be a boolean, got array`, "wake", "inject"},

		// cancel.
		{"cancel reason number", `{"type":"cancel","reason":1}`, `cancel: field "reason" must be a string, got number`, "reason", "cancel"},
		{"cancel reason boolean", `{"type":"cancel","reason":false}`, `cancel: field "reason" must be a string, got boolean`, "reason", "cancel"},
		{"cancel reason object", `{"type":"cancel","reason":{}}`, `cancel: field "reason" must be a string, got object`, "reason", "cancel"},
		{"cancel reason array", `{"type":"cancel","reason":["x"]}`, `cancel: field "reason" must be a string, got array`, "reason", "cancel"},

		// approve.
		{"approve missing call_id", `{"type":"approve"}`, `approve: field "call_id" is required`, "call_id", "approve"},
		{"approve call_id as id", `{"type":"approve","id":"c1"}`, `approve: field "call_id" is required`, "call_id", "approve"},
		{"approve call_id number", `{"type":"approve","call_id":7}`, `approve: field "call_id" must be a string, got number`, "call_id", "approve"},
		{"approve call_id null", `{"type":"approve","call_id":null}`, `approve: field "call_id" must be a string, got null`, "call_id", "approve"},
		{"approve call_id empty", `{"type":"approve","call_id":""}`, `approve: field "call_id" must not be empty`, "call_id", "approve"},

		// deny.
		{"deny missing call_id", `{"type":"deny","reason":"no"}`, `deny: field "call_id" is required`, "call_id", "deny"},
		{"deny call_id boolean", `{"type":"deny","call_id":true}`, `deny: field "call_id" must be a string, got boolean`, "call_id", "deny"},
		{"deny call_id empty", `{"type":"deny","call_id":""}`, `deny: field "call_id" must not be empty`, "call_id", "deny"},
		{"deny reason number", `{"type":"deny","call_id":"c1","reason":2}`, `deny: field "reason" must be a string, got number`, "reason", "deny"},
		{"deny reason array", `{"type":"deny","call_id":"c1","reason":[]}`, `deny: field "reason" must be a string, got array`, "reason", "deny"},

		// set_model.
		{"set_model missing role", `{"type":"set_model","spec":"scripted"}`, `set_model: field "role" is required`, "role", "set_model"},
		{"set_model missing spec", `{"type":"set_model","role":"main"}`, `set_model: field "spec" is required`, "spec", "set_model"},
		{"set_model role number", `{"type":"set_model","role":1,"spec":"scripted"}`, `set_model: field "role" must be a string, got number`, "role", "set_model"},
		{"set_model role null", `{"type":"set_model","role":null,"spec":"scripted"}`, `set_model: field "role" must be a string, got null`, "role", "set_model"},
		{"set_model role empty", `{"type":"set_model","role":"","spec":"scripted"}`, `set_model: field "role" must not be empty`, "role", "set_model"},
		{"set_model spec number", `{"type":"set_model","role":"main","spec":5}`, `set_model: field "spec" must be a string, got number`, "spec", "set_model"},
		{"set_model spec object", `{"type":"set_model","role":"main","spec":{"provider":"a","model":"b"}}`, `set_model: field "spec" must be a string, got object`, "spec", "set_model"},
		{"set_model spec null", `{"type":"set_model","role":"main","spec":null}`, `set_model: field "spec" must be a string, got null`, "spec", "set_model"},
		{"set_model spec empty", `{"type":"set_model","role":"main","spec":""}`, `set_model: field "spec" must not be empty`, "spec", "set_model"},
		{"set_model spec no slash", `{"type":"set_model","role":"main","spec":"openai"}`, `set_model: field "spec" must be "provider/model" or "scripted"`, "spec", "set_model"},
		{"set_model spec Scripted", `{"type":"set_model","role":"main","spec":"Scripted"}`, `set_model: field "spec" must be "provider/model" or "scripted"`, "spec", "set_model"},
		{"set_model spec no provider", `{"type":"set_model","role":"main","spec":"/x"}`, `set_model: field "spec" must be "provider/model" with a non-empty provider`, "spec", "set_model"},
		{"set_model spec no model", `{"type":"set_model","role":"main","spec":"x/"}`, `set_model: field "spec" must be "provider/model" with a non-empty model`, "spec", "set_model"},
		{"set_model spec only slash", `{"type":"set_model","role":"main","spec":"/"}`, `set_model: field "spec" must be "provider/model" with a non-empty provider`, "spec", "set_model"},
		{"set_model spec space in provider", `{"type":"set_model","role":"main","spec":"a b/c"}`, `set_model: field "spec" must not contain whitespace`, "spec", "set_model"},
		{"set_model spec space in model", `{"type":"set_model","role":"main","spec":"a/b c"}`, `set_model: field "spec" must not contain whitespace`, "spec", "set_model"},
		{"set_model spec tab", `{"type":"set_model","role":"main","spec":"a/\tb"}`, `set_model: field "spec" must not contain whitespace`, "spec", "set_model"},
		{"set_model spec padded scripted", `{"type":"set_model","role":"main","spec":" scripted"}`, `set_model: field "spec" must not contain whitespace`, "spec", "set_model"},
		{"set_model spec trailing newline", `{"type":"set_model","role":"main","spec":"a/b\n"}`, `set_model: field "spec" must not contain whitespace`, "spec", "set_model"},
		{"set_model spec nbsp", `{"type":"set_model","role":"main","spec":"a/b\u00a0c"}`, `set_model: field "spec" must not contain whitespace`, "spec", "set_model"},
		{"set_model spec control char", `{"type":"set_model","role":"main","spec":"a/b\u0000"}`, `set_model: field "spec" must not contain whitespace or control characters`, "spec", "set_model"},

		// set_policy.
		{"set_policy missing patterns", `{"type":"set_policy"}`, `set_policy: field "patterns" is required`, "patterns", "set_policy"},
		{"set_policy patterns string", `{"type":"set_policy","patterns":"echo"}`, `set_policy: field "patterns" must be an array of strings, got string`, "patterns", "set_policy"},
		{"set_policy patterns null", `{"type":"set_policy","patterns":null}`, `set_policy: field "patterns" must be an array of strings, got null`, "patterns", "set_policy"},
		{"set_policy patterns object", `{"type":"set_policy","patterns":{"0":"echo"}}`, `set_policy: field "patterns" must be an array of strings, got object`, "patterns", "set_policy"},
		{"set_policy patterns number", `{"type":"set_policy","patterns":3}`, `set_policy: field "patterns" must be an array of strings, got number`, "patterns", "set_policy"},
		{"set_policy pattern number", `{"type":"set_policy","patterns":[1]}`, `set_policy: pattern 0 must be a string, got number`, "patterns", "set_policy"},
		{"set_policy pattern null", `{"type":"set_policy","patterns":["echo",null]}`, `set_policy: pattern 1 must be a string, got null`, "patterns", "set_policy"},
		{"set_policy pattern array", `{"type":"set_policy","patterns":["a","b",["c"]]}`, `set_policy: pattern 2 must be a string, got array`, "patterns", "set_policy"},
		{"set_policy pattern object", `{"type":"set_policy","patterns":[ {} ]}`, `set_policy: pattern 0 must be a string, got object`, "patterns", "set_policy"},
		{"set_policy pattern boolean", `{"type":"set_policy","patterns":[true]}`, `set_policy: pattern 0 must be a string, got boolean`, "patterns", "set_policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse([]byte(tt.input))
			bfe := assertBadFrame(t, []byte(tt.input), f, err, tt.want)
			if tt.field != "-" && bfe.Field != tt.field {
				t.Errorf("Field = %q, want %q", bfe.Field, tt.field)
			}
			if tt.ftype != "-" && bfe.FrameType != tt.ftype {
				t.Errorf("FrameType = %q, want %q", bfe.FrameType, tt.ftype)
			}
		})
	}
}

func TestParseRejectsPolicyBounds(t *testing.T) {
	tests := []struct {
		name     string
		patterns any
		want     string
	}{
		{"129 patterns", strs(MaxPolicyPatterns+1, "echo"), "set_policy: 129 patterns, at most 128 allowed"},
		{"1000 patterns", strs(1000, "a"), "set_policy: 1000 patterns, at most 128 allowed"},
		{"129 non-string patterns counted first", make([]int, 129), "set_policy: 129 patterns, at most 128 allowed"},
		{"257-character pattern", []string{strings.Repeat("a", 257)}, "set_policy: pattern 0 is 257 characters, at most 256 allowed"},
		{"257-character pattern at index 3", []string{"a", "b", "c", strings.Repeat("*", 257), "d"}, "set_policy: pattern 3 is 257 characters, at most 256 allowed"},
		{"257 two-byte characters", []string{strings.Repeat("é", 257)}, "set_policy: pattern 0 is 257 characters, at most 256 allowed"},
		{"257 four-byte characters", []string{strings.Repeat("😀", 257)}, "set_policy: pattern 0 is 257 characters, at most 256 allowed"},
		{"very long pattern", []string{strings.Repeat("x", 100000)}, "set_policy: pattern 0 is 100000 characters, at most 256 allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(policyJSON(t, tt.patterns))
			f, err := Parse(in)
			bfe := assertBadFrame(t, in, f, err, tt.want)
			if bfe.FrameType != TypeSetPolicy || bfe.Field != "patterns" {
				t.Errorf("FrameType, Field = %q, %q; want set_policy, patterns", bfe.FrameType, bfe.Field)
			}
		})
	}
}

// injectOfSize returns a valid inject frame of exactly n bytes (n ≥ 40).
func injectOfSize(t *testing.T, n int) []byte {
	t.Helper()
	head, tail := `{"type":"inject","wake":true,"text":"`, `"}`
	pad := n - len(head) - len(tail)
	if pad < 0 {
		t.Fatalf("injectOfSize(%d): too small", n)
	}
	b := []byte(head + strings.Repeat("a", pad) + tail)
	if len(b) != n {
		t.Fatalf("injectOfSize(%d) built %d bytes", n, len(b))
	}
	return b
}

func TestParseSizeBound(t *testing.T) {
	t.Run("exactly 1 MiB accepted", func(t *testing.T) {
		in := injectOfSize(t, MaxFrameBytes)
		f := mustParse(t, in)
		inj, ok := f.(Inject)
		if !ok {
			t.Fatalf("got %T, want Inject", f)
		}
		if want := MaxFrameBytes - len(`{"type":"inject","wake":true,"text":""}`); len(inj.Text) != want || !inj.Wake {
			t.Errorf("text length %d wake %v; want %d true", len(inj.Text), inj.Wake, want)
		}
	})
	t.Run("1 MiB + 1 rejected", func(t *testing.T) {
		in := injectOfSize(t, MaxFrameBytes+1)
		f, err := Parse(in)
		assertBadFrame(t, in[:80], f, err, "frame is 1048577 bytes, at most 1048576 allowed")
	})
	t.Run("size checked before parsing", func(t *testing.T) {
		// Neither valid JSON nor valid UTF-8: only the size check can name it.
		in := []byte(strings.Repeat("\xff", MaxFrameBytes+10))
		f, err := Parse(in)
		assertBadFrame(t, in[:80], f, err, "frame is 1048586 bytes, at most 1048576 allowed")
	})
	t.Run("oversized whitespace-padded frame rejected", func(t *testing.T) {
		in := []byte(`{"type":"cancel"}` + strings.Repeat(" ", MaxFrameBytes))
		f, err := Parse(in)
		assertBadFrame(t, in[:80], f, err, fmt.Sprintf("frame is %d bytes, at most 1048576 allowed", len(in)))
	})
}

func TestParseAccepts(t *testing.T) {
	long256 := strings.Repeat("a", MaxPatternChars)
	e256 := strings.Repeat("é", MaxPatternChars)
	tests := []struct {
		name  string
		input string
		want  ClientFrame
	}{
		// subscribe.
		{"subscribe 0", `{"type":"subscribe","from_seq":0}`, Subscribe{FromSeq: 0}},
		{"subscribe 42", `{"type":"subscribe","from_seq":42}`, Subscribe{FromSeq: 42}},
		{"subscribe max int64", `{"type":"subscribe","from_seq":9223372036854775807}`, Subscribe{FromSeq: 1<<63 - 1}},
		{"subscribe negative zero", `{"type":"subscribe","from_seq":-0}`, Subscribe{FromSeq: 0}},
		{"subscribe whitespace", " \t\r\n{ \"from_seq\" : 7 ,\n \"type\" : \"subscribe\" }\n", Subscribe{FromSeq: 7}},
		{"subscribe batch", `{"type":"subscribe","from_seq":4,"batch":true}`, Subscribe{FromSeq: 4, Batch: true}},
		{"subscribe batch false", `{"type":"subscribe","from_seq":4,"batch":false}`, Subscribe{FromSeq: 4}},
		{"subscribe batch null", `{"type":"subscribe","from_seq":4,"batch":null}`, Subscribe{FromSeq: 4}},
		{"subscribe unknown fields ignored", `{"type":"subscribe","from_seq":3,"x":{"y":[1,2,{"z":null}],"y":1},"Type":"inject","future":true}`, Subscribe{FromSeq: 3}},
		// expect_seq.
		{"inject expect_seq", `{"type":"inject","text":"t","wake":false,"expect_seq":12}`, Inject{Text: "t", ExpectSeq: seqPtr(12)}},
		{"cancel expect_seq 0", `{"type":"cancel","expect_seq":0}`, Cancel{ExpectSeq: seqPtr(0)}},
		{"cancel expect_seq null", `{"type":"cancel","expect_seq":null}`, Cancel{}},
		{"approve expect_seq", `{"type":"approve","call_id":"c","expect_seq":3}`, Approve{CallID: "c", ExpectSeq: seqPtr(3)}},
		{"deny expect_seq", `{"type":"deny","call_id":"c","expect_seq":3}`, Deny{CallID: "c", ExpectSeq: seqPtr(3)}},
		{"set_policy expect_seq", `{"type":"set_policy","patterns":[],"expect_seq":9}`, SetPolicy{Patterns: []string{}, ExpectSeq: seqPtr(9)}},
		// inject.
		{"inject wake", `{"type":"inject","text":"what is the weather?","wake":true}`, Inject{Text: "what is the weather?", Wake: true}},
		{"inject steer", `{"type":"inject","text":"use celsius","wake":false}`, Inject{Text: "use celsius", Wake: false}},
		{"inject empty text", `{"type":"inject","text":"","wake":true}`, Inject{Text: "", Wake: true}},
		{"inject escapes", `{"type":"inject","text":"a\"b\\c\n\u00e9\ud83d\ude00\u2028<&>","wake":true}`, Inject{Text: "a\"b\\c\né😀\u2028<&>", Wake: true}},
		{"inject script text", `{"type":"inject","text":"{\"script\":[{\"say\":\"hi\"}]}","wake":true}`, Inject{Text: `{"script":[{"say":"hi"}]}`, Wake: true}},
		{"inject extra field", `{"type":"inject","text":"hi","wake":true,"priority":9}`, Inject{Text: "hi", Wake: true}},
		// cancel.
		{"cancel bare", `{"type":"cancel"}`, Cancel{}},
		{"cancel reason", `{"type":"cancel","reason":"user pressed stop"}`, Cancel{Reason: "user pressed stop"}},
		{"cancel reason null", `{"type":"cancel","reason":null}`, Cancel{}},
		{"cancel reason empty", `{"type":"cancel","reason":""}`, Cancel{}},
		// approve.
		{"approve", `{"type":"approve","call_id":"call_123"}`, Approve{CallID: "call_123"}},
		{"approve ignores reason", `{"type":"approve","call_id":"c","reason":5}`, Approve{CallID: "c"}},
		// deny.
		{"deny bare", `{"type":"deny","call_id":"call_123"}`, Deny{CallID: "call_123"}},
		{"deny reason", `{"type":"deny","call_id":"call_123","reason":"too risky"}`, Deny{CallID: "call_123", Reason: "too risky"}},
		{"deny reason null", `{"type":"deny","call_id":"c","reason":null}`, Deny{CallID: "c"}},
		// set_model.
		{"set_model scripted", `{"type":"set_model","role":"main","spec":"scripted"}`, SetModel{Role: "main", Spec: "scripted"}},
		{"set_model provider/model", `{"type":"set_model","role":"titler","spec":"openai/gpt-4o-mini"}`, SetModel{Role: "titler", Spec: "openai/gpt-4o-mini"}},
		{"set_model nested model", `{"type":"set_model","role":"main","spec":"openrouter/meta-llama/llama-3.1-8b"}`, SetModel{Role: "main", Spec: "openrouter/meta-llama/llama-3.1-8b"}},
		{"set_model version chars", `{"type":"set_model","role":"main","spec":"anthropic/claude-3-5-sonnet@20241022:beta"}`, SetModel{Role: "main", Spec: "anthropic/claude-3-5-sonnet@20241022:beta"}},
		{"set_model scripted provider", `{"type":"set_model","role":"main","spec":"scripted/x"}`, SetModel{Role: "main", Spec: "scripted/x"}},
		// set_policy.
		{"set_policy empty", `{"type":"set_policy","patterns":[]}`, SetPolicy{Patterns: []string{}}},
		{"set_policy globs", `{"type":"set_policy","patterns":["echo","sleep*","guarded_?cho","[ab]*"]}`, SetPolicy{Patterns: []string{"echo", "sleep*", "guarded_?cho", "[ab]*"}}},
		{"set_policy empty and duplicate patterns", `{"type":"set_policy","patterns":["", "x", "x"]}`, SetPolicy{Patterns: []string{"", "x", "x"}}},
		{"set_policy 128 patterns", policyJSON(t, strs(MaxPolicyPatterns, "p*")), SetPolicy{Patterns: strs(MaxPolicyPatterns, "p*")}},
		{"set_policy 256-character pattern", policyJSON(t, []string{long256}), SetPolicy{Patterns: []string{long256}}},
		{"set_policy 256 é", policyJSON(t, []string{e256}), SetPolicy{Patterns: []string{e256}}},
		{"set_policy 256 escaped é", `{"type":"set_policy","patterns":["` + strings.Repeat(`\u00e9`, MaxPatternChars) + `"]}`, SetPolicy{Patterns: []string{e256}}},
		{"set_policy 128 of 256 characters", policyJSON(t, strs(MaxPolicyPatterns, e256)), SetPolicy{Patterns: strs(MaxPolicyPatterns, e256)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := mustParse(t, []byte(tt.input))
			if !reflect.DeepEqual(f, tt.want) {
				t.Fatalf("Parse(%.120q)\n got  %#v\n want %#v", tt.input, f, tt.want)
			}
			if f.FrameType() != tt.want.FrameType() {
				t.Errorf("FrameType() = %q, want %q", f.FrameType(), tt.want.FrameType())
			}
			assertRoundTrip(t, f)
		})
	}
}

func TestParsePolicyPatternsNeverNil(t *testing.T) {
	f := mustParse(t, []byte(`{"type":"set_policy","patterns":[]}`))
	p, ok := f.(SetPolicy)
	if !ok || p.Patterns == nil {
		t.Fatalf("got %#v; want SetPolicy with a non-nil empty slice", f)
	}
}

func TestParseDoesNotRetainInput(t *testing.T) {
	in := []byte(`{"type":"set_policy","patterns":["abc"]}`)
	f := mustParse(t, in)
	for i := range in {
		in[i] = 'z'
	}
	if p := f.(SetPolicy); p.Patterns[0] != "abc" {
		t.Fatalf("pattern changed with input: %q", p.Patterns[0])
	}
}

func TestParseDeterministicMessages(t *testing.T) {
	in := []byte(`{"type":"inject","text":"hi","wake":"yes"}`)
	_, err1 := Parse(in)
	_, err2 := Parse(in)
	if err1 == nil || err2 == nil || err1.Error() != err2.Error() {
		t.Fatalf("errors differ or missing: %v / %v", err1, err2)
	}
}

func TestClientFrameTypes(t *testing.T) {
	frames := []ClientFrame{Subscribe{}, Inject{}, Cancel{}, Approve{}, Deny{}, SetModel{}, SetPolicy{}}
	types := ClientTypes()
	if len(types) != len(frames) {
		t.Fatalf("ClientTypes() has %d entries, want %d", len(types), len(frames))
	}
	want := []string{"subscribe", "inject", "cancel", "approve", "deny", "set_model", "set_policy"}
	for i, f := range frames {
		if f.FrameType() != want[i] || types[i] != want[i] {
			t.Errorf("frame %d: FrameType %q, ClientTypes %q; want %q", i, f.FrameType(), types[i], want[i])
		}
	}
}

func TestClientFrameMarshal(t *testing.T) {
	tests := []struct {
		frame ClientFrame
		want  string
	}{
		{Subscribe{FromSeq: 5}, `{"type":"subscribe","from_seq":5}`},
		{Subscribe{FromSeq: 5, Batch: true}, `{"type":"subscribe","from_seq":5,"batch":true}`},
		{Inject{Text: "hi", Wake: true}, `{"type":"inject","text":"hi","wake":true}`},
		{Inject{}, `{"type":"inject","text":"","wake":false}`},
		{Cancel{}, `{"type":"cancel"}`},
		{Cancel{Reason: "stop"}, `{"type":"cancel","reason":"stop"}`},
		{Approve{CallID: "c1"}, `{"type":"approve","call_id":"c1"}`},
		{Deny{CallID: "c1"}, `{"type":"deny","call_id":"c1"}`},
		{Deny{CallID: "c1", Reason: "no"}, `{"type":"deny","call_id":"c1","reason":"no"}`},
		{SetModel{Role: "main", Spec: "scripted"}, `{"type":"set_model","role":"main","spec":"scripted"}`},
		{SetPolicy{}, `{"type":"set_policy","patterns":[]}`},
		{SetPolicy{Patterns: []string{"a*"}}, `{"type":"set_policy","patterns":["a*"]}`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := string(Marshal(tt.frame)); got != tt.want {
				t.Errorf("Marshal(%#v) = %s, want %s", tt.frame, got, tt.want)
			}
			b, err := json.Marshal(tt.frame)
			if err != nil || string(b) != tt.want {
				t.Errorf("json.Marshal(%#v) = %s, %v; want %s", tt.frame, b, err, tt.want)
			}
			assertRoundTrip(t, tt.frame)
		})
	}
}

func TestValidModelSpec(t *testing.T) {
	tests := []struct {
		spec string
		want bool
	}{
		{"scripted", true},
		{"openai/gpt-4o", true},
		{"a/b", true},
		{"openrouter/meta/llama", true},
		{"a/b/", true}, // model "b/" is non-empty
		{"", false},
		{"openai", false},
		{"Scripted", false},
		{"scripted ", false},
		{"/x", false},
		{"x/", false},
		{"/", false},
		{"//", false},
		{"a b/c", false},
		{"a/b c", false},
		{"a/b\tc", false},
		{"a/b\u2003", false},
		{"a/b\x7f", false},
	}
	for _, tt := range tests {
		if got := ValidModelSpec(tt.spec); got != tt.want {
			t.Errorf("ValidModelSpec(%q) = %v, want %v", tt.spec, got, tt.want)
		}
	}
}

func TestBadFrameError(t *testing.T) {
	_, err := Parse([]byte(`{"type":"inject","text":"hi","wake":"true"}`))
	var bfe *BadFrameError
	if !errors.As(err, &bfe) {
		t.Fatalf("error %v is not a *BadFrameError", err)
	}
	if got, want := bfe.Error(), `inject: field "wake" must be a boolean, got string`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if bfe.Unwrap() != ErrBadFrame {
		t.Errorf("Unwrap() = %v, want ErrBadFrame", bfe.Unwrap())
	}
	wrapped := fmt.Errorf("connection c1: %w", err)
	if !errors.Is(wrapped, ErrBadFrame) {
		t.Errorf("wrapped error does not match ErrBadFrame")
	}
	if got, want := string(Marshal(bfe.Frame())), `{"type":"error","code":"bad_frame","message":"inject: field \"wake\" must be a boolean, got string"}`; got != want {
		t.Errorf("Frame() encodes as %s, want %s", got, want)
	}
	if ErrBadFrame.Error() != "protocol: bad frame" {
		t.Errorf("ErrBadFrame = %q", ErrBadFrame.Error())
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"ééééé", 2, "éé…"},
	}
	for _, tt := range tests {
		if got := truncate(tt.s, tt.n); got != tt.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
		if !utf8.ValidString(truncate(tt.s, tt.n)) {
			t.Errorf("truncate(%q, %d) is not valid UTF-8", tt.s, tt.n)
		}
	}
}

func TestReencodingMayExceedBound(t *testing.T) {
	// A 1 MiB inject full of '<' is valid; its encoding is longer (\u003c),
	// which is why the size bound applies to received frames only.
	head, tail := `{"type":"inject","wake":false,"text":"`, `"}`
	in := []byte(head + strings.Repeat("<", MaxFrameBytes-len(head)-len(tail)) + tail)
	f := mustParse(t, in)
	enc := Marshal(f)
	if len(enc) <= MaxFrameBytes {
		t.Fatalf("encoding is %d bytes; expected it to grow past the bound", len(enc))
	}
	if _, err := Parse(enc); err == nil {
		t.Fatalf("Parse accepted a %d-byte frame", len(enc))
	}
	g, _, err := parse(enc, len(enc))
	if err != nil || !reflect.DeepEqual(f, g) {
		t.Fatalf("unbounded re-parse = %v, %v", err, reflect.DeepEqual(f, g))
	}
}

// TestParseSurrogateEscapes: a \u escape of a lone UTF-16 surrogate is no character;
// encoding/json would turn it into U+FFFD, so the frame is bad_frame and nothing of
// it is applied. Pairs, and text that only looks like an escape, parse.
func TestParseSurrogateEscapes(t *testing.T) {
	for _, tc := range []struct {
		name, pattern string // the JSON text of set_policy's one pattern, quotes included
		want          string // the decoded pattern, "" for bad_frame
	}{
		{"lone high", `"a\ud800b"`, ""},
		{"lone low", `"\udc00"`, ""},
		{"high then a non-low escape", `"\ud800\u0041"`, ""},
		{"high at the end", `"\uD83D"`, ""},
		{"reversed pair", `"\ude00\ud83d"`, ""},
		{"pair", `"\ud83d\ude00"`, "\U0001F600"},
		{"upper-case pair", `"\uD83D\uDE00!"`, "\U0001F600!"},
		{"escaped backslash before u", `"\\ud800"`, `\ud800`},
		{"escaped quote then escape", `"\"\u00e9"`, `"é`},
		{"plain escape", `"\u00e9"`, "é"},
	} {
		f, err := Parse([]byte(`{"type":"set_policy","patterns":[` + tc.pattern + `]}`))
		if tc.want == "" {
			var bf *BadFrameError
			if !errors.As(err, &bf) || !strings.Contains(bf.Message, "not valid UTF-8: \\u escape of a lone surrogate") {
				t.Errorf("%s: %v, %v; want bad_frame", tc.name, f, err)
			}
			continue
		}
		if sp, ok := f.(SetPolicy); err != nil || !ok || len(sp.Patterns) != 1 || sp.Patterns[0] != tc.want {
			t.Errorf("%s: %#v, %v; want pattern %q", tc.name, f, err, tc.want)
		}
	}
}

func seqPtr(n int64) *int64 { return &n }
