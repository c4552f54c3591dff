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
		name, raw string
		check     func(Input) bool
	}{
		{"stream", `{"Records":[{"eventName":"INSERT","dynamodb":{"SequenceNumber":"7"}}]}`,
			func(in Input) bool {
				s, ok := in.(StreamInput)
				return ok && len(s.Records) == 1 && s.Records[0].Change.SequenceNumber == "7"
			}},
		{"empty stream batch", `{"Records":[]}`, func(in Input) bool { s, ok := in.(StreamInput); return ok && len(s.Records) == 0 }},
		{"sweep", `{"sweep":"tokens"}`, func(in Input) bool { s, ok := in.(SweepInput); return ok && s.Sweep == "tokens" }},
		{"kick", `{"kind":"drop","connection_id":"c1","code":"superseded","hello":true}`,
			func(in Input) bool {
				k, ok := in.(KickInput)
				return ok && k.Kind == KickDrop && k.ConnectionID == "c1" && k.Hello
			}},
		{"nothing", `{}`, nil},
		{"two kinds", `{"sweep":"tokens","kind":"pump"}`, nil},
		{"not JSON", `[`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := DecodeInput([]byte(tc.raw))
			if tc.check == nil {
				if err == nil {
					t.Fatalf("decoded as %T, want an error", in)
				}
				if tc.raw != "[" && !errors.Is(err, ErrInput) {
					t.Fatalf("error %v, want ErrInput", err)
				}
				return
			}
			if err != nil || !tc.check(in) {
				t.Fatalf("%T %+v, %v; want the %s envelope", in, in, err, tc.name)
			}
		})
	}
}

// TestHandleInputRefusesASweep: the deliver core serves stream batches and kicks; a
// sweep is its caller's, and handing it one is ErrInput, not a silent no-op.
func TestHandleInputRefusesASweep(t *testing.T) {
	t.Parallel()
	d := newDeliverer(Config{}, &memLog{}, newMemRecords(), memSlots{}, &memSocket{}, nil)
	if _, err := d.HandleInput(t.Context(), SweepInput{Sweep: "tokens"}); !errors.Is(err, ErrInput) {
		t.Fatalf("HandleInput(sweep) = %v, want ErrInput", err)
	}
}
