package delivery

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/invoke"
)

// kickLog records the deliver invocations asked for; with err set, it refuses them all
// (Lambda unreachable) and records none.
type kickLog struct {
	mu    sync.Mutex
	kicks []Kick
	err   error
}

func (k *kickLog) Invoke(_ context.Context, in *invoke.Input) (*invoke.Output, error) {
	var kick Kick
	if err := json.Unmarshal(in.Payload, &kick); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return nil, k.err
	}
	k.kicks = append(k.kicks, kick)
	return &invoke.Output{StatusCode: 202}, nil
}

// TestBudgetedReplayHandedOver: a sender with a time budget (a subscribe's message
// function, the stream consumer, the fast path) that owes more than one replay page
// hands the replay to a deliver invocation before reading anything; one page it sends
// itself, as does a sender without a budget whatever the replay.
func TestBudgetedReplayHandedOver(t *testing.T) {
	t.Parallel()
	const page = 4
	for _, tc := range []struct {
		name     string
		events   int
		budget   bool
		wantSent int // events posted by this sender
		wantKick bool
	}{
		{"one page, budget", page, true, page, false},
		{"two pages, budget", page + 1, true, 0, true},
		{"two pages, no budget", page + 1, false, page + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log, socket, records, kicks := &memLog{}, &memSocket{}, newMemRecords(), &kickLog{}
			log.append("a", tc.events)
			records.claim("a", "c1")
			cfg := Config{ReplayPage: page, DeliverFunction: "deliver", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			d := newDeliverer(cfg, log, records, memSlots{}, socket, kicks)
			subscribe(t, d, 0)
			w := wake{}
			if tc.budget {
				w.stopAt = time.Now().Add(time.Minute)
			}
			pump(t, d, nil, w)
			want := append([]string{"hello"}, seqs(0, int64(tc.wantSent)-1)...)
			if got := socket.seen(t, "c1"); !slices.Equal(got, want) {
				t.Errorf("frames = %v; want %v", got, want)
			}
			if tc.wantKick && log.reads != 0 {
				t.Errorf("%d log reads before the handover; want none", log.reads)
			}
			wantKicks := []Kick(nil)
			if tc.wantKick {
				wantKicks = []Kick{{Kind: KickPump, AgentID: "a"}}
			}
			if !slices.Equal(kicks.kicks, wantKicks) {
				t.Errorf("kicks = %+v; want %+v", kicks.kicks, wantKicks)
			}
			o, _ := records.Owner(context.Background(), "a")
			if o.Lease != "" || o.Next != int64(tc.wantSent) {
				t.Errorf("record: next %d, lease %q; want next %d, let go", o.Next, o.Lease, tc.wantSent)
			}
		})
	}
}

// writesRecords is memRecords that notes the cursor of every Checkpoint.
type writesRecords struct {
	*memRecords
	mu      sync.Mutex
	written []int64
}

func (w *writesRecords) Checkpoint(ctx context.Context, o connections.Owner, holder string, p connections.Progress, ttl time.Duration) (connections.Owner, error) {
	w.mu.Lock()
	w.written = append(w.written, p.Next)
	w.mu.Unlock()
	return w.memRecords.Checkpoint(ctx, o, holder, p, ttl)
}

// TestReplayCursorAtPageEnds: a replay whose pages fit within CheckpointEvery writes
// its cursor at page ends only — before the next page's read, so that no write waits
// behind a read — and at most once a page; the release records the rest.
func TestReplayCursorAtPageEnds(t *testing.T) {
	t.Parallel()
	const page, pages = 4, 4
	log, socket := &memLog{}, &memSocket{}
	log.append("a", page*pages)
	records := &writesRecords{memRecords: newMemRecords()}
	records.claim("a", "c1")
	cfg := Config{ReplayPage: page, CheckpointEvery: 2 * page, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := newDeliverer(cfg, log, records, memSlots{}, socket, nil)
	subscribe(t, d, 0)
	pump(t, d, nil, wake{})
	if got, want := socket.seen(t, "c1"), append([]string{"hello"}, seqs(0, page*pages-1)...); !slices.Equal(got, want) {
		t.Fatalf("frames = %v; want %v", got, want)
	}
	var replay []int64 // the writes after hello's (next 0)
	for _, next := range records.written {
		if next > 0 {
			replay = append(replay, next)
		}
	}
	if len(replay) == 0 || len(replay) > pages-1 {
		t.Errorf("%d cursor writes during the replay (%v); want 1 to %d, one per page end at most", len(replay), replay, pages-1)
	}
	for _, next := range replay {
		if next%page != 0 {
			t.Errorf("a cursor write recorded next %d, inside a page; want page ends only (%v)", next, replay)
		}
	}
	if o, _ := records.Owner(context.Background(), "a"); o.Next != page*pages || o.Lease != "" {
		t.Errorf("record: next %d, lease %q; want next %d, let go", o.Next, o.Lease, page*pages)
	}
}
