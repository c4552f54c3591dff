package client_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/sessiondata"
)

// epochRecorder keeps events and EpochChanged notices in one trail, in callback order.
type epochRecorder struct {
	mu    sync.Mutex
	trail []any // client.Event or *client.EpochChanged
	ch    chan struct{}
}

func newEpochRecorder() *epochRecorder { return &epochRecorder{ch: make(chan struct{}, 100000)} }

func (r *epochRecorder) options(cur client.Cursor) client.Options {
	return client.Options{
		Cursor: cur,
		OnEvent: func(ev client.Event) error {
			r.add(ev)
			return nil
		},
		OnNotice: func(n client.Notice) {
			var ec *client.EpochChanged
			if errors.As(n, &ec) {
				r.add(ec)
			}
		},
	}
}

func (r *epochRecorder) add(v any) {
	r.mu.Lock()
	r.trail = append(r.trail, v)
	r.mu.Unlock()
	r.ch <- struct{}{}
}

// waitLen waits until the trail holds n entries and returns them.
func (r *epochRecorder) waitLen(t *testing.T, n int) []any {
	t.Helper()
	hang.Until(t, "callbacks", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.trail) >= n
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]any(nil), r.trail...)
}

func (s *testStack) sessionOps() *sessiondata.Store {
	return sessiondata.New(s.db, sessiondata.Tables{Log: s.st.Tables["LogTable"], Connections: s.st.Tables["ConnectionsTable"],
		Agents: s.st.Tables["AgentsTable"]}, sessiondata.Options{})
}

func readCursor(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestEpochChangeStartsOver: a reset while the client is connected closes it; the
// client reconnects, sees a new epoch in hello, tells the application (EpochChanged,
// before any event of the new log) and subscribes from seq 0, not from its cursor.
// A process that starts later with the same FileCursor after another reset does the
// same at Dial, and Resume starts from 0.
func TestEpochChangeStartsOver(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	agent := agentID()
	tok := s.token(t, agent)
	path := filepath.Join(t.TempDir(), "cursor")
	rec := newEpochRecorder()
	c := dial(t, s.url(agent), tok, rec.options(client.NewFileCursor(path)))
	first := c.Hello().Epoch
	if first == "" {
		t.Fatal("hello has no epoch")
	}
	if from, err := c.Resume(ctxT(t)); err != nil || from != 0 {
		t.Fatalf("resume: from %d, %v", from, err)
	}
	s.appendN(t, agent, "test/event", 5)
	rec.waitLen(t, 6)
	hang.Until(t, "cursor at seq 5", func() bool { b, _ := os.ReadFile(path); return strings.TrimSpace(string(b)) == "5 "+first })

	second, err := s.sessionOps().Reset(ctxT(t), agent)
	if err != nil {
		t.Fatal(err)
	}
	trail := rec.waitLen(t, 8) // the notice, then the new seq 0
	ec, ok := trail[6].(*client.EpochChanged)
	if !ok || ec.Old != first || ec.New != second {
		t.Fatalf("after the reset: %#v, want EpochChanged{%s → %s}", trail[6], first, second)
	}
	ev, ok := trail[7].(client.Event)
	if !ok || ev.Seq != 0 || ev.Type != "session/created" || ev.ID != second {
		t.Fatalf("first event after the change %#v, want the new log's session/created (id %s)", trail[7], second)
	}
	if c.Hello().Epoch != second {
		t.Fatalf("client hello epoch %q, want %q", c.Hello().Epoch, second)
	}
	hang.Until(t, "cursor at the new seq 0", func() bool { b, _ := os.ReadFile(path); return strings.TrimSpace(string(b)) == "0 "+second })
	// This test's Log appended to the old log and still remembers its tip; a read of
	// the new tip (strongly consistent) sets it, as a fresh appender's first read does.
	if tip, err := s.log.Tip(ctxT(t), agent); err != nil || tip != 0 {
		t.Fatalf("tip after the reset %d, %v", tip, err)
	}
	s.appendN(t, agent, "test/event", 2)
	trail = rec.waitLen(t, 10)
	for i, want := range []int64{1, 2} {
		if ev, ok := trail[8+i].(client.Event); !ok || ev.Seq != want {
			t.Fatalf("event %d after the change %#v, want seq %d", i, trail[8+i], want)
		}
	}
	c.Close()

	// Another process, later, with the same cursor file: the epoch changed while it
	// was away.
	third, err := s.sessionOps().Reset(ctxT(t), agent)
	if err != nil {
		t.Fatal(err)
	}
	rec2 := newEpochRecorder()
	c2 := dial(t, s.url(agent), tok, rec2.options(client.NewFileCursor(path)))
	if got := rec2.waitLen(t, 1); len(got) != 1 {
		t.Fatalf("callbacks at dial %#v", got)
	} else if ec, ok := got[0].(*client.EpochChanged); !ok || ec.Old != second || ec.New != third {
		t.Fatalf("at dial %#v, want EpochChanged{%s → %s}", got[0], second, third)
	}
	if got := readCursor(t, path); got != "- "+third {
		t.Fatalf("cursor file %q after the change, want %q", got, "- "+third)
	}
	if from, err := c2.Resume(ctxT(t)); err != nil || from != 0 {
		t.Fatalf("resume after the change: from %d, %v; want 0", from, err)
	}
	if got := rec2.waitLen(t, 2); got[1].(client.Event).Seq != 0 || got[1].(client.Event).ID != third {
		t.Fatalf("first event %#v, want the newest log's seq 0", got[1])
	}
}

// TestEpochSameKeepsCursor: reconnects into the same log keep the cursor (no notice).
func TestEpochSameKeepsCursor(t *testing.T) {
	t.Parallel()
	s := sharedStack(t)
	agent := agentID()
	tok := s.token(t, agent)
	path := filepath.Join(t.TempDir(), "cursor")
	rec := newEpochRecorder()
	c := dial(t, s.url(agent), tok, rec.options(client.NewFileCursor(path)))
	epoch := c.Hello().Epoch
	if _, err := c.Resume(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	s.appendN(t, agent, "test/event", 3)
	rec.waitLen(t, 4)
	hang.Until(t, "cursor at seq 3", func() bool { b, _ := os.ReadFile(path); return strings.TrimSpace(string(b)) == "3 "+epoch })
	c.Close()
	rec2 := newEpochRecorder()
	c2 := dial(t, s.url(agent), tok, rec2.options(client.NewFileCursor(path)))
	if c2.Hello().Epoch != epoch {
		t.Fatalf("epoch %q on reconnect, was %q", c2.Hello().Epoch, epoch)
	}
	if from, err := c2.Resume(ctxT(t)); err != nil || from != 4 {
		t.Fatalf("resume: from %d, %v; want 4", from, err)
	}
	s.appendN(t, agent, "test/event", 1)
	got := rec2.waitLen(t, 1)
	if ev, ok := got[0].(client.Event); !ok || ev.Seq != 4 {
		t.Fatalf("first callback %#v, want seq 4 (no EpochChanged)", got[0])
	}
}

// TestFileCursorEpoch: the file's forms — a seq alone (older clients), seq and epoch,
// an epoch with nothing recorded — load and store as documented.
func TestFileCursorEpoch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct {
		name, file string
		seq        int64
		ok         bool
		epoch      string
	}{
		{"seq alone", "41\n", 41, true, ""},
		{"seq and epoch", "41 e1\n", 41, true, "e1"},
		{"epoch alone", "- e1\n", 0, false, "e1"},
	}
	for _, c := range cases {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
		if err := os.WriteFile(p, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		fc := client.NewFileCursor(p)
		seq, ok, err := fc.Load()
		epoch, eerr := fc.LoadEpoch()
		if err != nil || eerr != nil || seq != c.seq || ok != c.ok || epoch != c.epoch {
			t.Fatalf("%s: Load %d %v %v, LoadEpoch %q %v", c.name, seq, ok, err, epoch, eerr)
		}
	}
	p := filepath.Join(dir, "cur")
	fc := client.NewFileCursor(p)
	steps := []struct {
		do   func() error
		want string
	}{
		{func() error { return fc.Store(3) }, "3"},
		{func() error { return fc.StoreEpoch("e1", false) }, "3 e1"},
		{func() error { return fc.Store(4) }, "4 e1"},
		{func() error { return fc.StoreEpoch("e2", true) }, "- e2"},
		{func() error { return fc.Store(0) }, "0 e2"},
	}
	for i, st := range steps {
		if err := st.do(); err != nil {
			t.Fatal(err)
		}
		if got := readCursor(t, p); got != st.want {
			t.Fatalf("step %d: file %q, want %q", i, got, st.want)
		}
	}
	for _, bad := range []string{"", "x", "- ", "1 2 3", "-5 e"} {
		if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := client.NewFileCursor(p).Load(); err == nil {
			t.Fatalf("cursor file %q loaded", bad)
		}
	}
}
