package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// heldRecords is memRecords whose first cursor write with events in it (a Checkpoint
// past seq 0) is held until the test lets it answer: a write in flight for as long as
// the test wants, as a slow DynamoDB would have it.
type heldRecords struct {
	*memRecords
	once    sync.Once
	began   chan connections.Progress // the held write began, with this progress
	release chan error                // the held write's answer: nil, or the lease lost
}

func (h *heldRecords) Checkpoint(ctx context.Context, o connections.Owner, holder string, p connections.Progress, ttl time.Duration) (connections.Owner, error) {
	held := false
	if p.Next > 0 {
		h.once.Do(func() { held = true })
	}
	if !held {
		return h.memRecords.Checkpoint(ctx, o, holder, p, ttl)
	}
	h.began <- p
	if err := <-h.release; err != nil {
		// The lease was taken over while the write was in flight.
		h.mu.Lock()
		cur := h.owners[o.AgentID]
		cur.Lease, cur.LeaseUntil = "xother", time.Now().Add(time.Minute)
		h.owners[o.AgentID] = cur
		h.mu.Unlock()
	}
	return h.memRecords.Checkpoint(ctx, o, holder, p, ttl)
}

// TestCursorWritePipelined: the cursor write does not hold up the posts. While a write
// is in flight the sender keeps posting, up to CheckpointEvery events beyond the stored
// cursor and not one more; once the write answers it carries on to the end, or, if the
// write found the lease lost, it posts nothing more.
func TestCursorWritePipelined(t *testing.T) {
	t.Parallel()
	const agent, conn, every, n = "a", "c1", 16, 100
	for _, tc := range []struct {
		name   string
		answer error
		want   []string // every frame the connection gets
	}{
		{"write succeeds", nil, append([]string{"hello"}, seqs(0, n-1)...)},
		// The held write began at seq every/4 with the stored cursor at 0: the sender
		// posts seqs 0..every-1 and stops.
		{"lease lost", connections.ErrLeaseLost, append([]string{"hello"}, seqs(0, every-1)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log, socket := &memLog{}, &memSocket{}
			log.append(agent, n)
			records := &heldRecords{memRecords: newMemRecords(), began: make(chan connections.Progress, 1), release: make(chan error)}
			records.claim(agent, conn)
			// The bound: the last frame the sender may post before the held write answers.
			bound := make(chan struct{})
			socket.onPost = func(_ string, f frameSeen) {
				if f.Type == "note" && f.Seq == every-1 {
					close(bound)
				}
			}
			cfg := Config{CheckpointEvery: every, ReplayPage: 1000, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			d := newDeliverer(cfg, log, records, memSlots{}, socket, nil)
			subscribe(t, d, 0)
			done := make(chan error, 1)
			go func() { _, err := d.pump(context.Background(), agent, nil, wake{}); done <- err }()

			p := <-records.began
			if want := int64(every / 4); p.Next != want {
				t.Errorf("the first cursor write recorded next %d; want %d (every CheckpointEvery/4 events)", p.Next, want)
			}
			// Posts go on while the write is held: had the write blocked them, the
			// sender would never reach the bound.
			select {
			case <-bound:
			case <-time.After(hang.Bound()):
				close(records.release) // let the sender finish
				t.Fatalf("%d frames posted, then the posts stopped while the cursor write was in flight; want hello and %d events", socket.count(conn), every)
			}
			if got := socket.count(conn); got != 1+every {
				t.Errorf("%d frames posted with the write in flight; want hello and %d events, the CheckpointEvery bound", got, every)
			}
			records.release <- tc.answer
			if err := <-done; err != nil && !errors.Is(err, connections.ErrLeaseLost) {
				t.Fatalf("pump: %v", err)
			}
			if got := socket.seen(t, conn); !slices.Equal(got, tc.want) {
				t.Fatalf("frames = %v\nwant %v", got, tc.want)
			}
		})
	}
}

// TestCursorBoundWithBatches: a batching client's sender never has more than
// CheckpointEvery events posted beyond the stored cursor, however its batches fall,
// and its batches hold at most CheckpointEvery/2 events.
func TestCursorBoundWithBatches(t *testing.T) {
	t.Parallel()
	const agent, conn, every, n = "a", "c1", 8, 200
	log := &memLog{}
	log.append(agent, n)
	records := newMemRecords()
	records.claim(agent, conn)
	socket := &boundSocket{t: t, records: records, agent: agent}
	cfg := Config{CheckpointEvery: every, ReplayPage: 50, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := newDeliverer(cfg, log, records, memSlots{}, socket, nil)
	ctx := protocol.WithStamp(context.Background(), protocol.Stamp{At: time.Now().UnixMilli()})
	if err := d.Subscribe(ctx, agent, conn, 0, true); err != nil {
		t.Fatal(err)
	}
	pump(t, d, nil, wake{})
	if socket.worst > every {
		t.Errorf("up to %d events posted beyond the stored cursor; want at most CheckpointEvery = %d", socket.worst, every)
	}
	if socket.biggest > every/2 || socket.biggest < 2 {
		t.Errorf("batches of up to %d events; want 2 to CheckpointEvery/2 = %d", socket.biggest, every/2)
	}
	if socket.next != n {
		t.Errorf("events posted up to %d; want all %d, in order", socket.next, n)
	}
	if o, _ := records.Owner(context.Background(), agent); o.Next != n {
		t.Errorf("cursor %d after the replay; want %d", o.Next, n)
	}
}

// boundSocket takes batched frames and notes, at each post, how far the events posted
// run ahead of the stored cursor.
type boundSocket struct {
	t       *testing.T
	records *memRecords
	agent   string

	mu      sync.Mutex
	next    int64 // the seq expected next
	worst   int64 // the most events posted beyond the stored cursor
	biggest int   // the most events in one message
}

func (s *boundSocket) PostToConnection(_ context.Context, in *apigatewaymanagementapi.PostToConnectionInput, _ ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines := bytes.Split(in.Data, []byte("\n"))
	for _, l := range lines {
		var f frameSeen
		if err := json.Unmarshal(l, &f); err != nil {
			s.t.Errorf("frame %s: %v", l, err)
			return nil, err
		}
		if f.Type == "hello" {
			return &apigatewaymanagementapi.PostToConnectionOutput{}, nil
		}
		if f.Seq != s.next {
			s.t.Errorf("seq %d posted; want %d", f.Seq, s.next)
		}
		s.next = f.Seq + 1
	}
	s.biggest = max(s.biggest, len(lines))
	o, _ := s.records.Owner(context.Background(), s.agent)
	s.worst = max(s.worst, s.next-o.Next)
	return &apigatewaymanagementapi.PostToConnectionOutput{}, nil
}

func (s *boundSocket) DeleteConnection(context.Context, *apigatewaymanagementapi.DeleteConnectionInput, ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.DeleteConnectionOutput, error) {
	return &apigatewaymanagementapi.DeleteConnectionOutput{}, nil
}

// countedRecords is memRecords that counts lease attempts.
type countedRecords struct {
	*memRecords
	acquires int
}

func (c *countedRecords) Acquire(ctx context.Context, agentID string, h connections.Holder, ttl time.Duration, upTo int64) (connections.AcquireResult, error) {
	c.mu.Lock()
	c.acquires++
	c.mu.Unlock()
	return c.memRecords.Acquire(ctx, agentID, h, ttl, upTo)
}

// TestPreReadSkipsHeldLease: a wake-up that reads the record first (the stream
// backstop) and finds a live sender behind its events leaves the mark without trying
// the lease — a failed conditional write, 1 write unit, saved — and one that finds the
// lease let go takes it.
func TestPreReadSkipsHeldLease(t *testing.T) {
	t.Parallel()
	const agent, conn = "a", "c1"
	for _, tc := range []struct {
		name         string
		leaseUntil   time.Duration // from now; 0: no lease
		wantAcquires int
		wantPending  bool
		wantFrames   int
	}{
		{"live holder", time.Minute, 0, true, 0},
		{"expired holder", -time.Second, 1, false, 5},
		{"no holder", 0, 1, false, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log, socket := &memLog{}, &memSocket{}
			log.append(agent, 5)
			records := &countedRecords{memRecords: newMemRecords()}
			records.set(connections.Owner{AgentID: agent, ConnID: conn, Sub: 1, HelloSent: true, ReplayEnd: 0})
			if tc.leaseUntil != 0 {
				o, _ := records.Owner(context.Background(), agent)
				o.Lease, o.LeaseKind, o.LeaseUntil = "xother", connections.HolderOnce, time.Now().Add(tc.leaseUntil)
				records.set(o)
			}
			cfg := Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			d := newDeliverer(cfg, log, records, memSlots{}, socket, nil)
			hints, _ := log.Read(context.Background(), agent, 0, 5)
			if _, err := d.pump(context.Background(), agent, hints, wake{preRead: true}); err != nil {
				t.Fatalf("pump: %v", err)
			}
			o, _ := records.Owner(context.Background(), agent)
			if records.acquires != tc.wantAcquires || o.Pending != tc.wantPending || socket.count(conn) != tc.wantFrames {
				t.Errorf("acquires %d, pending %v, frames %d; want %d, %v, %d", records.acquires, o.Pending, socket.count(conn), tc.wantAcquires, tc.wantPending, tc.wantFrames)
			}
		})
	}
}

// TestPreReadMarkWatched: a backstop wake-up that finds a live holder already marked
// and watched writes nothing, whatever the mark's seq (the watcher's last check covers
// its events); one that finds the mark unwatched (left by a fast-path wake-up, which
// does not watch) marks again and looks for itself. With a retried holder, which
// needs no watcher, it writes nothing only if the mark reaches its events.
func TestPreReadMarkWatched(t *testing.T) {
	t.Parallel()
	const agent, conn = "a", "c1"
	for _, tc := range []struct {
		name       string
		watchUntil time.Duration // from now; 0: no watcher
		kind       connections.HolderKind
		pendingTo  int64 // of the mark found; the wake-up's events are seqs 0-4
		wantMarks  int
	}{
		{"watched", time.Minute, connections.HolderOnce, 0, 0},
		{"watched, mark behind the events", time.Minute, connections.HolderOnce, 2, 0},
		{"unwatched", 0, connections.HolderOnce, 0, 1},
		{"retried holder, mark reaching the events", 0, connections.HolderRetried, 5, 0},
		{"retried holder, mark behind the events", 0, connections.HolderRetried, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log := &memLog{}
			log.append(agent, 5)
			records := &markCounter{memRecords: newMemRecords()}
			o := connections.Owner{AgentID: agent, ConnID: conn, Sub: 1, HelloSent: true, Pending: true, PendingTo: tc.pendingTo,
				Lease: "xother", LeaseKind: tc.kind, LeaseUntil: time.Now().Add(time.Minute)}
			if tc.watchUntil != 0 {
				o.WatchUntil = time.Now().Add(tc.watchUntil)
			}
			records.set(o)
			cfg := Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			d := newDeliverer(cfg, log, records, memSlots{}, &memSocket{}, nil)
			hints, _ := log.Read(context.Background(), agent, 0, 5)
			// Not a backstop, so that the unwatched case does not start a watcher.
			if _, err := d.pump(context.Background(), agent, hints, wake{preRead: true}); err != nil {
				t.Fatalf("pump: %v", err)
			}
			if records.marks != tc.wantMarks {
				t.Errorf("%d marks left; want %d", records.marks, tc.wantMarks)
			}
		})
	}
}

// markCounter is memRecords that counts MarkPending calls.
type markCounter struct {
	*memRecords
	marks int
}

func (m *markCounter) MarkPending(ctx context.Context, agentID string, upTo int64) (bool, error) {
	m.marks++
	return m.memRecords.MarkPending(ctx, agentID, upTo)
}

// TestMarkReachesPastGap: a wake-up whose events have a gap (a split or reordered
// stream batch) marks up to its highest event, not the end of the run it could send
// from: a holder past that run must not let go before the events beyond the gap.
func TestMarkReachesPastGap(t *testing.T) {
	t.Parallel()
	const agent, conn = "a", "c1"
	log := &memLog{}
	log.append(agent, 5)
	records := newMemRecords()
	records.set(connections.Owner{AgentID: agent, ConnID: conn, Sub: 1, HelloSent: true,
		Lease: "xother", LeaseKind: connections.HolderOnce, LeaseUntil: time.Now().Add(time.Minute)})
	cfg := Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := newDeliverer(cfg, log, records, memSlots{}, &memSocket{}, nil)
	evs, _ := log.Read(context.Background(), agent, 0, 5)
	if _, err := d.pump(context.Background(), agent, []sessionlog.Event{evs[3], evs[1]}, wake{preRead: true}); err != nil {
		t.Fatalf("pump: %v", err)
	}
	if o, _ := records.Owner(context.Background(), agent); !o.Pending || o.PendingTo != 4 {
		t.Errorf("mark = %v up to %d (exclusive); want up to 4, past the gap at seq 2", o.Pending, o.PendingTo)
	}
}

// TestReleaseAfterAdoptedResubscribe: the cursor write a sender joins before it lets
// the lease go may come back with a resubscribe. The sender then reads from the new
// subscription's cursor; it must not record that cursor as sent and let go.
func TestReleaseAfterAdoptedResubscribe(t *testing.T) {
	t.Parallel()
	const agent, conn = "a", "c1"
	log, socket := &memLog{}, &memSocket{}
	log.append(agent, 1) // seq 0, the replay
	records := &heldRecords{memRecords: newMemRecords(), began: make(chan connections.Progress, 1), release: make(chan error)}
	records.claim(agent, conn)
	cfg := Config{CheckpointEvery: 8, ReplayPage: 1000, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := newDeliverer(cfg, log, records, memSlots{}, socket, nil)
	subscribe(t, d, 0)
	log.append(agent, 3) // seqs 1..3, the live tail: its posts begin a cursor write (held)
	done := make(chan error, 1)
	go func() { _, err := d.pump(context.Background(), agent, nil, wake{}); done <- err }()
	<-records.began
	subscribe(t, d, 0) // while the write is in flight
	records.release <- nil
	if err := <-done; err != nil {
		t.Fatalf("pump: %v", err)
	}
	// The first subscription's frames: the replay and the live posts up to the cursor
	// write (0–2), and seq 3 unless the resubscribe was adopted before the sender
	// posted it — both are right. Then the resubscription from 0, whole.
	got := socket.seen(t, conn)
	served := false
	for _, first := range [][]string{seqs(0, 3), seqs(0, 2)} {
		want := append(append([]string{"hello"}, first...), seqs(0, 3)...)
		served = served || slices.Equal(got, want)
	}
	if !served {
		t.Errorf("frames = %v\nwant hello, 0 1 2 (3), then 0 1 2 3 (the resubscription from 0 served)", got)
	}
	if o, _ := records.Owner(context.Background(), agent); o.Next != 4 || o.Lease != "" {
		t.Errorf("record after the pump: next %d, lease %q; want next 4, let go", o.Next, o.Lease)
	}
}
