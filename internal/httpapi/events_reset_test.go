package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/sessiondata"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// getAs is rig.get with another token.
func (r *rig) getAs(ctx context.Context, token, query string, headers ...string) *http.Response {
	r.t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", r.srv.URL+"/agents/a1/events?"+query, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("GET events?%s: %v", query, err)
	}
	return resp
}

// sessions is the operator's reset and delete (terret session) over the rig's tables.
func (r *rig) sessions() *sessiondata.Store {
	return sessiondata.New(dynamotest.Client(r.t), sessiondata.Tables{
		Log: r.tables["LogTable"], Connections: r.tables["ConnectionsTable"], Agents: r.tables["AgentsTable"],
	}, sessiondata.Options{})
}

// streamHello opens a stream of a1 with token from query and reads its hello.
func (r *rig) streamHello(ctx context.Context, token, query string, headers ...string) (<-chan sse, helloFields, func()) {
	r.t.Helper()
	resp := r.getAs(ctx, token, query, append([]string{"Accept", "text/event-stream"}, headers...)...)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r.t.Fatalf("stream %s: status %d, body %s", query, resp.StatusCode, b)
	}
	recs := sseReader(resp.Body)
	rec := nextRecord(r.t, recs, "hello")
	var h helloFields
	if rec.event != "hello" || json.Unmarshal([]byte(rec.data), &h) != nil || h.Type != "hello" || h.Epoch == "" {
		resp.Body.Close()
		r.t.Fatalf("first record %+v, want event hello with the hello frame and its epoch", rec)
	}
	return recs, h, func() { resp.Body.Close() }
}

type helloFields struct {
	Type    string `json:"type"`
	LastSeq int64  `json:"last_seq"`
	Epoch   string `json:"epoch"`
	Role    string `json:"role"`
}

// TestEventsStreamHelloRole: a stream's hello names the token's role, as the socket's
// hello does: "driver" for a driver token, "observer" for an observer token.
func TestEventsStreamHelloRole(t *testing.T) {
	t.Parallel()
	r := newRig(t, delivery.Config{}, Events{})
	observer, err := r.tokens.CreateRole(context.Background(), "a1", 0, auth.RoleObserver)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, token, role string }{
		{"driver", r.token, "driver"},
		{"observer", observer, "observer"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, h, done := r.streamHello(ctx, tt.token, "from_seq=0")
			done()
			if h.Role != tt.role {
				t.Fatalf("hello names role %q, want %q", h.Role, tt.role)
			}
		})
	}
}

// endOf reads the stream's records to its end: the events before its error record,
// the error frame, and whether the stream ended right after it.
func endOf(t *testing.T, recs <-chan sse, what string) (seqs []string, frame struct{ Type, Code, Message string }) {
	t.Helper()
	for {
		rec := nextRecord(t, recs, what)
		if rec.event == "" {
			seqs = append(seqs, rec.id)
			continue
		}
		if rec.event != "error" || json.Unmarshal([]byte(rec.data), &frame) != nil || frame.Type != "error" {
			t.Fatalf("record %+v, want the events, then event error with an error frame", rec)
		}
		break
	}
	select {
	case rec, ok := <-recs:
		if ok {
			t.Fatalf("record %+v after the error, want the stream's end", rec)
		}
	case <-time.After(hang.Bound()):
		t.Fatal("the stream did not end after its error record")
	}
	return seqs, frame
}

// TestEventsStreamEndsOnReset: a stream whose log is reset or deleted while it is
// open is told as a socket is, and ends: after a reset "event: error" with
// {"type":"error","code":"internal","message":delivery.ResetMessage}, and a reconnect
// — with Last-Event-ID, as EventSource does — gets a hello with the new epoch; after a
// delete the error is unauthorized, and a reconnect is refused 401. A reset is found
// whether the new log is shorter than what the stream sent (its tip went back) or
// already longer (its events name the new epoch), and a delete by the log's absence.
// The peeks are an hour apart: the bell rung after the change makes the one peek.
func TestEventsStreamEndsOnReset(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		delete    bool
		newEvents int // appended to the new log before the peek
		code, msg string
	}{
		{"reset, new log shorter", false, 0, "internal", delivery.ResetMessage},
		{"reset, new log longer", false, 6, "internal", delivery.ResetMessage},
		{"delete", true, 0, "unauthorized", "missing, invalid or revoked token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, delivery.Config{}, Events{FirstPeek: time.Hour, MaxPeek: time.Hour})
			r.append(3) // tip 3
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			recs, h, done := r.streamHello(ctx, r.token, "from_seq=0")
			defer done()
			expectSeqs(t, recs, 0, 3)

			ops := r.sessions()
			var epoch string
			var err error
			if tt.delete {
				_, err = ops.Delete(ctx, "a1")
			} else {
				epoch, err = ops.Reset(ctx, "a1")
			}
			if err != nil {
				t.Fatal(err)
			}
			// The new log's events, appended as the agent's are: fenced by the epoch,
			// which they name.
			for range tt.newEvents {
				if _, err := r.log.AppendIn(ctx, "a1", sessionlog.Fence{Epoch: epoch}, "test/event", map[string]string{"x": "new"}, ""); err != nil {
					t.Fatal(err)
				}
			}
			r.s.Bell().Ring("a1")
			seqs, f := endOf(t, recs, "the reset's error record")
			if len(seqs) != 0 || f.Code != tt.code || f.Message != tt.msg {
				t.Fatalf("after the change: events %v, then error %+v; want no event, then %s %q", seqs, f, tt.code, tt.msg)
			}

			resp := r.get(ctx, "from_seq=0", "Accept", "text/event-stream", "Last-Event-ID", "3")
			if tt.delete {
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					t.Fatalf("reconnect after the delete: status %d, want 401", resp.StatusCode)
				}
				return
			}
			resp.Body.Close()
			_, h2, done2 := r.streamHello(ctx, r.token, "from_seq=0", "Last-Event-ID", "3")
			done2()
			if h2.Epoch != epoch || h2.Epoch == h.Epoch || h2.LastSeq != int64(tt.newEvents) {
				t.Fatalf("hello after the reset: epoch %q last_seq %d; want the reset's epoch %q (not %q) and last_seq %d", h2.Epoch, h2.LastSeq, epoch, h.Epoch, tt.newEvents)
			}
		})
	}
}

// TestEventsLongPollOnReset: a long-poll waiting at the tip when the log is reset
// answers at once with the new log's page — its epoch the new one, so the reader
// starts over from 0 — and one waiting when the session is deleted answers 401
// unauthorized, as the socket is told. The peeks are an hour apart: the bell rung
// after the change makes the one peek.
func TestEventsLongPollOnReset(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		delete bool
	}{
		{"reset", false},
		{"delete", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, delivery.Config{}, Events{FirstPeek: time.Hour, MaxPeek: time.Hour})
			r.append(3)
			old, err := r.log.Epoch(context.Background(), "a1")
			if err != nil {
				t.Fatal(err)
			}
			// The change comes after the long-poll's page found nothing and before it
			// waits: its one peek, at the ring, finds the log changed.
			ctx, cancel := context.WithTimeout(context.Background(), hang.Bound())
			defer cancel()
			var epoch string
			changed := make(chan error, 1)
			change := func(from int64) {
				if from != 4 {
					changed <- fmt.Errorf("the long-poll's page read from %d, want 4", from)
					return
				}
				var err error
				if tt.delete {
					_, err = r.sessions().Delete(ctx, "a1")
				} else {
					epoch, err = r.sessions().Reset(ctx, "a1")
				}
				r.s.Bell().Ring("a1")
				changed <- err
			}
			var once sync.Once
			r.spy.afterPage = func(from int64) { once.Do(func() { change(from) }) }
			type answer struct {
				status int
				body   []byte
			}
			answers := make(chan answer, 1)
			go func() {
				resp := r.get(ctx, "from_seq=4&wait=20", "Accept", "application/json")
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				answers <- answer{resp.StatusCode, b}
			}()
			select {
			case err := <-changed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(hang.Bound()):
				t.Fatal("the long-poll's first read never came")
			}
			var a answer
			select {
			case a = <-answers:
			case <-time.After(hang.Bound()):
				t.Fatal("the long-poll did not answer after the change")
			}
			if tt.delete {
				var e struct{ Type, Code string }
				if a.status != http.StatusUnauthorized || json.Unmarshal(a.body, &e) != nil || e.Code != "unauthorized" {
					t.Fatalf("long-poll across a delete: status %d body %s; want 401 unauthorized", a.status, a.body)
				}
				return
			}
			var p EventsPage
			if a.status != 200 || json.Unmarshal(a.body, &p) != nil {
				t.Fatalf("long-poll across a reset: status %d body %s", a.status, a.body)
			}
			if p.Epoch != epoch || p.Epoch == old || len(p.Events) != 0 || p.LastSeq != 0 {
				t.Fatalf("long-poll across a reset answered %s; want the new epoch %q (not %q), no event, last_seq 0", a.body, epoch, old)
			}
			if p.ReplayTruncated == nil || p.ReplayTruncated.RequestedFromSeq != 4 || p.ReplayTruncated.FromSeq != 1 {
				t.Fatalf("long-poll across a reset: replay_truncated %+v, want requested 4 from 1 (past the new log's tip)", p.ReplayTruncated)
			}
		})
	}
}

// TestEventsStreamEndsOnRevoke: an open stream whose token is revoked ends with
// unauthorized at its next token check (one per ping interval), as a socket is closed;
// a stream whose token stays current is not ended by the checks.
func TestEventsStreamEndsOnRevoke(t *testing.T) {
	t.Parallel()
	r := newRig(t, delivery.Config{}, Events{Ping: 50 * time.Millisecond, FirstPeek: 20 * time.Millisecond, MaxPeek: 40 * time.Millisecond})
	observer, err := r.tokens.CreateRole(context.Background(), "a1", 0, auth.RoleObserver)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recs, _, done := r.streamHello(ctx, observer, "from_seq=0")
	defer done()
	expectSeqs(t, recs, 0, 0)
	// Several ping intervals, each with its token check, and an event after them.
	for pings := 0; pings < 3; {
		select {
		case rec, ok := <-recs:
			if !ok || !rec.comment {
				t.Fatalf("record %+v (open %v) on an idle stream, want comment lines", rec, ok)
			}
			pings++
		case <-time.After(hang.Bound()):
			t.Fatal("no comment line on an idle stream")
		}
	}
	r.append(1)
	expectSeqs(t, recs, 1, 1)

	if err := r.tokens.Revoke(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	seqs, f := endOf(t, recs, "the revocation's error record")
	if len(seqs) != 0 || f.Code != "unauthorized" {
		t.Fatalf("after the revocation: events %v, then error %+v; want no event, then unauthorized", seqs, f)
	}
}
