package delivery

import (
	"fmt"
	"time"
)

// The timing chain of the fast path (docs/architecture.md, "Fast path" and "The looks
// before the mark"), written once as code:
//
//		chunk interval  <  linger (lingerFor)  <  the backstop's looks (lookSpan)
//
//	  - a streamed answer's chunks (the runtime flushes one every chunk interval) must
//	    come within the linger, so that a turn's events go out under one lease, each
//	    chunk posted right after its append with no lease write of its own;
//	  - a lingering sender must let go within a backstop's looks before it marks
//	    (watchLooks), so that a stream batch meeting a sender that lingers over the
//	    batch's events sees the cursor past them, and writes no mark and starts no
//	    watcher.
//
// CheckTiming checks the chain for chunk, the runtime's chunk interval
// (agent.DefaultChunkInterval; delivery does not import the runtime, so the check runs
// where both are: internal/service/agentservice, TestTimingChain).
func CheckTiming(chunk time.Duration) error {
	look := lookSpan()
	if !(chunk < lingerFor && lingerFor < look) {
		return fmt.Errorf("delivery: timing chain broken: chunk interval %v < linger %v < backstop looks %v does not hold", chunk, lingerFor, look)
	}
	return nil
}

// Linger is how long a fast-path sender keeps its lease for the appender's next event.
func Linger() time.Duration { return lingerFor }

// lookSpan is how long a backstop wake-up looks at a live holder behind its events
// before it starts a watcher: the sum of watchLooks (50 + 100 + 200 ms).
func lookSpan() time.Duration {
	var d time.Duration
	for _, p := range watchLooks {
		d += p
	}
	return d
}
