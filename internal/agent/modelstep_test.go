package agent

import (
	"testing"

	"github.com/terret/terret-ws/internal/model"
)

// TestStepEnding: a refusal rejects the turn with the model's text, or its stop reason
// when it gave none; an answer with neither text nor tool calls leaves it empty;
// anything else goes on.
func TestStepEnding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		resp         model.Response
		refused      bool
		hasText      bool
		calls        int
		status, want string
	}{
		{"refused with a reason", model.Response{Text: "  no, thanks \n", StopReason: "refusal"}, true, true, 0, StatusRejected, "no, thanks"},
		{"refused without one", model.Response{StopReason: "refusal"}, true, false, 0, StatusRejected, "model refused (refusal)"},
		{"empty", model.Response{StopReason: model.StopEndTurn}, false, false, 0, StatusEmpty, ""},
		{"text", model.Response{Text: "hi"}, false, true, 0, "", ""},
		{"tool calls", model.Response{}, false, false, 2, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, reason := stepEnding(tc.resp, tc.refused, tc.hasText, tc.calls)
			if status != tc.status || reason != tc.want {
				t.Errorf("stepEnding: %q %q, want %q %q", status, reason, tc.status, tc.want)
			}
		})
	}
}
