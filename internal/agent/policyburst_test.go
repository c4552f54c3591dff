package agent_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/protocol"
)

// TestPolicyBurstBounded: a burst of set_policy frames of the largest size, handled at
// once in a random order, logs about as many policy/updated as there are frames
// that found no later-sent one received — a few, never half of them — not one or more
// per frame: a
// frame sent before one already received appends nothing. The policy sent last is the
// last logged.
func TestPolicyBurstBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{})
	const frames = 64
	pattern := strings.Repeat("p", protocol.MaxPatternChars-8)
	errs := make([]error, frames)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, i := range rand.Perm(frames) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			patterns := make([]string, protocol.MaxPolicyPatterns)
			for j := range patterns {
				patterns[j] = fmt.Sprintf("%s%d-%d", pattern, i, j)
			}
			<-start
			errs[i] = e.svc.SetPolicy(stamped(e.ctx, int64(1000+i)), e.agentID, patterns)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("set_policy %d: %v", i, err)
		}
	}
	evs := ofType(e.events(), agent.TypePolicyUpdated)
	var bytes int
	for _, ev := range evs {
		bytes += len(ev.Payload)
	}
	t.Logf("%d set_policy frames of %d patterns: %d policy/updated, %d bytes", frames, protocol.MaxPolicyPatterns, len(evs), bytes)
	if len(evs) > frames/2 {
		t.Fatalf("%d set_policy frames logged %d policy/updated (%d bytes); want at most %d", frames, len(evs), bytes, frames/2)
	}
	if got := policyString(t, evs[len(evs)-1]); !strings.HasSuffix(got, fmt.Sprintf("@%d", 1000+frames-1)) {
		t.Fatalf("last policy/updated is stamped %s; want the one sent last", got[strings.LastIndex(got, "@"):])
	}
}
