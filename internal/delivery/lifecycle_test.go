package delivery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/connections"
)

// TestLifecycleTransitions checks the sender's state machine itself: every state ×
// every event leads to the next state written here, or is refused with errTransition
// and leaves the state as it was. The table is written out again on purpose: a change
// of lifecycle shows here as a change of this test.
func TestLifecycleTransitions(t *testing.T) {
	t.Parallel()
	held := func(m map[senderEvent]senderState) map[senderEvent]senderState {
		m[evLeaseLost], m[evHandOver], m[evAbandon] = stateLost, stateHandedOver, stateAbandoned
		return m
	}
	want := map[senderState]map[senderEvent]senderState{
		stateGreeting: held(map[senderEvent]senderState{
			evPost: stateGreeting, evResubscribe: stateGreeting, evHelloPosted: stateSending,
		}),
		stateSending: held(map[senderEvent]senderState{
			evPost: stateSending, evRound: stateSending, evResubscribe: stateResubscribed,
			evLinger: stateLingering, evRelease: stateReleasing, evDisown: stateDisowned, evClose: stateClosed,
		}),
		stateResubscribed: held(map[senderEvent]senderState{
			evPost: stateResubscribed, evRound: stateSending, evResubscribe: stateResubscribed,
			evDisown: stateDisowned, evClose: stateClosed,
		}),
		stateLingering: held(map[senderEvent]senderState{evMore: stateSending, evQuiet: stateReleasing}),
		stateReleasing: held(map[senderEvent]senderState{
			evResubscribe: stateResubscribed, evLookAgain: stateSending, evLetGo: stateLetGo,
		}),
		stateDisowned: {evClose: stateClosed},
		// Past the lease nothing is accepted: no post, no write, no way back.
		stateLetGo: {}, stateLost: {}, stateHandedOver: {}, stateClosed: {}, stateAbandoned: {},
	}
	holding := map[senderState]bool{stateGreeting: true, stateSending: true, stateResubscribed: true, stateLingering: true, stateReleasing: true}
	for st := senderState(0); st < numStates; st++ {
		if strings.HasPrefix(st.String(), "state(") {
			t.Errorf("state %d has no name", st)
		}
		if st.holds() != holding[st] {
			t.Errorf("%s.holds() = %v, want %v", st, st.holds(), holding[st])
		}
		accepts, ok := want[st]
		if !ok {
			t.Errorf("state %s is not in this test's table", st)
			continue
		}
		for e := senderEvent(0); e < numEvents; e++ {
			t.Run(fmt.Sprintf("%s/%s", st, e), func(t *testing.T) {
				next, err := transition(st, e)
				w, ok := accepts[e]
				switch {
				case ok && (err != nil || next != w):
					t.Errorf("%s on %s = %s, %v; want %s", st, e, next, err, w)
				case !ok && (!errors.Is(err, errTransition) || next != st):
					t.Errorf("%s on %s = %s, %v; want refused (errTransition), the state kept", st, e, next, err)
				}
			})
		}
	}
	for e := senderEvent(0); e < numEvents; e++ {
		if strings.HasPrefix(e.String(), "event(") {
			t.Errorf("event %d has no name", e)
		}
	}
	if _, err := transition(numStates, evPost); !errors.Is(err, errTransition) {
		t.Errorf("an unknown state accepted post: %v", err)
	}
}

// TestFireIsTheOnlyChange: fire moves the sender to the table's next state, and a
// refused event leaves it where it was.
func TestFireIsTheOnlyChange(t *testing.T) {
	t.Parallel()
	s := &sender{ctx: context.Background(), lg: slog.New(slog.NewTextHandler(io.Discard, nil)), st: stateGreeting}
	for _, step := range []struct {
		e    senderEvent
		want senderState
		ok   bool
	}{
		{evRound, stateGreeting, false}, // no round before hello
		{evHelloPosted, stateSending, true},
		{evHelloPosted, stateSending, false}, // hello goes once
		{evResubscribe, stateResubscribed, true},
		{evLinger, stateResubscribed, false}, // a resubscribed sender reads again first
		{evRound, stateSending, true},
		{evLinger, stateLingering, true},
		{evPost, stateLingering, false},
		{evQuiet, stateReleasing, true},
		{evLookAgain, stateSending, true},
		{evRelease, stateReleasing, true},
		{evLetGo, stateLetGo, true},
		{evPost, stateLetGo, false},
		{evAbandon, stateLetGo, false}, // a lease let go is not abandoned again
	} {
		err := s.fire(step.e)
		if (err == nil) != step.ok || s.st != step.want {
			t.Fatalf("fire(%s) = %v, state %s; want accepted %v, state %s", step.e, err, s.st, step.ok, step.want)
		}
	}
}

// TestReleasedSenderPostsNothing: a sender whose lease is no longer its own — let go
// after sending everything, lost to another holder, or in any other state past the
// lease — posts no frame of its own again, whatever step is asked of it.
func TestReleasedSenderPostsNothing(t *testing.T) {
	t.Parallel()
	const agent, conn = "a", "c1"
	setup := func(t *testing.T) (*Deliverer, *memLog, *memRecords, *memSocket, *sender) {
		t.Helper()
		log, records, socket := &memLog{}, newMemRecords(), &memSocket{}
		log.append(agent, 3)
		records.claim(agent, conn)
		cfg := Config{CheckpointEvery: 4, ReplayPage: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		d := newDeliverer(cfg, log, records, memSlots{}, socket, nil)
		subscribe(t, d, 0)
		holder := connections.NewHolder(connections.HolderOnce)
		r, err := records.Acquire(context.Background(), agent, holder, time.Minute, -1)
		if err != nil || r.Outcome != connections.Acquired {
			t.Fatalf("acquire = %+v, %v; want the lease", r, err)
		}
		return d, log, records, socket, d.newSender(context.Background(), r.Owner, holder.ID, nil, wake{})
	}
	// tryPosting asks s for every step that posts a frame of its own and wants each
	// refused, with no frame posted.
	tryPosting := func(t *testing.T, s *sender, socket *memSocket, log *memLog) {
		t.Helper()
		before := socket.count(conn)
		evs, err := log.Read(context.Background(), agent, 0, 3)
		if err != nil || len(evs) != 3 {
			t.Fatalf("read the log: %d events, %v", len(evs), err)
		}
		from := s.st
		for name, step := range map[string]func() error{
			"post":          func() error { return s.post([]byte(`{"type":"note","seq":0}`)) },
			"postWatched":   func() error { return s.postWatched([]byte(`{"type":"note","seq":0}`)) },
			"postEvents":    func() error { return s.postEvents(evs) },
			"postTruncated": func() error { s.p.Truncated = true; return s.postTruncated() },
		} {
			if err := step(); !errors.Is(err, errTransition) {
				t.Errorf("%s in state %s = %v; want refused (errTransition)", name, from, err)
			}
			if s.st != from {
				t.Errorf("%s moved the state from %s to %s", name, from, s.st)
			}
		}
		if n := socket.count(conn); n != before {
			t.Errorf("state %s: %d frames posted after the lease went (%v)", from, n-before, socket.seen(t, conn)[before:])
		}
	}

	t.Run("let go", func(t *testing.T) {
		t.Parallel()
		_, log, records, socket, s := setup(t)
		if err := s.run(); err != nil {
			t.Fatalf("run: %v", err)
		}
		if s.st != stateLetGo {
			t.Fatalf("state after run = %s, want %s", s.st, stateLetGo)
		}
		if got := socket.seen(t, conn); strings.Join(got, " ") != "hello 0 1 2" {
			t.Fatalf("frames = %v, want hello 0 1 2", got)
		}
		if o, _ := records.Owner(context.Background(), agent); o.Lease != "" || o.Next != 3 {
			t.Fatalf("record after run = %+v, want the lease let go at cursor 3", o)
		}
		tryPosting(t, s, socket, log)
	})
	t.Run("lost", func(t *testing.T) {
		t.Parallel()
		_, log, records, socket, s := setup(t)
		// Another holder took the lease; this sender's own view says it runs out now, so
		// its first write (before hello) finds it gone.
		o, _ := records.Owner(context.Background(), agent)
		o.Lease, o.LeaseUntil = "xother", time.Now().Add(time.Minute)
		records.set(o)
		s.o.LeaseUntil = time.Now()
		if err := s.run(); !errors.Is(err, connections.ErrLeaseLost) {
			t.Fatalf("run = %v, want ErrLeaseLost", err)
		}
		if s.st != stateLost {
			t.Fatalf("state after run = %s, want %s", s.st, stateLost)
		}
		if n := socket.count(conn); n != 0 {
			t.Fatalf("%d frames posted on a lease lost before hello", n)
		}
		tryPosting(t, s, socket, log)
	})
	for st := stateLetGo; st < numStates; st++ {
		t.Run(st.String(), func(t *testing.T) {
			t.Parallel()
			_, log, _, socket, s := setup(t)
			s.st = st // a test's way to a state: the runs above reach two of them
			tryPosting(t, s, socket, log)
		})
	}
}
