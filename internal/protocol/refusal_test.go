package protocol_test

import (
	"testing"

	"github.com/terret/terret-ws/internal/protocol"
)

func TestRefusal(t *testing.T) {
	want := map[protocol.Code]string{
		protocol.CodeUnauthorized: "missing, invalid or revoked token",
		protocol.CodeSuperseded:   "a newer connection took over this agent",
		protocol.CodeLagged:       "outbound queue overflowed: resubscribe from your last durable seq",
		protocol.CodeInternal:     "internal error: resubscribe from your last durable seq",
	}
	for _, code := range protocol.Codes() {
		f := protocol.Refusal(code)
		if f.Code != code || f.FrameType() != protocol.TypeError {
			t.Errorf("Refusal(%s) = %+v, want an error frame with code %s", code, f, code)
		}
		msg, closes := want[code]
		if closes != code.Closes() {
			t.Errorf("%s: a refusal text exists = %v, want %v (Code.Closes)", code, closes, code.Closes())
		}
		if !closes {
			msg = string(code)
		}
		if f.Message != msg {
			t.Errorf("Refusal(%s).Message = %q, want %q", code, f.Message, msg)
		}
	}
}
