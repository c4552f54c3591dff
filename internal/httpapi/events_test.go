package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// rig is the events path over DynamoDB Local: agent a1 with a log (seq 0) and a token.
type rig struct {
	t      *testing.T
	srv    *httptest.Server
	s      *Server
	log    *sessionlog.Log
	token  string
	spy    *spy
	tokens *auth.Store
	tables map[string]string
}

// spy is the Deliverer, telling the test when a page was read and counting the tip's
// reads (a waiting long-poll's peeks).
type spy struct {
	Reader
	pages chan int64 // the From of each page read
	tips  atomic.Int32
	// afterPage, if set, runs after each page read, before the handler goes on.
	afterPage func(from int64)
}

func (s *spy) Tip(ctx context.Context, agentID string) (int64, error) {
	s.tips.Add(1)
	return s.Reader.Tip(ctx, agentID)
}

func (s *spy) Page(ctx context.Context, agentID string, from int64, limit int) (delivery.Page, error) {
	p, err := s.Reader.Page(ctx, agentID, from, limit)
	if s.afterPage != nil {
		s.afterPage(p.From)
	}
	select {
	case s.pages <- p.From:
	default:
	}
	return p, err
}

func newRig(t *testing.T, cfg delivery.Config, ev Events) *rig {
	t.Helper()
	names := dynamotest.CreateTables(t)
	db := dynamotest.Client(t)
	l := sessionlog.New(db, names["LogTable"])
	tokens := auth.New(db, names["ConnectionsTable"])
	ctx := context.Background()
	tok, err := tokens.Create(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Create(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if cfg.ReplayLimit == 0 {
		cfg.ReplayLimit = 100
	}
	d := delivery.New(cfg, l, connections.New(db, names["ConnectionsTable"]), nil, nil)
	sp := &spy{Reader: d, pages: make(chan int64, 64)}
	ev.Log, ev.ReplayLimit = sp, cfg.ReplayLimit
	s := New(tokens, nil)
	ev.Route(s)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return &rig{t: t, srv: srv, s: s, log: l, token: tok, spy: sp, tokens: tokens, tables: names}
}

func (r *rig) append(n int) {
	r.t.Helper()
	for range n {
		if _, err := r.log.Append(context.Background(), "a1", "test/event", map[string]string{"x": "y"}); err != nil {
			r.t.Fatal(err)
		}
	}
}

// get sends GET /agents/a1/events?query with the rig's token and headers (key, value
// pairs).
func (r *rig) get(ctx context.Context, query string, headers ...string) *http.Response {
	r.t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", r.srv.URL+"/agents/a1/events?"+query, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("GET events?%s: %v", query, err)
	}
	return resp
}

// page gets one JSON page and decodes it; the status must be 200.
func (r *rig) page(query string) EventsPage {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
	defer cancel()
	resp := r.get(ctx, query, "Accept", "application/json")
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		r.t.Fatalf("GET events?%s: status %d, body %s", query, resp.StatusCode, b)
	}
	var p EventsPage
	if err := json.Unmarshal(b, &p); err != nil {
		r.t.Fatalf("page %s: %v", b, err)
	}
	return p
}

func seqs(t *testing.T, evs []json.RawMessage) []int64 {
	t.Helper()
	out := []int64{}
	for _, e := range evs {
		var v struct{ Seq int64 }
		if err := json.Unmarshal(e, &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v.Seq)
	}
	return out
}

func TestEventsPage(t *testing.T) {
	t.Parallel()
	r := newRig(t, delivery.Config{ReplayLimit: 5}, Events{})
	r.append(7) // tip 7
	tests := []struct {
		query      string
		want       []int64
		next, last int64
		trunc      string
	}{
		{"from_seq=4", []int64{4, 5, 6, 7}, 8, 7, ""},
		{"from_seq=4&limit=2", []int64{4, 5}, 6, 7, ""},
		{"from_seq=0", []int64{3, 4, 5, 6, 7}, 8, 7, `{"type":"replay_truncated","requested_from_seq":0,"from_seq":3}`},
		{"from_seq=0&limit=99", []int64{3, 4, 5, 6, 7}, 8, 7, `{"type":"replay_truncated","requested_from_seq":0,"from_seq":3}`},
		{"from_seq=8", []int64{}, 8, 7, ""},
		{"from_seq=20", []int64{}, 8, 7, `{"type":"replay_truncated","requested_from_seq":20,"from_seq":8}`},
	}
	for _, tt := range tests {
		p := r.page(tt.query)
		got := seqs(t, p.Events)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) || p.NextSeq != tt.next || p.LastSeq != tt.last || p.Epoch == "" {
			t.Errorf("%s: seqs %v next %d last %d epoch %q; want %v next %d last %d and the epoch", tt.query, got, p.NextSeq, p.LastSeq, p.Epoch, tt.want, tt.next, tt.last)
		}
		var trunc string
		if p.ReplayTruncated != nil {
			b, _ := json.Marshal(p.ReplayTruncated)
			trunc = string(b)
		}
		if trunc != tt.trunc {
			t.Errorf("%s: replay_truncated %s, want %q", tt.query, trunc, tt.trunc)
		}
	}
}

func TestEventsBadQuery(t *testing.T) {
	t.Parallel()
	r := newRig(t, delivery.Config{}, Events{})
	tests := []struct {
		query, accept, lastID, names string
	}{
		{"", "application/json", "", "from_seq"},
		{"from_seq=x", "application/json", "", "from_seq"},
		{"from_seq=-1", "", "", "from_seq"},
		{"from_seq=0&limit=0", "", "", "limit"},
		{"from_seq=0&limit=ten", "", "", "limit"},
		{"from_seq=0&wait=21", "", "", "wait"},
		{"from_seq=0&wait=-1", "", "", "wait"},
		{"from_seq=0&wait=soon", "", "", "wait"},
		{"from_seq=0", "text/event-stream", "seven", "Last-Event-ID"},
		{"", "text/event-stream", "", "from_seq"},
	}
	for _, tt := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
		resp := r.get(ctx, tt.query, "Accept", tt.accept, "Last-Event-ID", tt.lastID)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		var e struct{ Type, Code, Message string }
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != 400 || e.Type != "error" || e.Code != "bad_frame" || !strings.HasPrefix(e.Message, tt.names+":") {
			t.Errorf("query %q accept %q Last-Event-ID %q: status %d body %s; want 400 bad_frame naming %s", tt.query, tt.accept, tt.lastID, resp.StatusCode, b, tt.names)
		}
	}
}

// TestEventsLongPoll: a long-poll with nothing at or after from_seq answers with the
// next event appended after its first read — found by its own peeks, or at once when
// the bell rings (peeks an hour apart: only the bell can wake it) — and one with
// nothing new answers an empty page at the end of its wait.
func TestEventsLongPoll(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		ev   Events
		ring bool
	}{
		{"peeks", Events{FirstPeek: 20 * time.Millisecond, MaxPeek: 80 * time.Millisecond}, false},
		{"bell", Events{FirstPeek: time.Hour, MaxPeek: time.Hour}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, delivery.Config{}, tt.ev)
			r.append(3)
			answer := make(chan EventsPage, 1)
			go func() { answer <- r.page("from_seq=4&wait=20") }()
			select {
			case from := <-r.spy.pages:
				if from != 4 {
					t.Errorf("first page read from %d, want 4", from)
				}
			case <-time.After(hang.Bound()):
				t.Fatal("the long-poll's first read never came")
			}
			r.append(1) // seq 4, after the long-poll found nothing
			if tt.ring {
				r.s.Bell().Ring("a1")
			}
			var p EventsPage
			select {
			case p = <-answer:
			case <-time.After(hang.Bound()):
				t.Fatal("the long-poll did not answer after seq 4 was appended")
			}
			if got := seqs(t, p.Events); fmt.Sprint(got) != "[4]" || p.NextSeq != 5 || p.LastSeq != 4 || p.ReplayTruncated != nil {
				t.Fatalf("long-poll answered %v next %d last %d truncated %v; want [4] next 5 last 4", got, p.NextSeq, p.LastSeq, p.ReplayTruncated)
			}
		})
	}
	t.Run("nothing new", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, delivery.Config{}, Events{FirstPeek: 20 * time.Millisecond})
		r.append(2)
		p := r.page("from_seq=3&wait=0.3")
		if len(p.Events) != 0 || p.NextSeq != 3 || p.LastSeq != 2 {
			t.Fatalf("long-poll with nothing new answered %d events, next %d, last %d; want none, next 3, last 2", len(p.Events), p.NextSeq, p.LastSeq)
		}
	})
}

// TestPeeksBackOff: a waiting reader's peeks come at pauses doubling from FirstPeek to
// MaxPeek — never one per FirstPeek — at most 1 + log2(MaxPeek/FirstPeek) peeks plus one
// per MaxPeek of the wait; a ring peeks at once.
func TestPeeksBackOff(t *testing.T) {
	t.Parallel()
	l := Events{FirstPeek: 10 * time.Millisecond, MaxPeek: 40 * time.Millisecond}.peeker(nil)
	peeks := 0
	found, err := l.until(context.Background(), time.Now().Add(400*time.Millisecond), func(context.Context) (bool, error) {
		peeks++
		return false, nil
	})
	// At 10, 30, 70 ms, then every 40 ms to 400 ms (8 more), and at the deadline: 12 at
	// most; peeks every 10 ms would be 40. A loaded machine only makes fewer.
	if found || err != nil || peeks > 12 || peeks < 3 {
		t.Fatalf("a 400 ms wait peeked %d times (found %v, %v), want 3 to 12", peeks, found, err)
	}
	rang := make(chan struct{}, 1)
	l = Events{FirstPeek: time.Hour, MaxPeek: time.Hour}.peeker(rang)
	rang <- struct{}{}
	peeks = 0
	found, err = l.until(context.Background(), time.Now().Add(time.Hour), func(context.Context) (bool, error) {
		peeks++
		return true, nil
	})
	if !found || err != nil || peeks != 1 {
		t.Fatalf("a ring: found %v after %d peeks (%v), want found after one", found, peeks, err)
	}
}

// sse is one Server-Sent Events record: a comment line alone has comment set.
type sse struct {
	event, id, data string
	comment         bool
}

// sseReader reads records from a stream in the background.
func sseReader(body io.Reader) <-chan sse {
	out := make(chan sse, 256)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var rec sse
		var has bool
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if has {
					out <- rec
				}
				rec, has = sse{}, false
			case strings.HasPrefix(line, ":"):
				out <- sse{comment: true}
			default:
				k, v, _ := strings.Cut(line, ":")
				v = strings.TrimPrefix(v, " ")
				switch k {
				case "event":
					rec.event = v
				case "id":
					rec.id = v
				case "data":
					rec.data = v
				}
				has = true
			}
		}
	}()
	return out
}

// nextRecord returns the next record that is not a comment, skipping retry-only ones.
func nextRecord(t *testing.T, recs <-chan sse, what string) sse {
	t.Helper()
	for {
		select {
		case rec, ok := <-recs:
			if !ok {
				t.Fatalf("stream ended while waiting for %s", what)
			}
			if rec.comment || (rec.event == "" && rec.id == "" && rec.data == "") {
				continue
			}
			return rec
		case <-time.After(hang.Bound()):
			t.Fatalf("no %s on the stream", what)
		}
	}
}

// expectSeqs reads the events from..to, exactly: a gap, a duplicate or another record
// fails.
func expectSeqs(t *testing.T, recs <-chan sse, from, to int64) {
	t.Helper()
	for want := from; want <= to; want++ {
		rec := nextRecord(t, recs, "seq "+strconv.FormatInt(want, 10))
		var v struct{ Seq int64 }
		if rec.event != "" || json.Unmarshal([]byte(rec.data), &v) != nil || rec.id != strconv.FormatInt(want, 10) || v.Seq != want {
			t.Fatalf("record event %q id %q data %s; want the event of seq %d", rec.event, rec.id, rec.data, want)
		}
	}
}

// TestEventsStreamResume: a stream sends hello, the replay and the live tail; cut, and
// resumed with Last-Event-ID, it goes on from the event after it — those appended
// while it was cut included — with no gap and no duplicate; an idle stream gets
// comment lines.
func TestEventsStreamResume(t *testing.T) {
	t.Parallel()
	r := newRig(t, delivery.Config{}, Events{Ping: 50 * time.Millisecond, FirstPeek: 20 * time.Millisecond, MaxPeek: 80 * time.Millisecond})
	r.append(3)
	ctx, cut := context.WithCancel(context.Background())
	resp := r.get(ctx, "from_seq=1", "Accept", "text/event-stream")
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("stream: status %d, content type %q", resp.StatusCode, ct)
	}
	recs := sseReader(resp.Body)
	if h := nextRecord(t, recs, "hello"); h.event != "hello" || !strings.Contains(h.data, `"type":"hello"`) || !strings.Contains(h.data, `"last_seq":3`) {
		t.Fatalf("first record %+v, want event hello with the hello frame", h)
	}
	expectSeqs(t, recs, 1, 3)
	r.append(2)
	expectSeqs(t, recs, 4, 5) // the live tail
	for pinged := false; !pinged; {
		select {
		case rec := <-recs:
			pinged = rec.comment
			if !rec.comment {
				t.Fatalf("record %+v on an idle stream, want a comment line", rec)
			}
		case <-time.After(hang.Bound()):
			t.Fatal("no comment line on an idle stream")
		}
	}
	cut()
	resp.Body.Close()
	r.append(2) // 6, 7 while cut

	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	resp = r.get(ctx2, "from_seq=1", "Accept", "text/event-stream", "Last-Event-ID", "5")
	defer resp.Body.Close()
	recs = sseReader(resp.Body)
	if h := nextRecord(t, recs, "hello"); h.event != "hello" {
		t.Fatalf("first record after resume %+v, want hello", h)
	}
	expectSeqs(t, recs, 6, 7)
	r.append(1)
	expectSeqs(t, recs, 8, 8)
}

// concurrency counts the replay reads under way, and the most at once; each read is
// held a moment so that reads that were not capped would overlap.
type concurrency struct {
	mu       sync.Mutex
	cur, max int
	reads    atomic.Int32
}

func (c *concurrency) ReplayRead(start bool) {
	c.mu.Lock()
	if start {
		c.cur++
		c.max = max(c.max, c.cur)
		c.reads.Add(1)
	} else {
		c.cur--
	}
	c.mu.Unlock()
	if start {
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEventsReplayCap: pages read under the replay slots: with MaxConcurrentReplays 1,
// four pages at once are read one at a time, and each is whole.
func TestEventsReplayCap(t *testing.T) {
	t.Parallel()
	obs := &concurrency{}
	r := newRig(t, delivery.Config{MaxConcurrentReplays: 1, Observer: obs}, Events{})
	r.append(4)
	var wg sync.WaitGroup
	pages := make([]EventsPage, 4)
	for i := range pages {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pages[i] = r.page("from_seq=1")
		}()
	}
	wg.Wait()
	for i, p := range pages {
		if got := seqs(t, p.Events); fmt.Sprint(got) != "[1 2 3 4]" {
			t.Errorf("page %d: %v, want [1 2 3 4]", i, got)
		}
	}
	if obs.max != 1 || obs.reads.Load() != 4 {
		t.Fatalf("%d replay reads, at most %d at once; want 4, one at a time", obs.reads.Load(), obs.max)
	}
}
