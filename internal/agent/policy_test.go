package agent_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// holds is a pause hook that holds the first arrival at each of its points until the
// test lets it go; later arrivals pass.
type holds struct {
	mu      sync.Mutex
	reached map[string]chan struct{}
	release map[string]chan struct{}
}

func newHolds(points ...string) *holds {
	h := &holds{reached: map[string]chan struct{}{}, release: map[string]chan struct{}{}}
	for _, p := range points {
		if p != "" {
			h.reached[p], h.release[p] = make(chan struct{}), make(chan struct{})
		}
	}
	return h
}

func (h *holds) pause(point, _ string) {
	h.mu.Lock()
	reached, ok := h.reached[point]
	first := false
	if ok {
		select {
		case <-reached:
		default:
			close(reached)
			first = true
		}
	}
	h.mu.Unlock()
	if first {
		<-h.release[point]
	}
}

// await waits until point's first arrival is held there.
func (h *holds) await(t *testing.T, point string) {
	t.Helper()
	select {
	case <-h.reached[point]:
	case <-time.After(hang()):
		t.Fatalf("nothing reached %s", point)
	}
}

func (h *holds) letGo(point string) { close(h.release[point]) }

// stamped is ctx serving a frame received at ms.
func stamped(ctx context.Context, ms int64) context.Context {
	return protocol.WithStamp(ctx, protocol.Stamp{At: ms})
}

// policies are the log's policy/updated as "patterns@ms", in seq order.
func (e *env) policies() []string {
	e.t.Helper()
	var out []string
	for _, ev := range ofType(e.events(), agent.TypePolicyUpdated) {
		out = append(out, policyString(e.t, ev))
	}
	return out
}

func policyString(t *testing.T, ev sessionlog.Event) string {
	t.Helper()
	ms, _, _ := strings.Cut(ev.Stamp, "-")
	return strings.Join(strs(payload(ev)["patterns"]), ",") + "@" + strings.TrimLeft(ms, "0")
}

func strs(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

// TestPolicyRace: two set_policy handled at once, x sent 1 ms before y, in each order
// their steps can interleave. The last policy/updated logged is y's once both returned,
// y's policy is never silently dropped, and x's, handled after y was received, logs
// nothing.
func TestPolicyRace(t *testing.T) {
	t.Parallel()
	const x, y = 1, 2
	names := testTables(t)
	for _, tc := range []struct {
		name  string
		first int    // the handler started first, held at point
		point string // where
		want  []string
	}{
		// y logged first; x, sent earlier, finds y's received and logs nothing.
		{"y logged, then x", y, agent.PausePolicyLogged, []string{"y@2"}},
		// x read no claim; y logs and claims; x logs after y: its claim finds y's,
		// earlier in the log but sent later, and repeats y's policy after its own.
		{"x read, y logged and claimed, x logs", x, agent.PausePolicyRead, []string{"y@2", "x@1", "y@2"}},
		// x logged first; y logs and claims; x's claim finds y's later in both: done.
		{"x logged, y logged and claimed, x claims", x, agent.PausePolicyLogged, []string{"x@1", "y@2"}},
		// y logged and claimed before x looked: x logs nothing.
		{"y done, then x", y, "", []string{"y@2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHolds(tc.point) // holds the first handler there; nobody else
			e := newEnv(t, opts{pause: h.pause, names: names})
			set := func(which int) error {
				return e.svc.SetPolicy(stamped(e.ctx, int64(which)), e.agentID, []string{map[int]string{x: "x", y: "y"}[which]})
			}
			other := map[int]int{x: y, y: x}[tc.first]
			if tc.point == "" {
				if err := set(tc.first); err != nil {
					t.Fatal(err)
				}
				if err := set(other); err != nil {
					t.Fatal(err)
				}
			} else {
				done := make(chan error, 1)
				go func() { done <- set(tc.first) }()
				h.await(t, tc.point)
				err := set(other)
				h.letGo(tc.point)
				if ferr := <-done; err != nil || ferr != nil {
					t.Fatalf("set_policy: %v, %v", ferr, err)
				}
			}
			if got := e.policies(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("policies logged %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPolicyCrashRepeatedByRunner: a set_policy killed between its append and its
// claim, its policy/updated followed by that of one sent before it, leaves a stale
// tail. The runner repeats the policy in force before the next run of tools, so the
// tool call runs under it and the last policy/updated before its result is that one.
func TestPolicyCrashRepeatedByRunner(t *testing.T) {
	t.Parallel()
	hook, crashed := crashOnce(agent.CrashPolicyLogged)
	h := newHolds(agent.PausePolicyRead) // holds the set_policy sent first, received first
	e := newEnv(t, opts{crash: hook, pause: h.pause})
	first := make(chan error, 1)
	go func() { first <- e.svc.SetPolicy(stamped(e.ctx, 1), e.agentID, []string{"nothing"}) }()
	h.await(t, agent.PausePolicyRead)
	if err := e.svc.SetPolicy(stamped(e.ctx, 2), e.agentID, []string{"echo"}); !errors.Is(err, agent.ErrCrashed) {
		t.Fatalf("set_policy sent second: %v, want the crash", err)
	}
	<-crashed
	h.letGo(agent.PausePolicyRead)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if got, want := e.policies(), []string{"echo@2", "nothing@1"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("policies logged %v, want %v", got, want)
	}
	e.inject(script(`{"call":[{"tool":"echo","args":{"text":"a"}}]}`, `{"say":"ok"}`), true)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	res := ofType(evs, agent.TypeToolResult)
	if len(res) != 1 || payload(res[0])["result"] == nil {
		t.Fatalf("echo ran under %q, want allowed by the policy sent last:\n%s", "nothing", dump(evs))
	}
	var before string
	for _, ev := range evs {
		if ev.Seq > res[0].Seq {
			break
		}
		if ev.Type == agent.TypePolicyUpdated {
			before = policyString(t, ev)
		}
	}
	if before != "echo@2" {
		t.Errorf("last policy/updated before the tool result %q, want the one in force, echo@2:\n%s", before, dump(evs))
	}
}

// TestPolicyConcurrent: rounds of set_policy handled at once, each sent a millisecond
// after the one before, started in a random order. Every round ends with the policy
// sent last as the last policy/updated logged. With handlers killed at random between
// an append and its claim, no handler that returned has its policy dropped without a
// later-sent one logged, and a round in which nobody died still ends with the policy
// sent last.
func TestPolicyConcurrent(t *testing.T) {
	t.Parallel()
	names := testTables(t)
	for _, crashy := range []bool{false, true} {
		t.Run(fmt.Sprintf("crashes=%v", crashy), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			rng := rand.New(rand.NewPCG(1, 2))
			died := 0
			e := newEnv(t, opts{names: names, crash: func(point string) bool {
				if !crashy || point != agent.CrashPolicyLogged && point != agent.CrashPolicyRepeated {
					return false
				}
				mu.Lock()
				defer mu.Unlock()
				if rng.IntN(4) == 0 {
					died++
					return true
				}
				return false
			}})
			const rounds, frames = 15, 4
			next := int64(0)
			for r := range rounds {
				base := int64((r + 1) * 100)
				mu.Lock()
				died = 0
				mu.Unlock()
				errs := make([]error, frames)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for _, i := range rand.Perm(frames) {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						errs[i] = e.svc.SetPolicy(stamped(e.ctx, base+int64(i)), e.agentID, []string{fmt.Sprintf("p%d", base+int64(i))})
					}()
				}
				close(start)
				wg.Wait()
				evs, err := e.log.Read(e.ctx, e.agentID, next, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				logged := map[int64]bool{}
				for _, ev := range evs {
					next = ev.Seq + 1
					if ev.Type != agent.TypePolicyUpdated {
						continue
					}
					s := policyString(t, ev)
					pat, ms, _ := strings.Cut(s, "@")
					if pat != "p"+ms {
						t.Fatalf("round %d: %s carries another frame's stamp", r, s)
					}
					var n int64
					fmt.Sscan(ms, &n)
					logged[n] = true
					got = append(got, s)
				}
				mu.Lock()
				nobodyDied := died == 0
				mu.Unlock()
				for i, err := range errs {
					switch {
					case errors.Is(err, agent.ErrCrashed):
					case err != nil:
						t.Fatalf("round %d: frame %d: %v", r, i, err)
					default:
						covered := false
						for j := i; j < frames; j++ {
							covered = covered || logged[base+int64(j)]
						}
						if !covered {
							t.Errorf("round %d: frame %d returned with neither its policy nor a later one logged: %v", r, i, got)
						}
					}
				}
				last := fmt.Sprintf("p%d@%d", base+frames-1, base+frames-1)
				if nobodyDied && (len(got) == 0 || got[len(got)-1] != last) {
					t.Errorf("round %d: policies logged %v, want %s last", r, got, last)
				}
			}
		})
	}
}
