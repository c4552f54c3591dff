package protocol

import (
	"encoding/json"
	"testing"
)

func TestServerFramesMarshal(t *testing.T) {
	tests := []struct {
		name  string
		frame ServerFrame
		want  string
	}{
		{"hello", NewHello("s1", 41, ""), `{"type":"hello","proto":1,"session_id":"s1","last_seq":41}`},
		{"hello with epoch", NewHello("s1", 41, "e1"), `{"type":"hello","proto":1,"session_id":"s1","last_seq":41,"epoch":"e1"}`},
		{"hello fresh session", NewHello("agent-7", 0, ""), `{"type":"hello","proto":1,"session_id":"agent-7","last_seq":0}`},
		{"hello zero value still canonical", Hello{}, `{"type":"hello","proto":1,"session_id":"","last_seq":0}`},
		{"hello wrong type and proto overridden", Hello{Type: "x", Proto: 2, SessionID: "s", LastSeq: 3}, `{"type":"hello","proto":1,"session_id":"s","last_seq":3}`},
		{"hello escapes", NewHello("a\"b", 1, ""), `{"type":"hello","proto":1,"session_id":"a\"b","last_seq":1}`},
		{"replay_truncated", NewReplayTruncated(0, 5001), `{"type":"replay_truncated","requested_from_seq":0,"from_seq":5001}`},
		{"replay_truncated zero value", ReplayTruncated{}, `{"type":"replay_truncated","requested_from_seq":0,"from_seq":0}`},
		{"error", NewError(CodeBadFrame, `unknown frame type "foo"`), `{"type":"error","code":"bad_frame","message":"unknown frame type \"foo\""}`},
		{"error empty message kept", NewError(CodeInternal, ""), `{"type":"error","code":"internal","message":""}`},
		{"error zero value", Error{}, `{"type":"error","code":"","message":""}`},
		{"error unauthorized", NewError(CodeUnauthorized, "bad token"), `{"type":"error","code":"unauthorized","message":"bad token"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Marshal(tt.frame)
			if string(got) != tt.want {
				t.Errorf("Marshal = %s\n want     %s", got, tt.want)
			}
			viaJSON, err := json.Marshal(tt.frame)
			if err != nil || string(viaJSON) != tt.want {
				t.Errorf("json.Marshal = %s, %v; want %s", viaJSON, err, tt.want)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(got, &m); err != nil {
				t.Fatalf("output is not a JSON object: %v", err)
			}
			if _, ok := m["seq"]; ok {
				t.Errorf("protocol frame %s carries a seq key", got)
			}
			var typ string
			if err := json.Unmarshal(m["type"], &typ); err != nil || typ != tt.frame.FrameType() {
				t.Errorf("type = %s, want %q", m["type"], tt.frame.FrameType())
			}
		})
	}
}

func TestServerFrameConstructors(t *testing.T) {
	if got, want := NewHello("s1", 41, "e"), (Hello{Type: "hello", Proto: 1, SessionID: "s1", LastSeq: 41, Epoch: "e"}); got != want {
		t.Errorf("NewHello = %#v, want %#v", got, want)
	}
	if got, want := NewReplayTruncated(3, 9), (ReplayTruncated{Type: "replay_truncated", RequestedFromSeq: 3, FromSeq: 9}); got != want {
		t.Errorf("NewReplayTruncated = %#v, want %#v", got, want)
	}
	if got, want := NewError(CodeLagged, "slow"), (Error{Type: "error", Code: "lagged", Message: "slow"}); got != want {
		t.Errorf("NewError = %#v, want %#v", got, want)
	}
	if ProtoVersion != 1 {
		t.Errorf("ProtoVersion = %d, want 1", ProtoVersion)
	}
}

func TestServerFramesDecode(t *testing.T) {
	// Clients (and tests) decode server frames with plain encoding/json.
	var h Hello
	if err := json.Unmarshal([]byte(`{"type":"hello","proto":1,"session_id":"s1","last_seq":41}`), &h); err != nil {
		t.Fatal(err)
	}
	if h != NewHello("s1", 41, "") {
		t.Errorf("decoded hello %#v", h)
	}
	var e Error
	if err := json.Unmarshal(Marshal(NewError(CodeStaleCall, "no such call")), &e); err != nil {
		t.Fatal(err)
	}
	if e != NewError(CodeStaleCall, "no such call") {
		t.Errorf("decoded error %#v", e)
	}
}

func TestMarshalNil(t *testing.T) {
	if got := Marshal(nil); got != nil {
		t.Errorf("Marshal(nil) = %q, want nil", got)
	}
}

func TestCodes(t *testing.T) {
	tests := []struct {
		code   Code
		wire   string
		closes bool
	}{
		{CodeUnauthorized, "unauthorized", true},
		{CodeSuperseded, "superseded", true},
		{CodeLagged, "lagged", true},
		{CodeBadFrame, "bad_frame", false},
		{CodeNotRunning, "not_running", false},
		{CodeStaleCall, "stale_call", false},
		{CodeUnsupported, "unsupported", false},
		{CodeInternal, "internal", true},
		{CodeStale, "stale", false},
	}
	all := Codes()
	if len(all) != len(tests) {
		t.Fatalf("Codes() has %d codes, want %d", len(all), len(tests))
	}
	for i, tt := range tests {
		if string(tt.code) != tt.wire {
			t.Errorf("code %q, want wire value %q", tt.code, tt.wire)
		}
		if all[i] != tt.code {
			t.Errorf("Codes()[%d] = %q, want %q", i, all[i], tt.code)
		}
		if got := tt.code.Closes(); got != tt.closes {
			t.Errorf("%q.Closes() = %v, want %v", tt.code, got, tt.closes)
		}
		if !tt.code.Valid() {
			t.Errorf("%q.Valid() = false", tt.code)
		}
	}
	for _, c := range []Code{"", "nope", "Unauthorized", "bad-frame"} {
		if c.Closes() || c.Valid() {
			t.Errorf("%q: Closes %v Valid %v; want false false", c, c.Closes(), c.Valid())
		}
	}
}
