package devstack_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/tools"
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

// TestRuntimeApprovalExpires: with a tool entry's approval.expires_in, a request no one
// answers is resolved denied, reason expired, by the stack's timer — no frame, no
// polling client — and the turn goes on; the client sees it all over its socket.
func TestRuntimeApprovalExpires(t *testing.T) {
	t.Parallel()
	prof := tools.DefaultProfile()
	for i := range prof.Tools {
		if prof.Tools[i].Name == "guarded_echo" {
			prof.Tools[i].Approval = &tools.Approval{ExpiresIn: "2s"}
		}
	}
	raw, err := json.Marshal(prof)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "profile.json")
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	e := startRuntimeStack(t, devstack.Options{Approvals: true, Profile: file})
	runFlows(t, e, flow{"expires", func(a *agentConn) {
		script := `{"script":[{"call":[{"tool":"guarded_echo","args":{"text":"wait"}}]},{"say":"went on"}]}`
		a.inject(script, true)
		id := a.startTurn(script)
		evs := a.follow(id, callW("guarded_echo", `{"text":"wait"}`), requestedW("guarded_echo", `{"text":"wait"}`))
		if req := evs[len(evs)-1]; req.str("expires_at") == "" {
			a.fatalf("approval/requested %s has no expires_at", req)
		}
		call := a.calls[0]
		a.follow(id, resolvedW("denied", "expired"), errorW("denied: expired"), answerW("went on", 2), endW("completed", ""))
		a.titled()
		a.refused("stale_call", approveFrame(call)) // the expiry won: a verdict now is stale
	}})
}
