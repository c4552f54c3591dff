package protocol

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"
	"unicode/utf8"
)

// FuzzParse checks that Parse never panics and that its results keep their
// contract: an accepted frame is non-nil, of a type in the closed set, and
// survives a Marshal/Parse round trip unchanged; a rejection is a nil frame
// with a *BadFrameError carrying a short, valid UTF-8 client message.
func FuzzParse(f *testing.F) {
	seeds := []string{
		`{"type":"subscribe","from_seq":0}`,
		`{"type":"inject","text":"hi","wake":true}`,
		`{"type":"cancel","reason":"stop"}`,
		`{"type":"approve","call_id":"c1"}`,
		`{"type":"deny","call_id":"c1","reason":null}`,
		`{"type":"set_model","role":"main","spec":"openai/gpt-4o"}`,
		`{"type":"set_policy","patterns":["echo","s*"]}`,
		`{"type":"subscribe","from_seq":1e400}`,
		`{"type":"inject","text":"\ud800","wake":"true"}`,
		`{"type":"type","type":"cancel"}`,
		`[`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		frame, err := Parse(data)
		if err != nil {
			if frame != nil {
				t.Fatalf("Parse(%q) returned frame %#v with error %v", data, frame, err)
			}
			var bfe *BadFrameError
			if !errors.As(err, &bfe) || !errors.Is(err, ErrBadFrame) {
				t.Fatalf("Parse(%q) error %v (%T) is not a bad frame error", data, err, err)
			}
			if bfe.Message == "" || !utf8.ValidString(bfe.Message) || len(bfe.Message) > 1024 {
				t.Fatalf("Parse(%q) gave unusable client message %q", data, bfe.Message)
			}
			return
		}
		if frame == nil {
			t.Fatalf("Parse(%q) = nil, nil", data)
		}
		if !slices.Contains(ClientTypes(), frame.FrameType()) {
			t.Fatalf("Parse(%q) returned frame type %q outside the closed set", data, frame.FrameType())
		}
		if len(data) > MaxFrameBytes {
			t.Fatalf("Parse accepted a %d-byte frame", len(data))
		}
		enc := Marshal(frame)
		// The encoding may legitimately grow past MaxFrameBytes (see
		// ClientFrame), so the round trip lifts the size bound.
		again, _, err := parse(enc, math.MaxInt)
		if err != nil {
			t.Fatalf("Parse(%q) = %#v, but re-parsing its encoding %q fails: %v", data, frame, enc, err)
		}
		if !reflect.DeepEqual(frame, again) {
			t.Fatalf("round trip changed the frame:\n input  %q\n parsed %#v\n wire   %s\n again  %#v", data, frame, enc, again)
		}
	})
}
