package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// figure is one row of the table: a value beside its floor, their ratio, and the
// target it is held to, if any.
type figure struct {
	Section string   `json:"section"`
	Name    string   `json:"name"`
	Unit    string   `json:"unit"`
	Value   float64  `json:"value"`
	Floor   *float64 `json:"floor,omitempty"`
	Ratio   *float64 `json:"ratio,omitempty"`
	Target  string   `json:"target,omitempty"`
	Meets   *bool    `json:"meets,omitempty"`
}

// target is a check of a figure: a bound on its ratio to the floor or on its value.
type target struct {
	text string
	ok   func(value, ratio float64) bool
}

var (
	noTarget    = target{}
	ratioAtMost = func(x float64) target {
		return target{fmt.Sprintf("≤ %g× floor", x), func(_, r float64) bool { return r <= x }}
	}
	ratioAtLeast = func(x float64) target {
		return target{fmt.Sprintf("≥ %g× floor", x), func(_, r float64) bool { return r >= x }}
	}
	atMost = func(x float64) target {
		return target{fmt.Sprintf("≤ %g", x), func(v, _ float64) bool { return v <= x+1e-9 }}
	}
	atLeast = func(x float64) target {
		return target{fmt.Sprintf("≥ %g", x), func(v, _ float64) bool { return v >= x-1e-9 }}
	}
)

// helloTarget is the storm's dial → hello p50 target: 200 ms on the local stack; none
// under the AWS latency profile, whose added latencies are not the stack's own.
func helloTarget(awsProfile bool) target {
	if awsProfile {
		return noTarget
	}
	return atMost(0.2)
}

// b2f is 1 for true, 0 for false: a yes/no figure.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

type phaseBreakdown struct {
	Requests    []requestRow     `json:"requests"`
	Invocations map[string]int64 `json:"invocations"`
	BusyMS      map[string]int64 `json:"busy_ms"`
	Events      int64            `json:"events"`
}

type requestRow struct {
	Service    string  `json:"service"`
	Operation  string  `json:"operation"`
	Table      string  `json:"table,omitempty"`
	Calls      int64   `json:"calls"`
	CondFailed int64   `json:"conditional_failures,omitempty"`
	RRU        float64 `json:"read_units,omitempty"`
	WRU        float64 `json:"write_units,omitempty"`
	MeanMS     float64 `json:"mean_ms"`
}

type costEstimate struct {
	Workload string             `json:"workload"`
	Prices   map[string]float64 `json:"prices_usd"`
	PerTurn  map[string]float64 `json:"per_turn"`
	TotalUSD map[string]float64 `json:"total_usd"`
}

// costFigures are the measured request counts that docs/cost.md prices, by workload:
// "tail_fast_path" per appended (and delivered) event, "tail_stream_only",
// "replay" per replayed event, "storm" per replayed event, "turn_<kind>" per turn.
type costFigures map[string]costRow

// costRow is one workload's requests per unit of work (Per says which).
type costRow struct {
	Per                 string  `json:"per"`
	Units               int64   `json:"units"` // events or turns measured
	DynamoDBWriteUnits  float64 `json:"dynamodb_write_units"`
	DynamoDBReadUnits   float64 `json:"dynamodb_read_units"`
	LogTableWriteUnits  float64 `json:"log_table_write_units"`
	LambdaInvocations   float64 `json:"lambda_invocations"`
	LambdaGBSeconds     float64 `json:"lambda_gb_s"` // handler time here × memory in template.yaml
	GatewayMessages     float64 `json:"gateway_messages"`
	EventsPerUnit       float64 `json:"events,omitempty"`
	LambdaInvocPerEvent float64 `json:"lambda_invocations_per_event,omitempty"`
}

func costRowOf(per string, c phaseCost, units int64, logTable string, events int64) costRow {
	n := float64(max(units, 1))
	gbs := 0.0
	for fn, d := range c.Inv.Busy {
		gbs += d.Seconds() * memoryGB(fn)
	}
	logW := c.DDB.sum(func(k opKey) bool { return k.Service == "DynamoDB" && k.Table == logTable }).WRU
	r := costRow{Per: per, Units: units, DynamoDBWriteUnits: c.wru() / n, DynamoDBReadUnits: c.rru() / n, LogTableWriteUnits: logW / n,
		LambdaInvocations: float64(c.Inv.total()) / n, LambdaGBSeconds: gbs / n, GatewayMessages: float64(c.posts()) / n}
	if per == "turn" && events > 0 {
		r.EventsPerUnit = float64(events) / n
		r.LambdaInvocPerEvent = float64(c.Inv.total()) / float64(events)
	}
	return r
}

type report struct {
	Date        string                    `json:"date"`
	Machine     machine                   `json:"machine"`
	Settings    map[string]any            `json:"settings"`
	RuntimeSec  float64                   `json:"runtime_s"`
	Figures     []figure                  `json:"figures"`
	Breakdown   map[string]phaseBreakdown `json:"breakdown"`
	CostFigures costFigures               `json:"cost"`
	Cost        *costEstimate             `json:"cost_estimate,omitempty"`
	StackWarn   int64                     `json:"stack_warnings"`
	StackErrors int64                     `json:"stack_errors"`
	// ReplayRounds holds each replay round's figures (events/s and service/floor), in
	// the order measured; the replay figures are the median round's.
	ReplayRounds map[string]replayRounds `json:"replay_rounds,omitempty"`
	// Age holds the age phase's figures by log length, each turn's time and heap by
	// round (the figures' "age" section is made from them).
	Age []ageResult `json:"age,omitempty"`
	// AgeStreaming is the age phase's streaming case (logs of chunks that never compact).
	AgeStreaming []ageResult `json:"age_streaming,omitempty"`
	// StormBreakdown is where a storm client's time went (also among the figures).
	StormBreakdown *stormBreakdown `json:"storm_breakdown,omitempty"`
	order          []string
}

type replayRounds struct {
	Service []float64 `json:"service_events_per_s"`
	Floor   []float64 `json:"floor_events_per_s"`
	Ratio   []float64 `json:"ratio"`
}

func (b *bench) report(lc *levelCounter) *report {
	r := &report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: describeMachine(b.o.endpoint),
		Settings: map[string]any{
			"tail_events": b.o.tailEvents, "stream_events": b.o.streamEvents, "warmup": b.o.warmup,
			"replay_events": b.o.replayEvents, "replay_rounds": b.o.rounds,
			"storm_clients": b.o.stormClients, "storm_events": b.o.stormEvents, "turns_per_kind": b.o.turns,
			"cold_runs": b.o.coldRuns, "poll_interval_ms": b.o.poll.Milliseconds(),
			"max_concurrent_replays": b.st.cfg.MaxConcurrentReplays, "replay_limit": b.st.cfg.ReplayLimit,
			"outbound_queue": b.st.cfg.OutboundQueue, "event_envelope_bytes": envelopeBytes(),
			"aws_latency_profile": b.o.latency.String(), "replay_unbatched_events": b.res.replay.Events,
		},
		ReplayRounds: map[string]replayRounds{
			"replay":         {b.res.replay.Rates, b.res.replay.Floors, b.res.replay.Ratios},
			"replay_batched": {b.res.replayBatched.Rates, b.res.replayBatched.Floors, b.res.replayBatched.Ratios},
		},
		Breakdown:   map[string]phaseBreakdown{},
		CostFigures: costFigures{},
		StackWarn:   lc.warn.Load(),
		StackErrors: lc.err.Load(),
	}
	add := r.add
	fl := func(v float64) *float64 { return &v }
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	ran := b.res.ranPhases

	if ran["tail"] {
		tf, ts, floor := b.res.tailFast, b.res.tailStream, b.res.tailFloor
		sec := "tail latency: append → client receive"
		for _, p := range []struct {
			p float64
			t target
		}{{50, ratioAtMost(1.5)}, {95, noTarget}, {99, ratioAtMost(3)}} {
			add(sec, fmt.Sprintf("fast path p%g (%d events)", p.p, len(tf.Lat)), "ms", msf(percentile(tf.Lat, p.p)), fl(msf(percentile(floor, p.p))), p.t)
		}
		for _, p := range []float64{50, 95, 99} {
			add(sec, fmt.Sprintf("stream only p%g (%d events)", p, len(ts.Lat)), "ms", msf(percentile(ts.Lat, p)), fl(msf(percentile(floor, p))), noTarget)
		}
		if tb := b.res.tailBatched; len(tb.Lat) > 0 {
			// Batching must never delay a lone event: the floor here is the v1 client's
			// fast path, measured in the same blocks.
			for _, p := range []struct {
				p float64
				t target
			}{{50, ratioAtMost(1.05)}, {99, noTarget}} {
				add(sec, fmt.Sprintf("fast path p%g, batching client (floor: v1 client)", p.p), "ms", msf(percentile(tb.Lat, p.p)), fl(msf(percentile(tf.Lat, p.p))), p.t)
			}
		}
		add(sec, "of which the append (Append vs PutItem) p50", "ms", msf(percentile(tf.Append, 50)), fl(msf(percentile(b.res.tailFloorPut, 50))), noTarget)

		sec = "cost per tail event"
		floorN := float64(len(floor))
		fc := b.res.tailFloorCost
		floorW, floorR := fc.sum(dynamo).WRU/floorN, fc.sum(dynamo).RRU/floorN
		floorPosts := float64(fc.sum(operation("ApiGatewayManagementApi", "PostToConnection")).Calls) / floorN
		logPut := func(k opKey) bool {
			return k.Service == "DynamoDB" && k.Op == "PutItem" && k.Table == b.st.cfg.LogTable
		}
		for _, x := range []struct {
			name string
			res  tailResult
			fast bool
		}{{"fast path", tf, true}, {"stream only", ts, false}} {
			n := float64(x.res.Events)
			if n == 0 {
				continue
			}
			c := x.res.Cost
			if x.fast {
				add(sec, "write units / appended event: the log PutItem", "WRU", c.DDB.sum(logPut).WRU/n, fl(floorW), atMost(1.0))
			}
			wt := noTarget
			rt := noTarget
			mt := noTarget
			if x.fast {
				wt, rt, mt = atMost(1.0), atMost(0.1), atMost(1.0)
			}
			add(sec, "write units / event, all tables ("+x.name+")", "WRU", c.wru()/n, fl(floorW), wt)
			add(sec, "read units / delivered event ("+x.name+")", "RRU", c.rru()/n, fl(floorR), rt)
			add(sec, "gateway messages / event / connection ("+x.name+")", "msgs", float64(c.posts())/n, fl(floorPosts), mt)
			add(sec, "Lambda invocations / delivered event ("+x.name+")", "invocations", float64(c.Inv.total())/n, fl(0), noTarget)
			r.addBreakdown(b, "tail "+x.name, c, int64(x.res.Events))
			key := map[bool]string{true: "tail_fast_path", false: "tail_stream_only"}[x.fast]
			r.CostFigures[key] = costRowOf("event", c, int64(x.res.Events), b.st.cfg.LogTable, 0)
		}
		r.addBreakdown(b, "tail floor (its own requests)", phaseCost{DDB: fc}, int64(len(floor)))
		r.addBreakdown(b, "tail: stream pollers (Lambda's side, not billed as requests)", phaseCost{DDB: b.res.tailPoller}, 0)
	}
	if ran["replay"] {
		rp := b.res.replay
		sec := "replay"
		add(sec, fmt.Sprintf("replay throughput, %d events to one client (median of %d paired rounds)", rp.Events, len(rp.Rates)), "events/s", rp.Rate, fl(rp.Floor), ratioAtLeast(0.7))
		n := float64(rp.Events)
		add(sec, "read units / replayed event", "RRU", rp.Cost.rru()/n, fl(rp.FloorCost.sum(dynamo).RRU/n), noTarget)
		add(sec, "write units / replayed event", "WRU", rp.Cost.wru()/n, fl(rp.FloorCost.sum(dynamo).WRU/n), noTarget)
		add(sec, "gateway messages / replayed event", "msgs", float64(rp.Cost.posts())/n,
			fl(float64(rp.FloorCost.sum(operation("ApiGatewayManagementApi", "PostToConnection")).Calls)/n), atMost(1.0))
		r.addBreakdown(b, "replay", rp.Cost, int64(rp.Events))
		r.CostFigures["replay"] = costRowOf("event", rp.Cost, int64(rp.Events), b.st.cfg.LogTable, 0)

		// Batched: the floor is the same Query pages and the same posts (the same
		// batches), made one after another with nothing else.
		bp := b.res.replayBatched
		if bn := float64(bp.Events); bn > 0 {
			add(sec, fmt.Sprintf("batched replay throughput, %d events to one client (median of %d paired rounds)", bp.Events, len(bp.Rates)), "events/s", bp.Rate, fl(bp.Floor), ratioAtLeast(0.7))
			speedup := noTarget
			if !b.o.latency.IsZero() {
				speedup = target{"≥ 20× v1", func(v, _ float64) bool { return v >= 20 }}
			}
			add(sec, "batched replay throughput / v1 replay throughput", "×", bp.Rate/max(rp.Rate, 1e-9), nil, speedup)
			add(sec, "gateway messages / replayed event (batched)", "msgs", float64(bp.Cost.posts())/bn, fl(float64(bp.FloorPosts)/bn), atMost(0.05))
			add(sec, "WebSocket messages / replayed event (batched, at the client)", "msgs", float64(bp.Messages)/bn, nil, noTarget)
			add(sec, "write units / replayed event (batched)", "WRU", bp.Cost.wru()/bn, fl(bp.FloorCost.sum(dynamo).WRU/bn), noTarget)
			add(sec, "read units / replayed event (batched)", "RRU", bp.Cost.rru()/bn, fl(bp.FloorCost.sum(dynamo).RRU/bn), noTarget)
			r.addBreakdown(b, "replay (batched)", bp.Cost, int64(bp.Events))
			r.CostFigures["replay_batched"] = costRowOf("event", bp.Cost, int64(bp.Events), b.st.cfg.LogTable, 0)
		}
	}
	if ran["turns"] {
		sec := "turns through the runtime (scripted model), per turn"
		for _, t := range b.res.turns {
			n := float64(t.Turns)
			ev := float64(t.Events) / n
			add(sec, t.Kind+": events / turn", "events", ev, nil, noTarget)
			add(sec, t.Kind+": write units / turn", "WRU", t.Cost.wru()/n, fl(ev), turnTarget(t.Kind))
			add(sec, t.Kind+": read units / turn", "RRU", t.Cost.rru()/n, fl(0), noTarget)
			add(sec, t.Kind+": Lambda invocations / turn", "invocations", float64(t.Cost.Inv.total())/n, nil, noTarget)
			add(sec, t.Kind+": Lambda invocations / delivered event", "invocations", float64(t.Cost.Inv.total())/float64(t.Events), nil, noTarget)
			add(sec, t.Kind+": Lambda GB-s / turn (handler time here × memory)", "GB-s", costRowOf("turn", t.Cost, int64(t.Turns), "", 0).LambdaGBSeconds, nil, noTarget)
			add(sec, t.Kind+": gateway messages / event / connection", "msgs", float64(t.Cost.posts())/float64(t.Events), fl(1), atMost(1.0))
			r.addBreakdown(b, "turn "+t.Kind, t.Cost, t.Events)
			r.CostFigures["turn_"+t.Kind] = costRowOf("turn", t.Cost, int64(t.Turns), b.st.cfg.LogTable, t.Events)
		}
		r.Cost = costFor(b.res.turns)
	}
	if ran["storm"] {
		s := b.res.storm
		sec := fmt.Sprintf("reconnect storm: %d clients × %d events, batched", s.Clients, s.EventsEach)
		add(sec, fmt.Sprintf("all caught up (first dial → last client's last event; floor measured on %d sockets, scaled)", s.FloorClients), "s", s.AllCaughtUp.Seconds(), fl(s.Floor.Seconds()), ratioAtMost(2))
		add(sec, "per-client catch-up p50", "s", s.P50.Seconds(), nil, noTarget)
		add(sec, "per-client catch-up p99", "s", s.P99.Seconds(), nil, noTarget)
		add(sec, "of which dial → hello, p50 (floor: $connect's store requests alone, all at once)", "s", s.HelloP50.Seconds(), fl(s.ConnectFloorP50.Seconds()), helloTarget(!b.o.latency.IsZero()))
		add(sec, "of which dial → hello, max", "s", s.HelloMax.Seconds(), fl(s.ConnectFloorMax.Seconds()), noTarget)
		add(sec, "of which subscribe → caught up, p50", "s", s.ReplayP50.Seconds(), nil, noTarget)
		add(sec, "of which subscribe → caught up, max", "s", s.ReplayMax.Seconds(), nil, noTarget)
		add(sec, "peak concurrent replay reads", "reads", float64(s.PeakReplays), fl(float64(s.MaxConcurrentReplays)), atMost(float64(s.MaxConcurrentReplays)))
		add(sec, "frames out of order (gaps, duplicates)", "frames", float64(s.Bad), fl(0), atMost(0))
		add(sec, "seeding (BatchWriteItem, not part of the figure)", "s", s.Seeded.Seconds(), nil, noTarget)
		bd := s.Breakdown
		sec = fmt.Sprintf("reconnect storm: where a client's time goes (p50 / max over %d clients; %d unmatched)", bd.Clients, bd.Missing)
		for _, row := range []struct {
			name, unit string
			v          span
		}{
			{"first dial → its $connect starts", "s", bd.DialToConnect},
			{"$connect", "s", bd.Connect},
			{"$connect starts → hello's deliver invocation starts", "s", bd.ConnectToKick},
			{"deliver starts → first post of hello", "s", bd.KickToFirst},
			{"first post → hello taken (retries on Gone)", "s", bd.FirstToHello},
			{"$connect ends → hello taken", "s", bd.ConnectedWait},
			{"posts until hello was taken", "posts", bd.HelloPosts},
			{"hello taken → client has it", "s", bd.HelloToClient},
			{"subscribe sent → first replay read waits for a slot", "s", bd.SubToRead},
			{"replay slot wait (all pages)", "s", bd.SlotWait},
			{"replay slot polls (all pages)", "polls", bd.SlotPolls},
			{"replay reads (all pages)", "s", bd.Read},
			{"last read → client has its last event", "s", bd.ReadToCaughtUp},
		} {
			add(sec, row.name+", p50", row.unit, row.v.P50, nil, noTarget)
			add(sec, row.name+", max", row.unit, row.v.Max, nil, noTarget)
		}
		r.StormBreakdown = &bd
		r.addBreakdown(b, "storm", s.Cost, int64(s.Clients*s.EventsEach))
		r.CostFigures["storm"] = costRowOf("event", s.Cost, int64(s.Clients*s.EventsEach), b.st.cfg.LogTable, 0)
	}
	if ran["frames"] {
		for _, f := range b.res.frames {
			way := "plain"
			if f.Ordered {
				way = "order field"
			}
			sec := fmt.Sprintf("client frames: %s, %s, %d one at a time", f.Kind, way, f.Frames)
			n := float64(max(f.Frames, 1))
			add(sec, "Lambda invocations / frame", "invocations", float64(f.Cost.Inv.total())/n, nil, noTarget)
			add(sec, "write units / frame", "WRU", f.Cost.wru()/n, nil, noTarget)
			add(sec, "read units / frame", "RRU", f.Cost.rru()/n, nil, noTarget)
			add(sec, "gateway messages / frame", "msgs", float64(f.Cost.posts())/n, nil, noTarget)
			name := "frame_" + f.Kind
			if f.Ordered {
				name += "_ordered"
			}
			r.addBreakdown(b, strings.TrimPrefix(sec, "client frames: "), f.Cost, 0)
			r.CostFigures[name] = costRowOf("frame", f.Cost, int64(f.Frames), "", 0)
		}
	}
	if ran["beyond"] {
		for _, x := range b.res.beyond {
			sec := fmt.Sprintf("beyond one socket: %s, %d one at a time", x.Op, x.Ops)
			n := float64(max(x.Ops, 1))
			add(sec, "write units / op", "WRU", x.Cost.wru()/n, x.Floor, noTarget)
			add(sec, "read units / op", "RRU", x.Cost.rru()/n, nil, noTarget)
			add(sec, "refused conditional writes / op (1 WRU each, in the write units)", "frames", float64(x.Cost.DDB.sum(dynamo).CondFailed)/n, nil, noTarget)
			add(sec, "cancelled transactions / op (not priced by DynamoDB Local's answer)", "frames", float64(x.Cost.DDB.sum(dynamo).TxCanceled)/n, nil, noTarget)
			add(sec, "Lambda invocations / op", "invocations", float64(x.Cost.Inv.total())/n, nil, noTarget)
			r.addBreakdown(b, "beyond "+x.Op, x.Cost, 0)
			r.CostFigures["beyond_"+x.Op] = costRowOf("op", x.Cost, int64(x.Ops), "", 0)
		}
	}
	if ran["lagged"] {
		l := b.res.lagged
		sec := fmt.Sprintf("slow readers (outbound_queue %d, events of %d KiB)", l.Queue, l.EventBytes>>10)
		add(sec, "paused reader: events appended until it was dropped", "events", float64(l.Appended), nil, noTarget)
		add(sec, "paused reader: of those, appended each once the one before was posted", "events", float64(l.Paced), nil, noTarget)
		add(sec, "paused reader: events it received before lagged", "events", float64(l.Received), nil, noTarget)
		add(sec, "paused reader: events behind (tip − last received) when lagged fired", "events", float64(l.Behind), fl(float64(l.Queue+1)), atMost(float64(2*l.Queue)))
		add(sec, "paused reader: sent lagged", "bool", b2f(l.GotLagged), fl(1), atLeast(1))
		add(sec, fmt.Sprintf("keeping-up reader: events received of %d appended in bursts of %d", l.KeepUpEvents, l.Queue), "events", float64(l.KeepUpGot), fl(float64(l.KeepUpEvents)), atLeast(float64(l.KeepUpEvents)))
		add(sec, "keeping-up reader: sent lagged", "bool", b2f(l.KeepUpLagged), fl(0), atMost(0))
	}
	if ran["refused"] {
		rf := b.res.refused
		sec := fmt.Sprintf("refused connections (wrong token): %d", rf.Connections)
		n := float64(max(rf.Connections, 1))
		add(sec, "Lambda invocations / refused connection", "invocations", float64(rf.Cost.Inv.total())/n, nil, noTarget)
		add(sec, "write units / refused connection", "WRU", rf.Cost.wru()/n, fl(1), noTarget) // its departure record, written at $disconnect
		add(sec, "read units / refused connection", "RRU", rf.Cost.rru()/n, nil, noTarget)
		add(sec, "gateway messages / refused connection", "msgs", float64(rf.Cost.posts())/n, fl(1), atMost(1.0))
		r.addBreakdown(b, "refused", rf.Cost, 0)
		r.CostFigures["refused_connection"] = costRowOf("connection", rf.Cost, int64(rf.Connections), "", 0)
	}
	if ran["agents"] {
		b.reportAgents(r, add)
	}
	if ran["observers"] {
		b.reportObservers(r)
	}
	if ran["age"] {
		b.reportAge(r, add)
	}
	if ran["cold"] {
		sec := "cold start under the Runtime Interface Emulator (median)"
		h := b.res.coldFloor
		for _, c := range b.res.cold {
			add(sec, c.Name+": bootstrap size (linux/arm64)", "MB", float64(c.Size)/1e6, fl(float64(h.Size)/1e6), atMost(coldSizeTargetMB))
			add(sec, c.Name+": emulator start → first response", "ms", msf(c.median(c.Wall)), fl(msf(h.median(h.Wall))), noTarget)
			add(sec, c.Name+": init (INIT REPORT)", "ms", msf(c.median(c.Init)), fl(msf(h.median(h.Init))), ratioAtMost(2))
			add(sec, c.Name+": first invocation", "ms", msf(c.median(c.First)), fl(msf(h.median(h.First))), noTarget)
		}
	}
	r.RuntimeSec = time.Since(b.began).Seconds()
	return r
}

// coldSizeTargetMB is the most a function's bootstrap may weigh (docs/performance.md,
// "Cold start").
const coldSizeTargetMB = 10

// add appends a figure: value beside its floor (if any) with their ratio, checked
// against t (a target on the ratio misses when there is no floor).
func (r *report) add(section, name, unit string, value float64, floor *float64, t target) {
	f := figure{Section: section, Name: name, Unit: unit, Value: value, Floor: floor, Target: t.text}
	ratio := math.NaN()
	if floor != nil && *floor != 0 {
		ratio = value / *floor
		f.Ratio = &ratio
	}
	if t.ok != nil {
		ok := t.ok(value, ratio)
		if math.IsNaN(ratio) && strings.Contains(t.text, "floor") {
			ok = false
		}
		f.Meets = &ok
	}
	r.Figures = append(r.Figures, f)
}

func envelopeBytes() int {
	b, _ := json.Marshal(map[string]any{"id": strings.Repeat("0", 32), "session_id": "tail-fast", "seq": 1234, "at": "2026-01-01T00:00:00.000000Z", "type": "assistant/chunk", "payload": chunkPayload(1234)})
	return len(b)
}

// addBreakdown records a phase's requests by operation and table, and its invocations.
func (r *report) addBreakdown(b *bench, name string, c phaseCost, events int64) {
	logical := map[string]string{}
	for id, t := range b.st.tables {
		logical[t] = id
	}
	pb := phaseBreakdown{Invocations: c.Inv.N, BusyMS: map[string]int64{}, Events: events}
	for k, v := range c.Inv.Busy {
		pb.BusyMS[k] = v.Milliseconds()
	}
	for _, k := range c.DDB.keys() {
		s := c.DDB[k]
		t := logical[k.Table]
		if t == "" {
			t = k.Table
		}
		pb.Requests = append(pb.Requests, requestRow{Service: k.Service, Operation: k.Op, Table: t, Calls: s.Calls, CondFailed: s.CondFailed, RRU: s.RRU, WRU: s.WRU,
			MeanMS: float64(s.Time) / float64(time.Millisecond) / float64(max(s.Calls, 1))})
	}
	r.Breakdown[name] = pb
	r.order = append(r.order, name)
}

// Prices, us-east-1, on demand, as published on 2026-11-29 (docs/cost.md).
var prices = map[string]float64{
	"dynamodb_write_request_unit": 0.625 / 1e6,
	"dynamodb_read_request_unit":  0.125 / 1e6,
	"lambda_request":              0.20 / 1e6,
	"lambda_arm64_gb_s":           0.0000133334,
	"apigw_ws_message":            1.00 / 1e6,
	"apigw_ws_connection_minute":  0.25 / 1e6,
}

// memoryGB is each function's memory in template.yaml (Globals 256 MB; runner 512 MB).
func memoryGB(fn string) float64 {
	if strings.HasPrefix(fn, "runner") {
		return 0.5
	}
	return 0.25
}

// costFor prices 1,000 turns like the measured 40-event turn, one client connected:
// the request counts are measured; Lambda compute uses the handlers' busy time here
// (DynamoDB Local round trips), not a model's streaming time (docs/cost.md adds it).
func costFor(turns []turnResult) *costEstimate {
	var t *turnResult
	for i := range turns {
		if turns[i].Kind == "40-event" {
			t = &turns[i]
		}
	}
	if t == nil || t.Turns == 0 {
		return nil
	}
	n := float64(t.Turns)
	gbs := 0.0
	for fn, d := range t.Cost.Inv.Busy {
		// Lambda bills each invocation rounded up to 1 ms; the busy time is a sum.
		gbs += d.Seconds() * memoryGB(fn)
	}
	per := map[string]float64{
		"events":            float64(t.Events) / n,
		"write_units":       t.Cost.wru() / n,
		"read_units":        t.Cost.rru() / n,
		"lambda_requests":   float64(t.Cost.Inv.total()) / n,
		"lambda_gb_s_local": gbs / n,
		"gateway_messages":  float64(t.Cost.posts())/n + 1, // + the inject frame
	}
	const turnsN = 1000
	total := map[string]float64{
		"dynamodb_writes":  per["write_units"] * turnsN * prices["dynamodb_write_request_unit"],
		"dynamodb_reads":   per["read_units"] * turnsN * prices["dynamodb_read_request_unit"],
		"lambda_requests":  per["lambda_requests"] * turnsN * prices["lambda_request"],
		"lambda_compute":   per["lambda_gb_s_local"] * turnsN * prices["lambda_arm64_gb_s"],
		"gateway_messages": per["gateway_messages"] * turnsN * prices["apigw_ws_message"],
	}
	sum := 0.0
	for _, v := range total {
		sum += v
	}
	total["sum"] = sum
	return &costEstimate{
		Workload: "1,000 turns like the measured 40-event turn, one connected client; compute from local busy time, no model time, no connection-minutes",
		Prices:   prices, PerTurn: per, TotalUSD: total,
	}
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "terret-ws bench — %s, commit %s%s, %d CPUs, %d MB, %s, %s\n\n", r.Date, r.Machine.Commit, dirty(r.Machine.CommitDirty),
		r.Machine.CPUs, r.Machine.MemoryMB, r.Machine.GoVersion, r.Machine.DynamoDB)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	section := ""
	for _, f := range r.Figures {
		if f.Section != section {
			if section != "" {
				fmt.Fprintln(tw, "\t\t\t\t\t")
			}
			section = f.Section
			fmt.Fprintf(tw, "%s\tvalue\tfloor\tratio\ttarget\t\n", strings.ToUpper(section[:1])+section[1:])
		}
		floor, ratio, meets := "—", "—", ""
		if f.Floor != nil {
			floor = num(*f.Floor, f.Unit)
		}
		if f.Ratio != nil {
			ratio = fmt.Sprintf("%.2f×", *f.Ratio)
		}
		if f.Meets != nil {
			meets = map[bool]string{true: "  ok", false: "  MISS"}[*f.Meets]
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s%s\t\n", f.Name, num(f.Value, f.Unit), floor, ratio, f.Target, meets)
	}
	tw.Flush()
	if r.Cost != nil {
		fmt.Fprintf(w, "\nCost at us-east-1 on-demand prices: %s\n", r.Cost.Workload)
		keys := []string{"dynamodb_writes", "dynamodb_reads", "lambda_requests", "lambda_compute", "gateway_messages", "sum"}
		for _, k := range keys {
			fmt.Fprintf(w, "  %-18s $%.4f\n", k, r.Cost.TotalUSD[k])
		}
	}
	fmt.Fprintln(w, "\nRequests by phase (DynamoDB units from ConsumedCapacity; a failed conditional write counted as 1 WRU):")
	for _, name := range r.order {
		pb := r.Breakdown[name]
		fmt.Fprintf(w, "  %s (%d events):", name, pb.Events)
		var inv []string
		for _, k := range sortedKeys(pb.Invocations) {
			inv = append(inv, fmt.Sprintf("%s %d", k, pb.Invocations[k]))
		}
		fmt.Fprintf(w, " invocations: %s\n", orNone(strings.Join(inv, ", ")))
		for _, q := range pb.Requests {
			extra := ""
			if q.CondFailed > 0 {
				extra = fmt.Sprintf(" (%d failed conditions)", q.CondFailed)
			}
			fmt.Fprintf(w, "    %-34s %-17s %7d calls %6.1f ms %9.1f RRU %9.1f WRU%s\n", q.Service+" "+q.Operation, q.Table, q.Calls, q.MeanMS, q.RRU, q.WRU, extra)
		}
	}
	fmt.Fprintf(w, "\nStack log: %d warnings, %d errors. Runtime %.0f s.\n", r.StackWarn, r.StackErrors, r.RuntimeSec)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func dirty(d bool) string {
	if d {
		return " (+ uncommitted changes)"
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func num(v float64, unit string) string {
	switch unit {
	case "ms":
		return fmt.Sprintf("%.2f ms", v)
	case "s":
		return fmt.Sprintf("%.2f s", v)
	case "events/s":
		return fmt.Sprintf("%.0f ev/s", v)
	case "MB":
		return fmt.Sprintf("%.2f MB", v)
	case "bytes":
		return fmt.Sprintf("%.0f B", v)
	case "events", "reads", "frames":
		if v == math.Trunc(v) {
			return fmt.Sprintf("%.0f", v)
		}
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func (r *report) write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// turnTarget is the write-unit target of a turn kind against its floor of one write per
// event (docs/cost.md): a plain turn at most twice the floor, a 40-event turn at most
// 1.3 times; other kinds are shown without one.
func turnTarget(kind string) target {
	switch kind {
	case "plain":
		return ratioAtMost(2)
	case "40-event":
		return ratioAtMost(1.3)
	}
	return noTarget
}
