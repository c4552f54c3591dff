package delivery

import (
	"errors"
	"testing"
)

// TestDecodeInput: each invocation decodes once into its kind's envelope; none, or two
// kinds at once, is ErrInput.
func TestDecodeInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, raw, kind string
		check           func(Input) bool
	}{
		{"stream", `{"Records":[{"eventName":"INSERT","dynamodb":{"SequenceNumber":"7"}}]}`, InputStream,
			func(in Input) bool { return len(in.Records) == 1 && in.Records[0].Change.SequenceNumber == "7" }},
		{"empty stream batch", `{"Records":[]}`, InputStream, func(in Input) bool { return len(in.Records) == 0 }},
		{"sweep", `{"sweep":"tokens"}`, InputSweep, func(in Input) bool { return in.Sweep == "tokens" }},
		{"kick", `{"kind":"drop","connection_id":"c1","code":"superseded","hello":true}`, InputKick,
			func(in Input) bool { return in.Kind == KickDrop && in.ConnectionID == "c1" && in.Hello }},
		{"nothing", `{}`, "", nil},
		{"two kinds", `{"sweep":"tokens","kind":"pump"}`, "", nil},
		{"not JSON", `[`, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, kind, err := DecodeInput([]byte(tc.raw))
			if tc.check == nil {
				if err == nil {
					t.Fatalf("decoded as %q, want an error", kind)
				}
				if tc.raw != "[" && !errors.Is(err, ErrInput) {
					t.Fatalf("error %v, want ErrInput", err)
				}
				return
			}
			if err != nil || kind != tc.kind || !tc.check(in) {
				t.Fatalf("kind %q, %+v, %v; want %q", kind, in, err, tc.kind)
			}
		})
	}
}
