package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/terret/terret-ws/internal/sessionlog"
)

// checkpoint is the runner's checkpoint, the state item's map attribute "ck"
// (docs/architecture.md, "The runner's checkpoint"): the fold of every event below Seq,
// so a runner reads the log from Seq on, never from seq 0. It is written only by the
// lease holder's release, from events it read: it may lag the log, never lead it.
// Invariants: Seq ≤ turn_seq while a turn is recorded; the history's floor (Hist) is
// at most S+1 for the newest context/compacted's through_seq S (0 while there is
// none), and the fold items cover every seq from it to Seq (histfold.go); no inject
// logged below Seq is still queued. Its cost is its size on the state item (about 80
// bytes plus the policy's patterns), billed with every write of the item; the fold
// items its move writes cost 1 write unit per KB of the history they fold.
type checkpoint struct {
	Seq        int64     `dynamodbav:"seq"`
	Policy     *ckPolicy `dynamodbav:"policy,omitempty"`
	PolicyLast int64     `dynamodbav:"policy_last,omitempty"`
	Titled     bool      `dynamodbav:"titled,omitempty"`
	First      int64     `dynamodbav:"first,omitempty"` // seq of the first user/message; 0: none yet
	// Hist says where the model's history below Seq is (histfold.go); nil on a
	// checkpoint from before the history fold, whose Seq is at most its floor.
	Hist *ckHist `dynamodbav:"hist,omitempty"`
	// Epoch is the epoch of the log the checkpoint is of (seq 0's id): a runner that
	// read the log before it took the lease compares it with the one the lease write
	// returns (activeRun.fenceEpoch). "" on a checkpoint from before it was kept.
	Epoch string `dynamodbav:"epoch,omitempty"`

	put []foldPiece // the fold items the release writes before the checkpoint
}

// ckHist is the history below the checkpoint: the events from Floor on are folded in
// the fold items from the one keyed Key (which holds Floor) up to the checkpoint.
type ckHist struct {
	Floor int64 `dynamodbav:"floor"`
	Key   int64 `dynamodbav:"key"`
}

// floor is the first seq the model's history needs: below it, events may expire.
func (ck *checkpoint) floor() int64 {
	if ck.Hist != nil {
		return min(ck.Hist.Floor, ck.Seq)
	}
	return ck.Seq
}

// ckPolicy is the policy/updated in force below the checkpoint.
type ckPolicy struct {
	Seq      int64    `dynamodbav:"seq"`
	Stamp    string   `dynamodbav:"stamp,omitempty"`
	Patterns []string `dynamodbav:"patterns"`
}

func (f fold) checkpoint(seq int64) *checkpoint {
	ck := &checkpoint{Seq: seq, PolicyLast: f.policyLast, Titled: f.titled, First: f.firstSeq}
	if f.policy != nil {
		ck.Policy = &ckPolicy{Seq: f.policy.seq, Stamp: f.policy.stamp, Patterns: f.policy.patterns}
	}
	return ck
}

func (ck *checkpoint) fold() fold {
	if ck == nil {
		return fold{}
	}
	f := fold{policyLast: ck.PolicyLast, titled: ck.Titled, firstSeq: ck.First}
	if p := ck.Policy; p != nil {
		pats := p.Patterns
		if pats == nil {
			pats = []string{}
		}
		f.policy = &policyMark{seq: p.Seq, stamp: p.Stamp, patterns: pats}
	}
	return f
}

// begin fixes where a runner's window starts, from the state item st: its checkpoint,
// or seq 0 when it has none (an agent from before checkpoints: this invocation's
// release writes the first). A recorded turn below the checkpoint — which no release
// writes — makes it read from seq 0, to be safe. The history below the checkpoint is
// read from its fold items (loadHistory). It is a no-op once begun.
func (w *logWindow) begin(ctx context.Context, st *store, s state) error {
	if w.begun {
		return nil
	}
	w.begun = true
	ck := s.Ck
	if ck == nil || ck.Seq <= 0 || (s.TurnID != "" && s.TurnSeq < ck.Seq) {
		return nil // from seq 0
	}
	w.start, w.last, w.foldTo = ck.Seq, ck.Seq-1, ck.Seq
	w.base = ck.fold()
	w.fold = w.base
	w.epoch = ck.Epoch
	w.floor = ck.Seq
	if h := ck.Hist; h != nil {
		w.floor = min(h.Floor, ck.Seq)
		return w.loadHistory(ctx, st, h)
	}
	return nil
}

// foldAt is the fold of every event below seq, which must lie in [start, last+1].
func (w *logWindow) foldAt(seq int64) fold {
	f := w.base
	for _, ev := range w.evs {
		if ev.Seq >= seq {
			break
		}
		f.add(ev)
	}
	return f
}

// checkpoint is the checkpoint this invocation may write with its release, which
// finishes ended (nil: none) in the same write: the fold below the lowest of the next
// seq, the recorded or open turn's first seq, the seq after the newest compaction
// (0 while there is none) and the seq of any logged inject still queued. nil when the
// window never began.
func (rn *activeRun) checkpoint(ended *endedTurn) *checkpoint {
	w := rn.log
	if !w.begun {
		return nil
	}
	seq := w.last + 1
	if id := rn.st.TurnID; id != "" && (ended == nil || ended.id != id) {
		seq = min(seq, rn.st.TurnSeq)
	}
	if w.turn != nil {
		seq = min(seq, w.turn.seq)
	}
	for _, it := range rn.inbox {
		if at, ok := w.logged[it.ID]; ok {
			seq = min(seq, at)
		}
	}
	if seq < w.start {
		seq = w.start // the window's own start is a valid checkpoint: the one it began from
	}
	floor := int64(0)
	if w.compacted != nil {
		floor = w.compacted.ThroughSeq + 1
	}
	floor = max(min(floor, seq), min(w.floor, seq))
	ck := w.foldAt(seq).checkpoint(seq)
	// The events the checkpoint moves past are folded, from the floor on: below it the
	// history is the summary's.
	if lo := max(w.foldTo, floor); seq > lo {
		var evs []sessionlog.Event
		for _, ev := range w.evs {
			if ev.Seq >= lo && ev.Seq < seq {
				evs = append(evs, ev)
			}
		}
		if len(evs) > 0 {
			ck.put = piecesOf(lo, seq-1, evs[len(evs)-1].At, foldEvents(evs))
		}
	}
	key := seq
	for _, p := range slices.Concat(w.pieces, metas(ck.put)) {
		if p.from <= floor && p.from < seq {
			key = p.from
		}
	}
	ck.Hist = &ckHist{Floor: floor, Key: key}
	ck.Epoch = w.epoch
	return ck
}

func metas(ps []foldPiece) []pieceMeta {
	out := make([]pieceMeta, len(ps))
	for i, p := range ps {
		out[i] = p.pieceMeta
	}
	return out
}

// wrote takes in ck, just written by a release: its fold items are held, and cover the
// log up to its seq.
func (w *logWindow) wrote(ck *checkpoint) {
	if ck == nil || !w.begun {
		return
	}
	w.pieces = append(w.pieces, metas(ck.put)...)
	w.foldTo = max(w.foldTo, ck.Seq)
	ck.put = nil
}

// firstMessage returns the session's first user message, and reports whether the
// session needs no title: it has one, or nothing to name it after. Below the window
// it is read by its seq, which the fold keeps: one read of one event, only while the
// session is untitled (its titler failed).
func (w *logWindow) firstMessage(ctx context.Context) (string, bool, error) {
	f := w.fold
	if f.titled || f.firstSeq == 0 {
		return "", true, nil
	}
	if !w.firstSeen {
		if f.firstSeq >= w.start {
			for _, ev := range w.evs {
				if ev.Seq == f.firstSeq {
					w.first, w.firstSeen = decode[userMessage](ev).Text, true
				}
			}
		} else {
			evs, err := w.log.Read(ctx, w.agentID, f.firstSeq, 1)
			if err != nil {
				return "", false, fmt.Errorf("agent: read first message of %s: %w", w.agentID, err)
			}
			if len(evs) == 1 && evs[0].Type == TypeUserMessage {
				w.first = decode[userMessage](evs[0]).Text
			}
			w.firstSeen = true
		}
	}
	return w.first, strings.TrimSpace(w.first) == "", nil
}
