package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// stormClient follows one storm client's frames from its reader goroutine.
type stormClient struct {
	agent string
	cl    *wsClient

	mu      sync.Mutex
	last    int64 // the seq that completes the current round
	next    int64
	bad     int // gaps, duplicates, protocol frames out of place
	hello   chan struct{}
	helloed bool
	helloAt time.Time
	subAt   time.Time
	done    chan struct{}
	doneAt  time.Time
}

func (s *stormClient) onFrame(f frame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case f.Type == "hello" && !s.helloed:
		s.helloed, s.helloAt = true, f.At
		close(s.hello)
	case f.Seq == nil:
		s.bad++
	default:
		if *f.Seq != s.next {
			s.bad++
		}
		s.next = *f.Seq + 1
		if *f.Seq == s.last && s.doneAt.IsZero() {
			s.doneAt = f.At
			close(s.done)
		}
	}
}

// rearm expects seq 0..last again.
func (s *stormClient) rearm(last int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.next, s.doneAt, s.done = last, 0, time.Time{}, make(chan struct{})
}

type stormResult struct {
	Clients, EventsEach  int
	Seeded               time.Duration
	AllCaughtUp          time.Duration // first dial → last client's last event
	FromSubscribe        time.Duration // last subscribe sent → last client's last event
	P50, P99             time.Duration // per client: dial → its last event
	HelloP50, HelloMax   time.Duration // per client: dial → hello
	ReplayP50, ReplayMax time.Duration // per client: subscribe sent → its last event
	Floor                time.Duration // same events, read (≤ max_concurrent_replays at once) and posted to the open sockets
	ConnectFloorP50      time.Duration // n connects' store requests alone, at once (connectFloor)
	ConnectFloorMax      time.Duration
	FloorClients         int
	FloorMeasured        time.Duration
	PeakReplays          int
	ReplayReads          int64
	MaxConcurrentReplays int
	Bad                  int
	Cost                 phaseCost
	Breakdown            stormBreakdown // where each client's time went (stormtrace.go)
}

// runStorm seeds N sessions of about 1,000 events each, then N clients connect at
// once, each subscribing from 0 on hello: time until every one has its last event, and
// the most replay reads the delivery Observer saw at once. The floor then sends the same
// events to the same (still open) sockets: per client, one strongly consistent Query of
// its events — at most max_concurrent_replays reads at a time, the same bound — and
// the posts, awaited one by one.
func (b *bench) runStorm(ctx context.Context) error {
	n, each := b.o.stormClients, b.o.stormEvents
	last := int64(each - 1)
	res := stormResult{Clients: n, EventsEach: each, MaxConcurrentReplays: b.st.cfg.MaxConcurrentReplays, Seeded: b.res.storm.Seeded}
	sessions := stormSessions(n)
	tokens := make([]string, n)
	if err := parallel(8, n, func(i int) error {
		var err error
		tokens[i], err = b.st.tokens.Create(ctx, sessions[i])
		return err
	}); err != nil {
		return err
	}
	b.st.settle(ctx)
	b.st.replays.reset()

	clients := make([]*stormClient, n)
	for i := range clients {
		clients[i] = &stormClient{agent: sessions[i], hello: make(chan struct{})}
		clients[i].rearm(last)
	}
	before := b.st.snap()
	b.st.trace.start()
	var subMu sync.Mutex
	var lastSub time.Time
	t0 := time.Now()
	if os.Getenv("BENCH_DUMP") != "" {
		go func() {
			time.Sleep(8 * time.Second)
			f, _ := os.Create(os.Getenv("BENCH_DUMP"))
			_ = pprof.Lookup("goroutine").WriteTo(f, 1)
			f.Close()
		}()
	}
	err := parallel(n, n, func(i int) error {
		c := clients[i]
		cl, err := dialAgent(ctx, b.st.dev.WebSocketURL(), c.agent, tokens[i], c.onFrame)
		if err != nil {
			return err
		}
		c.cl = cl
		select {
		case <-c.hello:
		case <-time.After(2 * time.Minute):
			return fmt.Errorf("%s: no hello", c.agent)
		}
		c.subAt = time.Now()
		// Batched, as the Go client and the web page subscribe.
		if err := cl.send(ctx, subscribeBatched(0)); err != nil {
			return err
		}
		subMu.Lock()
		lastSub = maxTime(lastSub, time.Now())
		subMu.Unlock()
		select {
		case <-c.done:
			return nil
		case <-cl.done:
			return fmt.Errorf("%s: socket ended: %v", c.agent, cl.err)
		case <-time.After(4 * time.Minute):
			return fmt.Errorf("%s: not caught up", c.agent)
		}
	})
	defer func() {
		for _, c := range clients {
			if c.cl != nil {
				c.cl.close()
			}
		}
	}()
	if err != nil {
		return fmt.Errorf("storm: %w", err)
	}
	var lastDone time.Time
	per, hello, replay := make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n)
	for i, c := range clients {
		lastDone = maxTime(lastDone, c.doneAt)
		per[i] = c.doneAt.Sub(t0)
		hello[i] = c.helloAt.Sub(t0)
		replay[i] = c.doneAt.Sub(c.subAt)
		res.Bad += c.bad
	}
	res.HelloP50, res.HelloMax = percentile(hello, 50), percentile(hello, 100)
	res.ReplayP50, res.ReplayMax = percentile(replay, 50), percentile(replay, 100)
	res.AllCaughtUp, res.FromSubscribe = lastDone.Sub(t0), lastDone.Sub(lastSub)
	res.P50, res.P99 = percentile(per, 50), percentile(per, 99)
	b.st.trace.stop()
	res.Breakdown = b.st.trace.breakdown(t0, clients)
	b.st.settle(ctx)
	res.Cost = before.to(b.st.snap())
	res.PeakReplays, res.ReplayReads = b.st.replays.reset()
	b.progress("storm: %d clients caught up in %v (peak %d replay reads at once)", n, res.AllCaughtUp.Round(time.Millisecond), res.PeakReplays)

	// Floor: the same events to the same sockets — to the first k of them, scaled by
	// n/k: like the storm itself, it is bound by throughput (the reads under the bound,
	// the posts), and a full second pass would double the phase.
	k := min(n, max(b.o.stormFloorClients, 1))
	conns := make([]string, k)
	if err := parallel(8, k, func(i int) error {
		o, err := b.st.owners.Owner(ctx, sessions[i])
		conns[i] = o.ConnID
		return err
	}); err != nil {
		return err
	}
	for _, c := range clients[:k] {
		c.rearm(last)
	}
	reader := sessionlog.New(b.floor.db, b.st.cfg.LogTable)
	reads := make(chan struct{}, b.st.cfg.MaxConcurrentReplays)
	t0 = time.Now()
	err = parallel(k, k, func(i int) error {
		reads <- struct{}{}
		evs, err := reader.Read(ctx, sessions[i], 0, each)
		<-reads
		if err != nil {
			return err
		}
		for j := 0; j < len(evs); { // the same batches as delivery's
			data, n, err := delivery.EncodeFrame(evs[j:], true, delivery.DefaultCheckpointEvery/2)
			if err != nil {
				return err
			}
			if _, err := b.floor.posts.PostToConnection(ctx, postInput(conns[i], data)); err != nil {
				return err
			}
			j += n
		}
		select {
		case <-clients[i].done:
			return nil
		case <-time.After(time.Minute):
			return fmt.Errorf("floor: %s did not get its events", sessions[i])
		}
	})
	if err != nil {
		return fmt.Errorf("storm floor: %w", err)
	}
	lastDone = time.Time{}
	for _, c := range clients[:k] {
		lastDone = maxTime(lastDone, c.doneAt)
	}
	res.FloorClients, res.FloorMeasured = k, lastDone.Sub(t0)
	res.Floor = time.Duration(float64(res.FloorMeasured) * float64(n) / float64(k))
	// Last: its claims write the agents table, whose stream the stack reads.
	if res.ConnectFloorP50, res.ConnectFloorMax, err = b.connectFloor(ctx, n); err != nil {
		return err
	}
	b.res.storm = res
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// parallel runs f(0..n-1) on at most k goroutines and returns the first error.
func parallel(k, n int, f func(i int) error) error {
	sem := make(chan struct{}, k)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
