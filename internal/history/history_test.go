package history_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/history"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// step is one thing a client does or receives.
type step struct {
	client string
	sub    int64 // subscribe from this seq (when recv is nil and !drop && trunc < 0)
	recv   []int64
	trunc  int64
	drop   bool
}

func sub(c string, from int64) step     { return step{client: c, sub: from, trunc: -1} }
func recv(c string, seqs ...int64) step { return step{client: c, recv: seqs, trunc: -1} }
func trunc(c string, from int64) step   { return step{client: c, trunc: from} }
func drop(c string) step                { return step{client: c, drop: true, trunc: -1} }
func span(from, to int64) (out []int64) {
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// TestFaultsDetected: the checker accepts exact streams (including the spec's allowances
// around resubscribe, truncation and drops) and reports every kind of gap, duplicate,
// reordering and missed event.
func TestFaultsDetected(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		steps []step
		tip   int64
		want  []string // substrings of the violations; none means exact
	}{
		{"exact", []step{sub("a", 0), recv("a", span(0, 5)...)}, 5, nil},
		{"exact two clients", []step{sub("a", 0), sub("b", 3), recv("a", 0, 1), recv("b", 3), recv("a", 2, 3, 4), recv("b", 4)}, 4, nil},
		{"gap", []step{sub("a", 0), recv("a", 0, 1, 3, 4)}, 4, []string{"seq 3 after 1: gap of 1"}},
		{"duplicate", []step{sub("a", 0), recv("a", 0, 1, 2, 1, 2, 3)}, 3, []string{"seq 1 again after 2: duplicate"}},
		{"out of order", []step{sub("a", 0), recv("a", 0, 2, 1)}, 2, []string{"seq 2 after 0: gap", "seq 1 after 2: out of order"}},
		{"wrong first event", []step{sub("a", 2), recv("a", 3, 4)}, 4, []string{"first event seq 3, want from_seq 2"}},
		{"missed the tail", []step{sub("a", 0), recv("a", 0, 1, 2)}, 5, []string{"live to the end but missed seq 3..5"}},
		{"received nothing", []step{sub("a", 1)}, 3, []string{"missed seq 1..3"}},
		{"beyond the tip", []step{sub("a", 0), recv("a", 0, 1, 2)}, 1, []string{"beyond the log's tip 1"}},
		{"subscribed past the tip", []step{sub("a", 4)}, 3, nil},
		{"dropped after a prefix", []step{sub("a", 0), recv("a", 0, 1), drop("a")}, 9, nil},
		{"dropped after a gap", []step{sub("a", 0), recv("a", 0, 2), drop("a")}, 9, []string{"gap"}},
		{"resubscribe: in-flight frames discarded", []step{sub("a", 0), recv("a", 0, 1, 2, 3), sub("a", 1), recv("a", 4, 5, 1, 2, 3, 4, 5, 6)}, 6, nil},
		{"resubscribe: in-flight frames with a gap", []step{sub("a", 0), recv("a", 0, 1, 2, 3), sub("a", 1), recv("a", 5, 1, 2, 3, 4, 5, 6)}, 6, []string{"subscription 0 (from_seq 0): seq 5 after 3: gap"}},
		{"resubscribe: new stream duplicate", []step{sub("a", 0), recv("a", 0, 1, 2), sub("a", 1), recv("a", 1, 2, 2, 3)}, 3, []string{"subscription 1 (from_seq 1): seq 2 again"}},
		{"resubscribe: replaced need not reach the tip", []step{sub("a", 0), recv("a", 0), sub("a", 0), recv("a", 0, 1, 2)}, 2, nil},
		{"resubscribe: new one must", []step{sub("a", 0), recv("a", span(0, 4)...), sub("a", 2), recv("a", 2, 3)}, 4, []string{"subscription 1 (from_seq 2): live to the end but missed seq 4..4"}},
		{"reconnect as a new client", []step{sub("c1", 0), recv("c1", 0, 1), drop("c1"), sub("c2", 2), recv("c2", 2, 3)}, 3, nil},
		{"truncated replay", []step{sub("a", 0), trunc("a", 5), recv("a", 5, 6)}, 6, nil},
		{"past the tip: pulled back", []step{sub("a", 3), trunc("a", 1), recv("a", 1, 2, 3)}, 3, nil},
		{"past the tip: pulled back, events skipped", []step{sub("a", 3), trunc("a", 1), recv("a", 3)}, 3, []string{"first event seq 3, want from_seq 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := history.New()
			subs := map[string]*history.Sub{}
			for _, st := range tc.steps {
				switch {
				case st.drop:
					subs[st.client].Drop()
				case st.trunc >= 0:
					subs[st.client].Truncated(st.trunc)
				case st.recv != nil:
					for _, seq := range st.recv {
						subs[st.client].Receive(seq)
					}
				default:
					subs[st.client] = h.Subscribe(st.client, st.sub)
				}
			}
			err := h.Verify(tc.tip)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("exact history reported:\n%v\n%s", err, h.Summary())
				}
				return
			}
			if err == nil {
				t.Fatalf("no violation reported, want %q\n%s", tc.want, h.Summary())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("violations\n%v\ndo not mention %q", err, w)
				}
			}
		})
	}
}

// TestFaultErrStopsReaders: Err reports the first violation as soon as it happens, so
// a reader goroutine can stop without waiting for the end.
func TestFaultErrStopsReaders(t *testing.T) {
	t.Parallel()
	h := history.New()
	s := h.Subscribe("a", 0)
	s.Receive(0)
	if err := s.Err(); err != nil || s.Next() != 1 || !s.Reached(0) || s.Reached(1) {
		t.Fatalf("after seq 0: err %v, next %d", err, s.Next())
	}
	s.Receive(0)
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("Err after a duplicate = %v", err)
	}
	if d := s.Duplicates(); len(d) != 1 || d[0] != 0 {
		t.Fatalf("Duplicates = %v", d)
	}
	r := h.Subscribe("a", 1)
	if err := r.Err(); err == nil {
		t.Fatal("a resubscribe hides the replaced subscription's violation")
	}
}

// TestFaultWrongEventAtSeq: CheckLog catches a client handed a different event than the
// log holds at a seq, and a log that is not gapless.
func TestFaultWrongEventAtSeq(t *testing.T) {
	t.Parallel()
	log := make([]sessionlog.Event, 4)
	for i := range log {
		log[i] = sessionlog.Event{Seq: int64(i), ID: fmt.Sprintf("e%d", i)}
	}
	tests := []struct {
		name string
		ids  []string
		log  []sessionlog.Event
		want string
	}{
		{"exact", []string{"e0", "e1", "e2", "e3"}, log, ""},
		{"wrong event", []string{"e0", "e1", "zz", "e3"}, log, `seq 2: a#0 received event "zz", the log holds "e2"`},
		{"log with a gap", []string{"e0", "e1"}, []sessionlog.Event{log[0], log[2]}, "not gapless"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := history.New()
			s := h.Subscribe("a", 0)
			for i, id := range tc.ids {
				s.ReceiveID(int64(i), id)
			}
			rec := &recorder{TB: t}
			h.CheckLog(rec, tc.log)
			got := strings.Join(rec.errs, "\n")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("CheckLog reported %q, want %q", got, tc.want)
			}
		})
	}
	h := history.New()
	a, b := h.Subscribe("a", 0), h.Subscribe("b", 0)
	a.ReceiveID(0, "x")
	b.ReceiveID(0, "y")
	if err := h.Verify(0); err == nil || !strings.Contains(err.Error(), `seq 0 received as event "x" by a#0 and as "y" by b#0`) {
		t.Fatalf("two ids at one seq: %v", err)
	}
}

// recorder collects what Check reports instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
