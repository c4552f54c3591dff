// Package history checks what clients of one session received against the session's
// log, for tests: it records every event each client receives per subscription and
// asserts the protocol's exactness — a subscription from f sees f, f+1, … with no gap,
// no duplicate and nothing out of order — and that every logged event reached every
// subscriber that was live across it.
//
// One History covers one session (one log). Readers may run on any goroutine: they
// record with Sub.Receive and stop early on Sub.Err; the test goroutine asserts with
// Check (or CheckLog) once the run is over.
//
//	h := history.New()
//	sub := h.Subscribe("client-1", 0) // right before sending subscribe{from_seq: 0}
//	sub.Receive(seq)                  // for every event frame, in arrival order
//	…
//	h.Check(t, tip)
//
// Resubscribing mid-stream: the spec lets frames of the replaced subscription arrive
// before the new replay's first event, and tells the client to discard events until
// seq == from_seq. The new Sub does exactly that, and hands each discarded frame to the
// subscription it replaced, where it must continue that subscription's stream exactly.
package history

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/terret/terret-ws/internal/sessionlog"
)

// History is what the clients of one session received. It is safe for concurrent use.
type History struct {
	mu      sync.Mutex
	clients []string           // in order of first subscribe
	subs    map[string][]*Sub  // by client, in subscribe order
	ids     map[int64]idRecord // event id first received at each seq, if reported
	errs    []string           // violations not tied to a subscription
}

type idRecord struct {
	id, by string
}

// New returns an empty History.
func New() *History {
	return &History{subs: map[string][]*Sub{}, ids: map[int64]idRecord{}}
}

// Sub is one subscription of one client: from a subscribe until the client subscribes
// again, is dropped, or the run ends.
type Sub struct {
	h      *History
	client string
	n      int   // index among the client's subscriptions
	asked  int64 // from_seq the client sent
	from   int64 // where the replay starts (moved by Truncated)
	prev   *Sub  // the subscription this one replaced

	synced   bool    // the first event (seq == from) arrived
	next     int64   // next expected seq once synced
	got      []int64 // accepted seqs, in arrival order
	replaced bool
	dropped  bool
	errs     []string
}

// Subscribe records that client subscribed from fromSeq. Call it before sending the
// subscribe frame, and route every later event frame of that client to the returned
// Sub. A client's earlier subscription is replaced from now on: it can still receive
// frames already in flight (see the package doc), and need not reach the tip.
func (h *History) Subscribe(client string, fromSeq int64) *Sub {
	h.mu.Lock()
	defer h.mu.Unlock()
	prior := h.subs[client]
	if len(prior) == 0 {
		h.clients = append(h.clients, client)
	}
	s := &Sub{h: h, client: client, n: len(prior), asked: fromSeq, from: fromSeq, next: fromSeq}
	if len(prior) > 0 {
		s.prev = prior[len(prior)-1]
		s.prev.replaced = true
	}
	h.subs[client] = append(prior, s)
	return s
}

// Truncated records a replay_truncated frame: the replay starts at fromSeq instead of
// the from_seq asked for — above it (the replay limit) or below it (a subscribe past
// the log's tip starts at the tip + 1). It must come before the subscription's first
// event.
func (s *Sub) Truncated(fromSeq int64) {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	switch {
	case s.synced:
		s.failf("replay_truncated{from_seq: %d} after the first event (seq %d)", fromSeq, s.from)
	default:
		s.from, s.next = fromSeq, fromSeq
	}
}

// Receive records one event frame of this subscription's client, in arrival order.
func (s *Sub) Receive(seq int64) {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.receive(seq)
}

// ReceiveID is Receive for an event whose id is known: CheckLog then also asserts that
// the event at each seq is the logged one, and every receipt of a seq carries one id.
func (s *Sub) ReceiveID(seq int64, id string) {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	who := fmt.Sprintf("%s#%d", s.client, s.n)
	if r, ok := s.h.ids[seq]; !ok {
		s.h.ids[seq] = idRecord{id: id, by: who}
	} else if r.id != id {
		s.h.errs = append(s.h.errs, fmt.Sprintf("seq %d received as event %q by %s and as %q by %s", seq, r.id, r.by, id, who))
	}
	s.receive(seq)
}

func (s *Sub) receive(seq int64) {
	if !s.synced {
		if seq != s.from {
			if s.prev != nil {
				// Still in flight from the replaced subscription: it must continue that
				// subscription's stream.
				s.prev.receive(seq)
				return
			}
			s.failf("first event seq %d, want from_seq %d", seq, s.from)
			s.synced = true // report the stream from here on, once
			s.next = seq + 1
			s.got = append(s.got, seq)
			return
		}
		s.synced = true
	}
	switch {
	case seq == s.next:
	case seq < s.next && contains(s.got, seq):
		s.failf("seq %d again after %d: duplicate", seq, s.next-1)
	case seq < s.next:
		s.failf("seq %d after %d: out of order", seq, s.next-1)
	default:
		s.failf("seq %d after %d: gap of %d", seq, s.next-1, seq-s.next)
	}
	s.got = append(s.got, seq)
	if seq >= s.next {
		s.next = seq + 1
	}
}

// Drop records that the client was dropped (lagged, gone, closed): what it received
// must still be exact, but it need not reach the tip.
func (s *Sub) Drop() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.dropped = true
}

// Next returns the next seq the subscription expects.
func (s *Sub) Next() int64 {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.next
}

// Reached reports whether the subscription has received every event up to tip.
func (s *Sub) Reached(tip int64) bool {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return (s.synced || s.from > tip) && s.next > tip
}

// Err returns the first violation seen by this subscription or those it replaced, or
// nil; a reader can stop on it.
func (s *Sub) Err() error {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	for p := s; p != nil; p = p.prev {
		if len(p.errs) > 0 {
			return errors.New(p.errs[0])
		}
	}
	return nil
}

// Received returns the seqs the subscription accepted, in arrival order (frames it
// handed to the subscription it replaced excluded).
func (s *Sub) Received() []int64 {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return append([]int64(nil), s.got...)
}

func (s *Sub) failf(format string, args ...any) {
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
}

func contains(seqs []int64, seq int64) bool {
	for _, v := range seqs {
		if v == seq {
			return true
		}
	}
	return false
}

// Verify returns every violation against a log whose highest seq is logTip, or nil:
//   - a subscription's stream was not exactly from, from+1, … (gap, duplicate, out of
//     order, wrong first event), including frames of a replaced subscription that
//     arrived after the replacement;
//   - an event beyond the tip was received;
//   - a subscription live at the end (its client's latest, not dropped) is live across
//     every event from its from_seq to the tip, and it missed some.
func (h *History) Verify(logTip int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var problems []string
	problems = append(problems, h.errs...)
	for _, c := range h.clients {
		subs := h.subs[c]
		for i, s := range subs {
			who := fmt.Sprintf("%s subscription %d (from_seq %d", c, i, s.asked)
			if s.from != s.asked {
				who += fmt.Sprintf(", replay from %d", s.from)
			}
			who += ")"
			for _, e := range s.errs {
				problems = append(problems, who+": "+e)
			}
			if len(s.got) > 0 && s.got[len(s.got)-1] > logTip {
				problems = append(problems, fmt.Sprintf("%s: received seq %d beyond the log's tip %d", who, s.got[len(s.got)-1], logTip))
			}
			live := i == len(subs)-1 && !s.dropped
			if live && s.from <= logTip && (!s.synced || s.next <= logTip) {
				missing := s.from
				if s.synced {
					missing = s.next
				}
				problems = append(problems, fmt.Sprintf("%s: live to the end but missed seq %d..%d (received %s)", who, missing, logTip, ranges(s.got)))
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "\n"))
}

// Check fails t with every violation Verify finds against a log whose tip is logTip.
func (h *History) Check(t testing.TB, logTip int64) {
	t.Helper()
	if err := h.Verify(logTip); err != nil {
		t.Errorf("history (log tip %d):\n%v\nreceived:\n%s", logTip, err, h.Summary())
	}
}

// CheckLog is Check against the log itself, read back in full: it also asserts that
// the log is gapless from seq 0 and that every event received with ReceiveID is the
// logged one.
func (h *History) CheckLog(t testing.TB, log []sessionlog.Event) {
	t.Helper()
	for i, ev := range log {
		if ev.Seq != int64(i) {
			t.Errorf("log: event %d has seq %d: the log is not gapless from 0", i, ev.Seq)
			return
		}
	}
	h.mu.Lock()
	for seq, r := range h.ids {
		if seq >= 0 && seq < int64(len(log)) && log[seq].ID != r.id {
			t.Errorf("seq %d: %s received event %q, the log holds %q", seq, r.by, r.id, log[seq].ID)
		}
	}
	h.mu.Unlock()
	h.Check(t, int64(len(log))-1)
}

// Summary describes what every subscription received, as seq ranges.
func (h *History) Summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, c := range h.clients {
		for i, s := range h.subs[c] {
			state := "live"
			switch {
			case s.dropped:
				state = "dropped"
			case s.replaced:
				state = "replaced"
			}
			fmt.Fprintf(&b, "  %s #%d from %d (%s): %s\n", c, i, s.asked, state, ranges(s.got))
		}
	}
	return b.String()
}

// ranges renders seqs in arrival order as runs: "0..41, 38..50".
func ranges(seqs []int64) string {
	if len(seqs) == 0 {
		return "nothing"
	}
	var parts []string
	start, prev := seqs[0], seqs[0]
	flush := func() {
		if start == prev {
			parts = append(parts, fmt.Sprint(start))
		} else {
			parts = append(parts, fmt.Sprintf("%d..%d", start, prev))
		}
	}
	for _, v := range seqs[1:] {
		if v == prev+1 {
			prev = v
			continue
		}
		flush()
		start, prev = v, v
	}
	flush()
	return strings.Join(parts, ", ")
}

// Duplicates returns the seqs the subscription received more than once, sorted.
func (s *Sub) Duplicates() []int64 {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	seen := map[int64]int{}
	for _, v := range s.got {
		seen[v]++
	}
	var out []int64
	for v, n := range seen {
		if n > 1 {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
