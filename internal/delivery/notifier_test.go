package delivery

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

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
