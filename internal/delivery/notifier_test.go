package delivery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// TestFlushPerInvocation: an invocation's flush waits for the sends of the events it
// appended and for no other. Invocation A's send is held mid-post; invocation B's
// flush, on another session, returns meanwhile — with B's own event posted — and A's
// returns only once its send is let go. In one process that serves both routes, this is
// the message route's frame not held up by the runner's turn.
func TestFlushPerInvocation(t *testing.T) {
	t.Parallel()
	const wait = 30 * time.Second // bounds a failing run only
	log, records, socket := &memLog{}, newMemRecords(), &memSocket{}
	log.append("any", 1) // memLog serves every session the same seq 0
	cfg := Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := newDeliverer(cfg, log, records, memSlots{}, socket, nil)
	for agent, conn := range map[string]string{"a": "ca", "b": "cb"} {
		records.claim(agent, conn)
		if err := d.Subscribe(context.Background(), agent, conn, 0, false); err != nil {
			t.Fatalf("subscribe %s: %v", agent, err)
		}
	}
	held, release := make(chan struct{}), make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	socket.onPost = func(conn string, f frameSeen) {
		if conn == "ca" && f.Type == "note" {
			holdOnce.Do(func() { close(held); <-release })
		}
	}
	n := NewNotifier(d, time.Minute)
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }); n.FlushAll() })
	event := func(session string) (ev sessionlog.Event) {
		log.mu.Lock()
		defer log.mu.Unlock()
		ev = log.evs[0]
		ev.SessionID = session
		return ev
	}

	ctxA, flushA := n.Invocation(context.Background())
	n.OnAppend(ctxA, event("a"))
	select {
	case <-held:
	case <-time.After(wait):
		t.Fatal("A's send never posted its event")
	}
	ctxB, flushB := n.Invocation(context.Background())
	n.OnAppend(ctxB, event("b"))
	aDone, bDone := make(chan struct{}), make(chan struct{})
	go func() { flushA(); close(aDone) }()
	go func() { flushB(); close(bDone) }()
	select {
	case <-bDone:
	case <-time.After(wait):
		t.Fatal("B's flush is still waiting while A's send is held: it waits for another invocation's send")
	}
	if got, want := socket.seen(t, "cb"), []string{"hello", "0"}; !slices.Equal(got, want) {
		t.Errorf("B's connection got %v when B's flush returned, want %v", got, want)
	}
	select {
	case <-aDone:
		t.Fatal("A's flush returned while A's send is held")
	default:
	}
	releaseOnce.Do(func() { close(release) })
	select {
	case <-aDone:
	case <-time.After(wait):
		t.Fatal("A's flush did not return once its send was let go")
	}
	if got, want := socket.seen(t, "ca"), []string{"hello", "0"}; !slices.Equal(got, want) {
		t.Errorf("A's connection got %v when A's flush returned, want %v", got, want)
	}
}

// TestObserversPostAfterTheDriver: on the fast path an event's observer posts begin only
// once the driver's post of it has returned, so that observers never compete with the
// driver for its own event (the observers phase of cmd/bench measures what that is
// for); with the driver not subscribed they still get every event, once the driver's
// send ends; either way an invocation's flush returns only once every observer has the
// invocation's event.
func TestObserversPostAfterTheDriver(t *testing.T) {
	t.Parallel()
	cfg := Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	observers := []string{"co1", "co2", "co3"}
	for _, driverSubscribed := range []bool{true, false} {
		log, records, socket := &memLog{}, newMemRecords(), &memSocket{}
		log.append("a", 1)
		d := newDeliverer(cfg, log, records, memSlots{}, socket, nil)
		records.claim("a", "cd")
		if driverSubscribed {
			if err := d.Subscribe(context.Background(), "a", "cd", 0, false); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range observers {
			records.observe("a", c, "h-"+c, 0)
			if err := d.Subscribe(context.Background(), connections.ObserverSeat("a", c), c, 0, false); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		driverPosted := map[int64]bool{}
		var early []string
		socket.onPost = func(conn string, f frameSeen) {
			if f.Type != "note" {
				return
			}
			if conn == "cd" {
				// The post is under way: an observer's post of the same event that
				// competed with it would come now.
				time.Sleep(time.Millisecond)
				mu.Lock()
				driverPosted[f.Seq] = true
				mu.Unlock()
				return
			}
			mu.Lock()
			if driverSubscribed && !driverPosted[f.Seq] {
				early = append(early, fmt.Sprintf("%s got %d", conn, f.Seq))
			}
			mu.Unlock()
		}
		n := NewNotifier(d, time.Minute)
		event := func(seq int64) sessionlog.Event {
			log.mu.Lock()
			defer log.mu.Unlock()
			return log.evs[seq]
		}
		// The first event's send reads the observer index into the fast path's cache;
		// from the next event on, each is queued for the observers too.
		n.OnAppend(context.Background(), event(0))
		n.FlushAll()
		const events = 20
		for seq := int64(1); seq <= events; seq++ {
			log.append("a", 1)
			ctx, flush := n.Invocation(context.Background())
			n.OnAppend(ctx, event(seq))
			flush()
			for _, c := range observers {
				if got := socket.seen(t, c); !slices.Contains(got, fmt.Sprint(seq)) {
					t.Fatalf("driver subscribed %v: observer %s has %v when the flush of event %d returned", driverSubscribed, c, got, seq)
				}
			}
			if got := socket.seen(t, "cd"); driverSubscribed != slices.Contains(got, fmt.Sprint(seq)) {
				t.Fatalf("driver subscribed %v: the driver has %v after event %d", driverSubscribed, got, seq)
			}
		}
		n.FlushAll()
		mu.Lock()
		if len(early) > 0 {
			t.Errorf("observer posts begun before the driver's post of the same event returned: %v", early)
		}
		mu.Unlock()
	}
}
