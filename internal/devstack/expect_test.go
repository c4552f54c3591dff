package devstack_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/devstack"
)

// TestRuntimeExpectSeq: expect_seq over the socket. A frame whose precondition fails is
// answered stale, naming the conflicting seq, appends nothing and leaves the socket
// open; one above the tip is bad_frame; a wake accepted under expect_seq that a turn
// end overtakes before the runner drains it is dropped by the runner, which answers
// stale on this socket.
func TestRuntimeExpectSeq(t *testing.T) {
	t.Parallel()
	e := startRuntimeStack(t, devstack.Options{Approvals: true})
	runFlows(t, e, flow{"expect_seq", func(a *agentConn) {
		idle := a.next - 1
		script := `{"script":[{"call":[{"tool":"guarded_echo","args":{"text":"held"}}]},{"say":"never said"}]}`
		a.inject(script, true)
		id := a.startTurn(script)
		start := a.next - 1
		a.follow(id, callW("guarded_echo", `{"text":"held"}`), requestedW("guarded_echo", `{"text":"held"}`))
		req, call := a.next-1, a.calls[0]
		a.refused("bad_frame", fmt.Sprintf(`{"type":"approve","call_id":%q,"expect_seq":%d}`, call, req+100))
		a.refused("stale",
			fmt.Sprintf(`{"type":"approve","call_id":%q,"expect_seq":%d}`, call, req-1),
			fmt.Sprintf(`{"type":"cancel","expect_seq":%d}`, idle),
			fmt.Sprintf(`{"type":"inject","text":"late","wake":false,"expect_seq":%d}`, idle))
		// The message names the conflicting seq.
		a.send(fmt.Sprintf(`{"type":"cancel","expect_seq":%d}`, idle))
		if f := a.frame(hang()); f.Type != "error" || f.Code != "stale" || !strings.Contains(f.Msg, fmt.Sprintf("seq %d", start)) {
			a.fatalf("answer %s, want stale naming the turn/start at seq %d", f, start)
		}

		// A wake that saw the parked turn is queued; a cancel then ends that turn, and the
		// runner drops the wake instead of starting a turn with it.
		a.send(fmt.Sprintf(`{"type":"inject","text":"after the turn I saw","wake":true,"expect_seq":%d}`, req))
		a.send(`{"type":"cancel","reason":"stop"}`)
		var stale string
		var end int64
		titled := false
		for end == 0 || stale == "" || !titled {
			f := a.frame(hang())
			if f.Seq == nil {
				if f.Type != "error" || f.Code != "stale" || stale != "" {
					a.fatalf("frame %s, want one stale answer", f)
				}
				stale = f.Msg
				continue
			}
			ev := a.event(f)
			titled = titled || ev.Type == "session/titled"
			if ev.Type == "turn/end" {
				if ev.str("status") != "cancelled" {
					a.fatalf("turn/end %s, want cancelled", ev)
				}
				end = ev.Seq
			}
		}
		if !strings.Contains(stale, fmt.Sprintf("turn/end at seq %d", end)) {
			a.fatalf("stale answer %q does not name the turn/end at seq %d", stale, end)
		}
		// The socket is open and the agent idle: the dropped wake started nothing.
		a.send(fmt.Sprintf(`{"type":"cancel","expect_seq":%d}`, a.next-1))
		if f := a.frame(hang()); f.Type != "error" || f.Code != "not_running" {
			a.fatalf("answer %s, want not_running", f)
		}
		a.matchLog()
	}})
}
