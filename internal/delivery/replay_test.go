package delivery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/connections"
)

// gateFunc is an Observer and Gate that runs fn at every gate point.
type gateFunc func(point, agentID string)

func (gateFunc) ReplayRead(bool)              {}
func (g gateFunc) Wait(point, agentID string) { g(point, agentID) }

// countedSlots are n replay slots that remember who holds each, so a test can tell
// that every slot taken was given back and that no two holders ever shared one.
type countedSlots struct {
	mu      sync.Mutex
	held    map[int]string
	n       int
	taken   int
	doubled int
}

func (s *countedSlots) Groups() int { return 1 }

func (s *countedSlots) TryAcquire(_ context.Context, holder string, _ int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.n {
		if _, busy := s.held[i]; !busy {
			s.held[i] = holder
			s.taken++
			return i, nil
		}
	}
	return -1, nil
}

func (s *countedSlots) Release(_ context.Context, holder string, i int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[i] != holder {
		s.doubled++ // given back by one that does not hold it
		return nil
	}
	delete(s.held, i)
	return nil
}

// TestReadAheadNeverPostedStale: while a sender posts a replay page, the next page is
// read ahead; a resubscribe or a lost lease that the sender learns of in the meantime
// means that page is never posted. The page read ahead is finished (the gate signals
// it) before the posts of the page before it end; then, right after the last of those
// posts, the test resubscribes or takes the lease away. CheckpointEvery 1 makes the
// sender write its cursor before each post and before waiting for a page, so it learns
// of either at that write, before it takes the page.
func TestReadAheadNeverPostedStale(t *testing.T) {
	t.Parallel()
	const agent, conn = "a", "c1"
	type testCase struct {
		name string
		// act runs right after seq at (of the first page, 0…2) is posted, with the second
		// page (3…5) read ahead.
		act func(t *testing.T, d *Deliverer, records *memRecords)
		at  int64
		// from is the seq the last subscription starts at; stolen: the lease is lost.
		from   int64
		stolen bool
	}
	tests := []testCase{
		{name: "resubscribe back into the first page", from: 1, act: resubscribeFrom(1)},
		{name: "resubscribe past the page read ahead", from: 7, act: resubscribeFrom(7)},
		{name: "resubscribe at the page read ahead", from: 3, act: resubscribeFrom(3)},
		{name: "lease lost", stolen: true, act: func(t *testing.T, _ *Deliverer, records *memRecords) {
			o, err := records.Owner(context.Background(), agent)
			if err != nil {
				t.Errorf("owner: %v", err)
				return
			}
			o.Lease, o.LeaseKind, o.LeaseUntil = "xthief", connections.HolderOnce, time.Now().Add(time.Minute)
			records.set(o)
		}},
	}
	var all []testCase
	for _, tc := range tests {
		// After the first page's last post the sender learns of the change while it
		// waits for the page read ahead; after its second-last, at the next post, and
		// the page read ahead is still pending at its next read.
		for _, at := range []int64{2, 1} {
			c := tc
			c.at, c.name = at, fmt.Sprintf("%s, after seq %d", tc.name, at)
			all = append(all, c)
		}
	}
	for _, tc := range all {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log, records, socket := &memLog{}, newMemRecords(), &memSocket{}
			log.append(agent, 9)
			records.claim(agent, conn)
			slots := &countedSlots{n: 1, held: map[int]string{}}
			readAhead := make(chan struct{})
			var reads atomic.Int32
			gate := gateFunc(func(point, _ string) {
				if point == GateReplayRead && reads.Add(1) == 2 { // the second page, read ahead
					close(readAhead)
				}
			})
			cfg := Config{CheckpointEvery: 1, ReplayPage: 3, Observer: gate, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			d := newDeliverer(cfg, log, records, slots, socket, nil)
			subscribe(t, d, 0)
			var once sync.Once
			mark := 0
			socket.onPost = func(_ string, f frameSeen) {
				if f.Type == "note" && f.Seq == tc.at {
					once.Do(func() {
						<-readAhead
						mark = socket.count(conn)
						tc.act(t, d, records)
					})
				}
			}
			pump(t, d, nil, wake{})

			got := socket.seen(t, conn)
			if want := append([]string{"hello"}, seqs(0, tc.at)...); !slices.Equal(got[:min(len(got), mark)], want) || mark != len(want) {
				t.Fatalf("frames before the change = %v; want %v", got[:min(len(got), mark)], want)
			}
			if tc.stolen {
				if len(got) != mark {
					t.Fatalf("frames after the lease was lost: %v", got[mark:])
				}
			} else if want := seqs(tc.from, 8); !slices.Equal(got[mark:], want) {
				t.Fatalf("frames after resubscribing from %d = %v; want exactly %v", tc.from, got[mark:], want)
			}
			slots.mu.Lock()
			defer slots.mu.Unlock()
			if len(slots.held) != 0 || slots.doubled != 0 {
				t.Fatalf("after the sender: slots held %v, %d given back by a non-holder; want none", slots.held, slots.doubled)
			}
		})
	}
}

// resubscribeFrom resubscribes the test connection from seq from.
func resubscribeFrom(from int64) func(*testing.T, *Deliverer, *memRecords) {
	return func(t *testing.T, d *Deliverer, _ *memRecords) { subscribe(t, d, from) }
}

// TestReadAheadSlots: a replay of several pages to a reader that never keeps up reads
// every page under a slot, one read at a time per sender, and gives every slot back;
// two senders over one slot never read at once.
func TestReadAheadSlots(t *testing.T) {
	t.Parallel()
	log, records, socket := &memLog{}, newMemRecords(), &memSocket{}
	agents := []string{"a", "b"}
	for _, a := range agents {
		records.claim(a, "c-"+a)
	}
	log.append("a", 50)
	slots := &countedSlots{n: 1, held: map[int]string{}}
	var now, peak atomic.Int32
	obs := observerFunc(func(start bool) {
		if !start {
			now.Add(-1)
			return
		}
		n := now.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
	})
	cfg := Config{CheckpointEvery: 8, ReplayPage: 4, Observer: obs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := newDeliverer(cfg, log, records, slots, socket, nil)
	var wg sync.WaitGroup
	for _, a := range agents {
		if err := d.Subscribe(context.Background(), a, "c-"+a, 0, false); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Bounded: a slot never given back would leave the other sender waiting.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := d.pump(ctx, a, nil, wake{}); err != nil {
				t.Errorf("pump %s: %v", a, err)
			}
		}()
	}
	wg.Wait()
	for _, a := range agents {
		if got, want := socket.seen(t, "c-"+a), append([]string{"hello"}, seqs(0, 49)...); !slices.Equal(got, want) {
			t.Errorf("%s got %v\nwant %v", a, got, want)
		}
	}
	slots.mu.Lock()
	defer slots.mu.Unlock()
	if p := peak.Load(); p > 1 {
		t.Errorf("%d replay reads at once over 1 slot", p)
	}
	if len(slots.held) != 0 || slots.doubled != 0 {
		t.Errorf("slots held after the replays %v, %d given back by a non-holder; want none", slots.held, slots.doubled)
	}
	if slots.taken == 0 {
		t.Errorf("no slot taken: the replay reads were not gated")
	}
	t.Logf("%d slot takes for %d page reads", slots.taken, 2*13)
}

// observerFunc is an Observer.
type observerFunc func(start bool)

func (o observerFunc) ReplayRead(start bool) { o(start) }
