package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// seed writes events 0..n-1 of session (seq 0 being session/created, as sessionlog.Create
// writes it) with BatchWriteItem, 25 items a request, on the unmetered client, from
// `workers` goroutines shared by all sessions given.
func (b *bench) seed(ctx context.Context, sessions []string, n int, workers int) error {
	type batch []types.WriteRequest
	jobs := make(chan batch, workers*2)
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	table := b.st.cfg.LogTable
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for reqs := range jobs {
				in := &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}}
				for attempt := 0; ; attempt++ {
					out, err := b.st.raw.BatchWriteItem(ctx, in)
					if err != nil {
						once.Do(func() { firstErr = err })
						break
					}
					if len(out.UnprocessedItems) == 0 {
						break
					}
					in.RequestItems = out.UnprocessedItems
					time.Sleep(time.Duration(attempt+1) * 10 * time.Millisecond)
				}
			}
		}()
	}
	at := time.Now().UTC().Format(sessionlog.TimeFormat)
	for _, s := range sessions {
		var reqs batch
		for seq := 0; seq < n; seq++ {
			ev := sessionlog.Event{ID: fmt.Sprintf("seed-%s-%d", s, seq), SessionID: s, Seq: int64(seq), At: at, Type: "assistant/chunk", Payload: chunkPayload(int64(seq))}
			if seq == 0 {
				ev.Type, ev.Payload = sessionlog.TypeSessionCreated, json.RawMessage("{}")
			}
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: ev.Item()}})
			if len(reqs) == 25 {
				jobs <- reqs
				reqs = nil
			}
		}
		if len(reqs) > 0 {
			jobs <- reqs
		}
	}
	close(jobs)
	wg.Wait()
	return firstErr
}

const replaySession = "replay"

func stormSessions(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("storm-%03d", i)
	}
	return s
}

// seedAll seeds, before the service starts, the logs the replay and storm phases
// replay and the age phase's aged agents run turns on: BatchWriteItem from several
// goroutines (DynamoDB Local's write rate bounds it).
func (b *bench) seedAll(ctx context.Context, phases map[string]bool) error {
	var sessions []string
	events := 0
	if phases["replay"] {
		began := time.Now()
		if err := b.seed(ctx, []string{replaySession}, b.o.replayEvents, 4); err != nil {
			return fmt.Errorf("seed replay: %w", err)
		}
		b.res.replaySeeded = time.Since(began)
		b.progress("seeded %d events for the replay in %v", b.o.replayEvents, b.res.replaySeeded.Round(time.Millisecond))
	}
	if phases["storm"] {
		sessions = stormSessions(b.o.stormClients)
		events = b.o.stormEvents
		began := time.Now()
		if err := b.seed(ctx, sessions, events, 4); err != nil {
			return fmt.Errorf("seed storm: %w", err)
		}
		b.res.storm.Seeded = time.Since(began)
		b.progress("seeded %d sessions × %d events for the storm in %v", len(sessions), events, b.res.storm.Seeded.Round(time.Millisecond))
	}
	if phases["age"] {
		if err := b.seedAge(ctx); err != nil {
			return err
		}
	}
	return nil
}

// replayResult is one replay measurement: the service's and the floor's, in paired
// rounds.
type replayResult struct {
	Events int
	// Rate and Floor are the median round's (events/s): the round whose own ratio,
	// service/floor, is the median of the rounds' (the lower middle one for an even
	// count). Rate/Floor is thus the median of ratios each taken under one load.
	Rate, Floor float64
	// Rates, Floors and Ratios are each round's: service, floor, service/floor.
	Rates, Floors, Ratios []float64
	Cost                  phaseCost // of the service's first round
	FloorCost             usage
	// Messages is how many WebSocket messages the client received in the service's
	// first round (a batch is one message), FloorPosts how many posts the floor made.
	Messages, FloorPosts int64
}

// summarize sets Rate and Floor to the median round's.
func (x *replayResult) summarize() {
	if len(x.Ratios) == 0 {
		return
	}
	idx := make([]int, len(x.Ratios))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(x.Ratios[a], x.Ratios[b]) })
	m := idx[(len(idx)-1)/2]
	x.Rate, x.Floor = x.Rates[m], x.Floors[m]
}

// runReplay measures a replay to one client, v1 and batched: subscribe on a seeded
// session, until the last event arrives. The v1 replay covers the last
// -replay-unbatched-events events (all by default: under the AWS latency profile one
// post per event makes 10,000 take minutes, and the rate does not depend on the count);
// the batched one covers all b.o.replayEvents. The floor reads the same events from
// the same table with the same strongly consistent Query pages of 1,000 and makes the
// same posts to an open socket — one per event, or the same batches delivery packs —
// awaited, one at a time (API Gateway does not order concurrent posts).
//
// Each of -rounds rounds measures the floor and the service back to back, the floor
// first in even rounds and second in odd ones, so that the load of the moment (this
// machine is shared) falls on both alike: a ratio of two measurements a second apart.
// The figure is the median round's (summarize). A ratio of the two sides' bests would
// set measurements from different minutes against each other: the floor's best round
// may fall in a lull the service's rounds never met.
func (b *bench) runReplay(ctx context.Context) error {
	n := b.o.replayEvents
	cl, err := b.connect(ctx, replaySession, nil)
	if err != nil {
		return err
	}
	defer cl.close()
	unbatched := n
	if k := b.o.replayUnbatchedEvents; k > 0 && k < n {
		unbatched = k
	}
	res := replayResult{Events: unbatched}
	batched := replayResult{Events: n}
	for r := 0; r < max(b.o.rounds, 1); r++ {
		if err := b.replayRound(ctx, cl, &res, int64(n-unbatched), false, r); err != nil {
			return err
		}
		if err := b.replayRound(ctx, cl, &batched, 0, true, r); err != nil {
			return err
		}
	}
	res.summarize()
	batched.summarize()
	b.res.replay, b.res.replayBatched = res, batched
	return nil
}

// replayRound measures round r of res: the floor's replay of from..the last seeded
// event and the service's, to cl (batched or not), in the order r gives.
func (b *bench) replayRound(ctx context.Context, cl *wsClient, res *replayResult, from int64, batched bool, r int) error {
	kind := "v1"
	if batched {
		kind = "batched"
	}
	var rate, floor float64
	var err error
	if r%2 == 0 {
		if floor, err = b.replayFloor(ctx, res, from, batched, r); err == nil {
			rate, err = b.replayService(ctx, cl, res, from, batched, r)
		}
	} else {
		if rate, err = b.replayService(ctx, cl, res, from, batched, r); err == nil {
			floor, err = b.replayFloor(ctx, res, from, batched, r)
		}
	}
	if err != nil {
		return fmt.Errorf("replay (%s) round %d: %w", kind, r+1, err)
	}
	res.Rates, res.Floors, res.Ratios = append(res.Rates, rate), append(res.Floors, floor), append(res.Ratios, rate/floor)
	b.progress("replay round %d (%s, %d events): service %.0f events/s, floor %.0f events/s: %.2f×", r+1, kind, res.Events, rate, floor, rate/floor)
	return nil
}

// replayFloor is the floor's replay of from..the last seeded event: the Query pages,
// and the posts delivery would make, one after another; it returns events/s.
func (b *bench) replayFloor(ctx context.Context, res *replayResult, from int64, batched bool, r int) (float64, error) {
	reader := sessionlog.New(b.floor.db, b.st.cfg.LogTable)
	last := int64(b.o.replayEvents - 1)
	fb := b.floor.meter.snapshot()
	posts := int64(0)
	t0 := time.Now()
	for next := from; next <= last; {
		evs, err := reader.Read(ctx, replaySession, next, 1000)
		if err != nil {
			return 0, fmt.Errorf("floor read: %w", err)
		}
		if len(evs) == 0 {
			return 0, fmt.Errorf("floor: nothing at seq %d", next)
		}
		for i := 0; i < len(evs); {
			// The service's default CheckpointEvery bounds a batch's events (half of it),
			// as BatchBytes does its size.
			data, k, err := delivery.EncodeFrame(evs[i:], batched, delivery.DefaultCheckpointEvery/2)
			if err != nil {
				return 0, err
			}
			if err := b.floor.post(ctx, data); err != nil {
				return 0, fmt.Errorf("floor post: %w", err)
			}
			posts++
			i += k
		}
		next = evs[len(evs)-1].Seq + 1
	}
	f, err := b.floor.client.seqRun(120*time.Second, from, last)
	if err != nil {
		return 0, fmt.Errorf("floor: %w", err)
	}
	if r == 0 {
		res.FloorCost = b.floor.meter.snapshot().since(fb)
		res.FloorPosts = posts
	}
	return float64(last-from+1) / f.At.Sub(t0).Seconds(), nil
}

// replayService is the service's replay of from..the last seeded event to cl, from
// the subscribe frame to the receipt of the last event; it returns events/s.
func (b *bench) replayService(ctx context.Context, cl *wsClient, res *replayResult, from int64, batched bool, r int) (float64, error) {
	last := int64(b.o.replayEvents - 1)
	b.st.settle(ctx)
	before := b.st.snap()
	msgs := cl.msgs.Load()
	t0 := time.Now()
	sub := subscribe(from)
	if batched {
		sub = subscribeBatched(from)
	}
	if err := cl.send(ctx, sub); err != nil {
		return 0, err
	}
	f, err := cl.seqRun(10*time.Minute, from, last)
	if err != nil {
		return 0, err
	}
	rate := float64(last-from+1) / f.At.Sub(t0).Seconds()
	if r == 0 {
		res.Messages = cl.msgs.Load() - msgs
	}
	b.st.settle(ctx)
	if r == 0 {
		res.Cost = before.to(b.st.snap())
	}
	return rate, nil
}

// seqRun reads events from..to in order, failing on a gap, a duplicate or a protocol
// frame, and returns the last.
func (cl *wsClient) seqRun(d time.Duration, from, to int64) (frame, error) {
	deadline := time.Now().Add(d)
	var f frame
	for want := from; want <= to; want++ {
		var err error
		if f, err = cl.expectSeq(time.Until(deadline), want); err != nil {
			return f, err
		}
	}
	return f, nil
}
