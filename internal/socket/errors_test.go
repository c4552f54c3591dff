package socket

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

func TestCodeFor(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("agent: inject a1: %w", err) }
	tests := []struct {
		name     string
		err      error
		wantCode protocol.Code
		wantMsg  string
	}{
		{"bad frame", &protocol.BadFrameError{FrameType: "inject", Field: "text", Message: "inject: field \"text\" is too long"},
			protocol.CodeBadFrame, "inject: field \"text\" is too long"},
		{"bad frame wrapped", wrap(&protocol.BadFrameError{Message: "m"}), protocol.CodeBadFrame, "m"},
		{"bad model spec", wrap(agent.ErrBadSpec), protocol.CodeBadFrame, "set_model: invalid role or model spec"},
		{"event too large", wrap(sessionlog.ErrTooLarge), protocol.CodeBadFrame, "frame content is too large for one event"},
		{"inbox full", wrap(&agent.InboxFullError{Items: 32, Bytes: 70000}), protocol.CodeBadFrame,
			"inject: the agent's inbox is full (32 injects of 70000 bytes wait; at most 32 injects, 262144 bytes): this inject is not queued; send it again once the agent's turn has drained the inbox"},
		{"no turn running", wrap(agent.ErrNotRunning), protocol.CodeNotRunning, "no turn is running"},
		{"expect_seq stale", wrap(&control.StaleError{Frame: "cancel", Expect: 7, Seq: 9, Type: "turn/end"}), protocol.CodeStale,
			"cancel: expect_seq 7 is stale: turn/end at seq 9 came after it; nothing was applied"},
		{"expect_seq above the tip", wrap(&control.AheadError{Frame: "approve", Expect: 12, Tip: 10}), protocol.CodeBadFrame,
			`approve: field "expect_seq" is 12, above the log's newest seq 10`},
		{"stale call", wrap(agent.ErrStaleCall), protocol.CodeStaleCall, "no standing approval request for that call_id"},
		{"approvals not mounted", wrap(agent.ErrUnsupported), protocol.CodeUnsupported,
			"approvals are not mounted: run terret dev with --approvals, or deploy with Approvals=true"},
		{"runtime not mounted", ErrUnsupported, protocol.CodeUnsupported, "this deployment does not mount the plugin this frame needs"},
		{"not the owner", wrap(connections.ErrNotOwner), protocol.CodeSuperseded, "a newer connection took over this agent"},
		{"anything else", errors.New("dynamodb: throttled on table secret-name"), protocol.CodeInternal, "internal error"},
		{"anything else wrapped", wrap(errors.New("boom")), protocol.CodeInternal, "internal error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := codeFor(tc.err)
			if code != tc.wantCode || msg != tc.wantMsg {
				t.Errorf("codeFor(%v) = %s %q, want %s %q", tc.err, code, msg, tc.wantCode, tc.wantMsg)
			}
		})
	}
}

func TestRefusalFor(t *testing.T) {
	tests := []struct {
		state connections.State
		want  protocol.Code
	}{
		{connections.StateSuperseded, protocol.CodeSuperseded},
		{connections.StateUnauthorized, protocol.CodeUnauthorized},
		{connections.StateLagged, protocol.CodeUnauthorized},
		{connections.State("unknown"), protocol.CodeUnauthorized},
	}
	for _, tc := range tests {
		if got := refusalFor(tc.state); got != tc.want {
			t.Errorf("refusalFor(%q) = %s, want %s", tc.state, got, tc.want)
		}
		if !tc.want.Closes() {
			t.Errorf("refusalFor(%q) = %s, a code that does not close the connection", tc.state, tc.want)
		}
	}
}

func TestTurnPace(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		last  time.Duration
		ahead int64
		want  time.Duration
	}{
		{2 * ms, 1, 4 * ms},
		{16 * ms, 1, 32 * ms},
		{32 * ms, 1, 32 * ms},   // the frame just before: every 32 ms, as always
		{32 * ms, 0, 32 * ms},   // predecessor done meanwhile: not reached (the loop returns)
		{32 * ms, 5, 64 * ms},   // doubling
		{128 * ms, 5, 160 * ms}, // 32 ms per frame ahead
		{512 * ms, 50, time.Second},
		{time.Second, 50, time.Second},
	}
	for _, tc := range tests {
		if got := turnPace(tc.last, tc.ahead); got != tc.want {
			t.Errorf("turnPace(%v, %d) = %v, want %v", tc.last, tc.ahead, got, tc.want)
		}
	}
}
