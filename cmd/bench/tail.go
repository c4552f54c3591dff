package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// chunkText is the text of every benchmark event: an assistant chunk of a typical
// size, so that envelopes are about 250 bytes (well under 1 KB).
var chunkText = strings.Repeat("The quick brown fox jumps over the lazy dog. ", 2)

func chunkPayload(i int64) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"text": chunkText, "index": i})
	return b
}

// floorPath is the floor of delivery: what any design must do to get one event from a
// writer to a client over API Gateway — put the item, then PostToConnection it to an
// already open socket of the same local gateway, awaited, with the same SDK clients.
// It runs no function and coordinates nothing. Its requests are metered apart.
type floorPath struct {
	db     *dynamodb.Client
	posts  *apigatewaymanagementapi.Client
	meter  *meter
	client *wsClient
	connID string
	table  string
}

// openFloor connects the floor's own client (agent "floor", never subscribed, so the
// service sends it nothing but hello) and takes its connection id from its ownership
// record.
func (b *bench) openFloor(ctx context.Context) error {
	cl, err := b.connect(ctx, "floor", nil)
	if err != nil {
		return err
	}
	o, err := b.st.owners.Owner(ctx, "floor")
	if err != nil {
		return err
	}
	m := newMeter()
	cfg := b.o.latency.Install(m.install(dynamolocal.Config())) // the floor pays AWS's latencies too
	b.floor = &floorPath{db: b.st.cfg.DynamoDB(cfg), posts: b.st.cfg.Management(cfg), meter: m, client: cl, connID: o.ConnID, table: b.st.cfg.LogTable}
	return nil
}

// post sends one envelope to the floor socket.
func (f *floorPath) post(ctx context.Context, data []byte) error {
	_, err := f.posts.PostToConnection(ctx, postInput(f.connID, data))
	return err
}

func postInput(connID string, data []byte) *apigatewaymanagementapi.PostToConnectionInput {
	return &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(connID), Data: data}
}

// one puts event seq of the floor's own session (nobody owns it, so the stream
// consumer finds nothing to do) and posts it; it returns the time from the put to the
// client's receipt, and the time of the put alone.
func (f *floorPath) one(ctx context.Context, seq int64) (lat, put time.Duration, err error) {
	ev := sessionlog.Event{ID: fmt.Sprintf("floor-%d", seq), SessionID: "floor-log", Seq: seq, Type: "assistant/chunk", Payload: chunkPayload(seq)}
	t0 := time.Now()
	ev.At = t0.UTC().Format(sessionlog.TimeFormat)
	if _, err := f.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: ev.Item()}); err != nil {
		return 0, 0, err
	}
	put = time.Since(t0)
	data, err := json.Marshal(ev)
	if err != nil {
		return 0, 0, err
	}
	if err := f.post(ctx, data); err != nil {
		return 0, 0, err
	}
	fr, err := f.client.expectSeq(10*time.Second, seq)
	if err != nil {
		return 0, 0, err
	}
	return fr.At.Sub(t0), put, nil
}

// tailResult is one delivery path's latencies and cost.
type tailResult struct {
	Lat    []time.Duration
	Append []time.Duration // the Append call alone
	Cost   phaseCost
	Events int
}

// runTail measures append → client receive for the fast path (the runtime's
// delivery.Notifier, as agentservice.Agent builds it) and for the stream-only path (no
// notifier: the stream consumer alone delivers), each with its own subscribed client,
// in blocks interleaved with blocks of the floor so that drift of the shared machine
// hits all alike. The writer appends one event at a time and waits for its receipt
// before the next (closed loop), so each sample is one isolated event's latency.
func (b *bench) runTail(ctx context.Context) error {
	fastCl, err := b.subscribed(ctx, "tail-fast")
	if err != nil {
		return err
	}
	defer fastCl.close()
	streamCl, err := b.subscribed(ctx, "tail-stream")
	if err != nil {
		return err
	}
	defer streamCl.close()
	// The fast path again, to a client that asked for batched frames: a lone event must
	// go as fast as to a v1 client.
	batchedCl, err := b.subscribedAs(ctx, "tail-batched", subscribeBatched(0))
	if err != nil {
		return err
	}
	defer batchedCl.close()
	lg := b.st.log()
	// agentservice.Agent's fast path: a Notifier over a Deliverer built by service, with the
	// runtime's one-second budget per send.
	notifier := delivery.NewNotifier(service.Deliverer(b.st.cfg, b.st.awsCfg, b.st.logger, service.Tuning{}), time.Second)
	fastLog := sessionlog.Notify(lg, notifier.OnAppend) // as agentservice.AgentWith wires the runtime's log

	fastTo := func(session string, cl *wsClient) func(int64) (time.Duration, time.Duration, error) {
		return func(seq int64) (time.Duration, time.Duration, error) {
			t0 := time.Now()
			ev, err := fastLog.Append(ctx, session, "assistant/chunk", chunkPayload(seq))
			if err != nil {
				return 0, 0, err
			}
			appended := time.Since(t0)
			f, err := cl.expectSeq(15*time.Second, ev.Seq)
			if err != nil {
				return 0, 0, err
			}
			return f.At.Sub(t0), appended, nil
		}
	}
	fast, fastBatched := fastTo("tail-fast", fastCl), fastTo("tail-batched", batchedCl)
	stream := func(seq int64) (time.Duration, time.Duration, error) {
		t0 := time.Now()
		ev, err := lg.Append(ctx, "tail-stream", "assistant/chunk", chunkPayload(seq))
		if err != nil {
			return 0, 0, err
		}
		appended := time.Since(t0)
		f, err := streamCl.expectSeq(15*time.Second, ev.Seq)
		if err != nil {
			return 0, 0, err
		}
		return f.At.Sub(t0), appended, nil
	}
	floorSeq := int64(0)
	floor := func() (time.Duration, time.Duration, error) {
		floorSeq++
		return b.floor.one(ctx, floorSeq)
	}

	// Warm-up: DynamoDB Local's JIT and the clients' connections.
	for i := 0; i < b.o.warmup; i++ {
		if _, _, err := fast(int64(i)); err != nil {
			return fmt.Errorf("tail warm-up (fast): %w", err)
		}
		if _, _, err := stream(int64(i)); err != nil {
			return fmt.Errorf("tail warm-up (stream): %w", err)
		}
		if _, _, err := fastBatched(int64(i)); err != nil {
			return fmt.Errorf("tail warm-up (fast, batched): %w", err)
		}
		if _, _, err := floor(); err != nil {
			return fmt.Errorf("tail warm-up (floor): %w", err)
		}
	}
	notifier.FlushAll()
	b.st.settle(ctx)

	run := func(res *tailResult, n int, one func(int64) (time.Duration, time.Duration, error), flush func()) error {
		before := b.st.snap()
		for i := 0; i < n; i++ {
			lat, app, err := one(int64(i))
			if err != nil {
				return err
			}
			res.Lat = append(res.Lat, lat)
			res.Append = append(res.Append, app)
		}
		if flush != nil {
			flush()
		}
		b.st.settle(ctx)
		res.Cost = res.Cost.add(before.to(b.st.snap()))
		res.Events += n
		return nil
	}
	var fastRes, streamRes, batchedRes tailResult
	var floorLat, floorPut []time.Duration
	floorBefore := b.floor.meter.snapshot()
	pollBefore := b.st.pollerMeter.snapshot()
	// Blocks of 250 fast-path events, each with its share of floor and stream-only
	// samples, so that all three see the same machine.
	blocks := max((b.o.tailEvents+249)/250, 1)
	share := func(total, i int) int { return total*(i+1)/blocks - total*i/blocks }
	for i := 0; i < blocks; i++ {
		for j := 0; j < share(b.o.floorEvents, i); j++ {
			lat, put, err := floor()
			if err != nil {
				return fmt.Errorf("tail floor: %w", err)
			}
			floorLat = append(floorLat, lat)
			floorPut = append(floorPut, put)
		}
		if n := share(b.o.tailEvents, i); n > 0 {
			if err := run(&fastRes, n, fast, notifier.FlushAll); err != nil {
				return fmt.Errorf("tail (fast path): %w", err)
			}
		}
		if n := share(b.o.tailEvents, i); n > 0 {
			if err := run(&batchedRes, n, fastBatched, notifier.FlushAll); err != nil {
				return fmt.Errorf("tail (fast path, batched): %w", err)
			}
		}
		if n := share(b.o.streamEvents, i); n > 0 {
			if err := run(&streamRes, n, stream, nil); err != nil {
				return fmt.Errorf("tail (stream only): %w", err)
			}
		}
		b.progress("tail: %d/%d fast path, %d/%d stream only, %d/%d floor", len(fastRes.Lat), b.o.tailEvents, len(streamRes.Lat), b.o.streamEvents, len(floorLat), b.o.floorEvents)
	}
	floorCost := b.floor.meter.snapshot().since(floorBefore)
	b.res.tailPoller = b.st.pollerMeter.snapshot().since(pollBefore)
	b.res.tailFast, b.res.tailStream, b.res.tailFloor = fastRes, streamRes, floorLat
	b.res.tailBatched = batchedRes
	b.res.tailFloorPut, b.res.tailFloorCost = floorPut, floorCost
	return nil
}

// expectSeq reads the next frame and fails unless it is the event seq: a protocol
// frame, a gap or a duplicate is an error.
func (cl *wsClient) expectSeq(d time.Duration, seq int64) (frame, error) {
	f, err := cl.next(d)
	if err != nil {
		return f, fmt.Errorf("waiting for seq %d: %w", seq, err)
	}
	if f.Seq == nil || *f.Seq != seq {
		got := "a " + f.Type + " frame"
		if f.Seq != nil {
			got = fmt.Sprintf("seq %d", *f.Seq)
		}
		return f, fmt.Errorf("%s: got %s, want seq %d", cl.agent, got, seq)
	}
	return f, nil
}

// percentile is the nearest-rank percentile of ds (p in 0..100).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}
