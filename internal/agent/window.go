package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/terret/terret-ws/internal/schedule"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// logWindow is an agent's log from some seq on, as one caller holds it, kept current as
// events are read and appended. The open turn's progress is folded in event by event,
// so a step reads the turn here instead of scanning the log again. The runner holds it
// from its checkpoint (begin, checkpoint.go) — never from seq 0 once a checkpoint is
// written; a verdict holds it from the recorded turn's first seq.
type logWindow struct {
	log     Log
	agentID string
	epoch   string // the epoch of the log the window reads (seq 0's id); "": not known yet
	// fence is the runner's lease as its appends need it (activeRun.fence); nil for a
	// window that never appends (a verdict's).
	fence  func(context.Context) (sessionlog.Fence, error)
	evs    []sessionlog.Event
	start  int64            // seq of the first event the window reads
	last   int64            // seq of the newest event held, or the seq before the window
	begun  bool             // start is fixed (newWindow, or begin)
	logged map[string]int64 // inbox ids the window holds as user/message or context/injected, with their seq
	fired  map[string]bool  // inbox ids the window holds as schedule/fired
	turn   *turnView        // the open turn; nil when there is none

	base fold // the fold of the events below start (the checkpoint's)
	fold fold // the fold of every event up to last
	// first is the session's first user/message text once the window holds or read it
	// (firstSeen; see firstMessage).
	first     string
	firstSeen bool
	compacted *compaction // the newest context/compacted; nil: none in the window

	// The history below start (histfold.go), as the checkpoint's fold items hold it.
	hist    []sessionlog.Event   // the folded events from the floor's item to start, ascending
	weights map[int64]foldWeight // their shares of the budget, by seq
	pieces  []pieceMeta          // the fold items held: read, or written by this invocation
	floor   int64                // the checkpoint's floor at begin: the first seq the history needs
	foldTo  int64                // fold items cover the log below it (start, then each checkpoint written)
}

// fold is what the runner keeps of the past beyond the open turn: the policy in
// force, the newest policy/updated, and whether the session is titled. It is the
// checkpoint's content (checkpoint.go).
type fold struct {
	policy     *policyMark // the policy/updated in force; nil: none
	policyLast int64       // seq of the newest policy/updated; 0: none
	titled     bool
	firstSeq   int64 // seq of the first user/message; 0: none
}

// policyMark is one policy/updated: enough to apply it and to repeat it.
type policyMark struct {
	seq      int64
	stamp    string
	patterns []string
}

// compaction is a logged context/compacted.
type compaction struct {
	seq int64
	contextCompacted
}

// turnView is the open turn: the seq of its turn/start and its progress so far.
type turnView struct {
	seq int64
	*progress
}

func newWindow(log Log, agentID string, from int64) *logWindow {
	return &logWindow{log: log, agentID: agentID, start: from, last: from - 1, begun: true, logged: map[string]int64{}, fired: map[string]bool{}}
}

// add takes in the event after the newest one held (older ones are skipped).
func (w *logWindow) add(ev sessionlog.Event) {
	if ev.Seq <= w.last {
		return
	}
	w.evs = append(w.evs, ev)
	w.last = ev.Seq
	if ev.Epoch != "" {
		w.epoch = ev.Epoch
	}
	w.fold.add(ev)
	switch ev.Type {
	case TypeUserMessage:
		m := decode[userMessage](ev)
		if m.InboxID != "" {
			w.logged[m.InboxID] = ev.Seq
		}
		if w.fold.firstSeq == ev.Seq {
			w.first, w.firstSeen = m.Text, true
		}
	case TypeContextInjected:
		if id := decode[contextInjected](ev).InboxID; id != "" {
			w.logged[id] = ev.Seq
		}
	case schedule.TypeFired:
		if id := decode[scheduleFired](ev).InboxID; id != "" {
			w.fired[id] = true
		}
	case TypeContextCompacted:
		w.compacted = &compaction{seq: ev.Seq, contextCompacted: decode[contextCompacted](ev)}
	case TypeTurnStart:
		w.turn = &turnView{seq: ev.Seq, progress: newProgress(ev)}
		return
	case TypeTurnEnd:
		w.turn = nil
		return
	}
	if w.turn != nil {
		w.turn.add(ev)
	}
}

// add folds one event in: a policy/updated takes over unless it is stamped below the
// one in force (policy.go, "The policy in force").
func (f *fold) add(ev sessionlog.Event) {
	switch ev.Type {
	case TypePolicyUpdated:
		f.policyLast = ev.Seq
		if f.policy == nil || ev.Stamp == "" || ev.Stamp >= f.policy.stamp {
			p := decode[policyUpdated](ev).Patterns
			if p == nil {
				p = []string{}
			}
			f.policy = &policyMark{seq: ev.Seq, stamp: ev.Stamp, patterns: p}
		}
	case TypeSessionTitled:
		f.titled = true
	case TypeUserMessage:
		if f.firstSeq == 0 {
			f.firstSeq = ev.Seq
		}
	}
}

// isLogged reports whether the window holds inbox id id as logged.
func (w *logWindow) isLogged(id string) bool {
	_, ok := w.logged[id]
	return ok
}

// stale reports that the newest policy/updated is not the one in force.
func (f fold) stale() bool {
	return f.policy != nil && f.policyLast != f.policy.seq
}

// refresh reads the events appended since the newest one held.
func (w *logWindow) refresh(ctx context.Context) error {
	evs, err := w.log.Read(ctx, w.agentID, w.last+1, maxRead)
	if err != nil {
		return fmt.Errorf("agent: read log of %s: %w", w.agentID, err)
	}
	for _, ev := range evs {
		w.add(ev)
	}
	return nil
}

// append appends one event and keeps the window current: events others appended before
// it (a policy, a verdict) are read in first. The append is fenced by the window's
// epoch under the runner's lease (w.fence): it lands in the log the window read, or
// not at all (sessionlog.ErrEpoch, sessionlog.ErrLeaseEnded).
func (w *logWindow) append(ctx context.Context, typ string, payload any) (sessionlog.Event, error) {
	return w.appendStamped(ctx, typ, payload, "")
}

// appendStamped is append with a stamp kept on the event (sessionlog.Log.AppendIn).
func (w *logWindow) appendStamped(ctx context.Context, typ string, payload any, stamp string) (sessionlog.Event, error) {
	for attempt := 0; ; attempt++ {
		f, err := w.fence(ctx)
		if err != nil {
			return sessionlog.Event{}, fmt.Errorf("agent: append %s to %s: %w", typ, w.agentID, err)
		}
		ev, err := w.log.AppendIn(ctx, w.agentID, f, typ, payload, stamp)
		if errors.Is(err, sessionlog.ErrLeaseEnded) && attempt < 3 {
			continue // not sent: the fence renews the lease, or checks in DynamoDB, next
		}
		return w.adopt(ctx, typ, ev, err)
	}
}

// epochOf is the epoch of the log the window reads: as its events or its checkpoint
// name it, or else seq 0's id, read once (1 read unit; a window that read no event
// of a log from before events named it). No log at all (deleted) is ErrEpoch: no
// append is to be made.
func (w *logWindow) epochOf(ctx context.Context) (string, error) {
	if w.epoch != "" {
		return w.epoch, nil
	}
	e, err := w.log.Epoch(ctx, w.agentID)
	if errors.Is(err, sessionlog.ErrNotFound) {
		return "", fmt.Errorf("agent: log of %s: %w: %w", w.agentID, sessionlog.ErrEpoch, err)
	}
	if err != nil {
		return "", fmt.Errorf("agent: epoch of %s: %w", w.agentID, err)
	}
	w.epoch = e
	return e, nil
}

// adopt keeps the window current after an append of typ returned ev, err: events
// others appended before it are read in first.
func (w *logWindow) adopt(ctx context.Context, typ string, ev sessionlog.Event, err error) (sessionlog.Event, error) {
	if err != nil {
		return sessionlog.Event{}, fmt.Errorf("agent: append %s to %s: %w", typ, w.agentID, err)
	}
	if ev.Seq > w.last+1 {
		gap, err := w.log.Read(ctx, w.agentID, w.last+1, int(ev.Seq-w.last-1))
		if err != nil {
			return ev, fmt.Errorf("agent: read log of %s: %w", w.agentID, err)
		}
		for _, g := range gap {
			w.add(g)
		}
	}
	w.add(ev)
	return ev, nil
}

// maxRead is "the rest of the log" for Read.
const maxRead = 1 << 30
