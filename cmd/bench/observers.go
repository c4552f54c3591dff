package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// observersResult is the driver's tail with observers connected beside it: for each
// count of observers, one agent with a subscribed driver and that many subscribed
// observers (real sockets, observer tokens), events appended one at a time on the fast
// path; Floor is the tail phase's floor (a PutItem then a PostToConnection), measured in
// the same blocks.
type observersResult struct {
	Counts []int
	Driver []tailResult      // by Counts: the driver's latencies and the block's whole cost
	Obs    [][]time.Duration // by Counts: every observer's latency for every event
	Floor  []time.Duration
}

// observerCounts parses -observer-counts: ascending, the first 0 (the figures' "none").
func observerCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("-observer-counts %q: want ascending counts from 0, like 0,1,7", s)
		}
		out = append(out, n)
	}
	if len(out) < 2 || out[0] != 0 {
		return nil, fmt.Errorf("-observer-counts %q: want 0 first and at least one more count, like 0,1,7", s)
	}
	return out, nil
}

// observed is one agent of the observers phase: its driver and its observers.
type observed struct {
	agent  string
	driver *wsClient
	obs    []*wsClient
}

func (o *observed) close() {
	o.driver.close()
	for _, c := range o.obs {
		c.close()
	}
}

// observe connects n observers to agent, each with an observer token of its own
// (`terret token create --role observer`), and subscribes each from 0.
func (b *bench) observe(ctx context.Context, agent string, n int) ([]*wsClient, error) {
	var out []*wsClient
	for i := range n {
		tok, err := b.st.tokens.CreateRole(ctx, agent, 0, auth.RoleObserver)
		if err != nil {
			return out, fmt.Errorf("observer token for %s: %w", agent, err)
		}
		cl, err := dialAgent(ctx, b.st.dev.WebSocketURL(), agent, tok, nil)
		if err != nil {
			return out, err
		}
		out = append(out, cl)
		if _, err := cl.until(30*time.Second, func(f frame) bool { return f.Type == "hello" }); err != nil {
			return out, fmt.Errorf("observer %d of %s: %w", i, agent, err)
		}
		if err := cl.send(ctx, subscribe(0)); err != nil {
			return out, err
		}
		if _, err := cl.expectSeq(30*time.Second, 0); err != nil {
			return out, fmt.Errorf("observer %d of %s: %w", i, agent, err)
		}
	}
	return out, nil
}

// runObservers measures append → driver receive on the fast path (the runtime's
// delivery.Notifier, as in the tail phase) for agents with 0, 1 and 7 observers
// (-observer-counts), in blocks of 50 events per agent interleaved with blocks of the
// floor, the agents' order turning each block, so that drift of the shared machine hits
// all alike. Each event is appended once the one before reached the driver and every
// observer (closed loop): each sample is one isolated event's latency, and a block's
// PostToConnection calls over its events are the posts per appended event.
func (b *bench) runObservers(ctx context.Context) error {
	counts, err := observerCounts(b.o.observerCounts)
	if err != nil {
		return err
	}
	agents := make([]*observed, len(counts))
	defer func() {
		for _, a := range agents {
			if a != nil {
				a.close()
			}
		}
	}()
	prefix := fmt.Sprintf("observers-%d", time.Now().UnixNano()%1e6)
	for i, n := range counts {
		a := &observed{agent: fmt.Sprintf("%s-%d", prefix, n)}
		if a.driver, err = b.subscribed(ctx, a.agent); err != nil {
			return err
		}
		agents[i] = a
		if a.obs, err = b.observe(ctx, a.agent, n); err != nil {
			return err
		}
	}
	b.progress("observers: %d agents connected, %v observers", len(agents), counts)
	notifier := delivery.NewNotifier(service.Deliverer(b.st.cfg, b.st.awsCfg, b.st.logger, service.Tuning{}), time.Second)
	fastLog := sessionlog.Notify(b.st.log(), notifier.OnAppend)
	res := observersResult{Counts: counts, Driver: make([]tailResult, len(counts)), Obs: make([][]time.Duration, len(counts))}

	// one appends an event to agent a and waits for the driver, then every observer.
	one := func(a *observed, seq int64) (drv, app time.Duration, obs []time.Duration, err error) {
		t0 := time.Now()
		ev, err := fastLog.Append(ctx, a.agent, "assistant/chunk", chunkPayload(seq))
		if err != nil {
			return 0, 0, nil, err
		}
		app = time.Since(t0)
		f, err := a.driver.expectSeq(15*time.Second, ev.Seq)
		if err != nil {
			return 0, 0, nil, err
		}
		for i, cl := range a.obs {
			of, err := cl.expectSeq(15*time.Second, ev.Seq)
			if err != nil {
				return 0, 0, nil, fmt.Errorf("observer %d: %w", i, err)
			}
			obs = append(obs, of.At.Sub(t0))
		}
		return f.At.Sub(t0), app, obs, nil
	}
	floorSeq := int64(0)
	// The first events reach each observer once the fast path's cache of the observer
	// index is fresh (delivery.ObserverRefresh); the warm-up covers it.
	for w := 0; w < b.o.warmup; w++ {
		for _, a := range agents {
			if _, _, _, err := one(a, int64(w)); err != nil {
				return fmt.Errorf("observers warm-up (%s): %w", a.agent, err)
			}
		}
		floorSeq++
		if _, _, err := b.floor.one(ctx, floorSeq); err != nil {
			return fmt.Errorf("observers warm-up (floor): %w", err)
		}
	}
	notifier.FlushAll()
	b.st.settle(ctx)
	b.progress("observers: warmed up")

	const block = 50
	blocks := max((b.o.observerEvents+block-1)/block, 1)
	share := func(i int) int { return b.o.observerEvents*(i+1)/blocks - b.o.observerEvents*i/blocks }
	for i := 0; i < blocks; i++ {
		n := share(i)
		for j := 0; j < n; j++ {
			floorSeq++
			lat, _, err := b.floor.one(ctx, floorSeq)
			if err != nil {
				return fmt.Errorf("observers floor: %w", err)
			}
			res.Floor = append(res.Floor, lat)
		}
		for k := range agents {
			x := (k + i) % len(agents) // each block starts with the next agent
			a, r := agents[x], &res.Driver[x]
			before := b.st.snap()
			for j := 0; j < n; j++ {
				drv, app, obs, err := one(a, int64(j))
				if err != nil {
					return fmt.Errorf("observers (%d observers): %w", counts[x], err)
				}
				r.Lat, r.Append = append(r.Lat, drv), append(r.Append, app)
				res.Obs[x] = append(res.Obs[x], obs...)
			}
			notifier.FlushAll()
			b.st.settle(ctx)
			r.Cost = r.Cost.add(before.to(b.st.snap()))
			r.Events += n
		}
		b.progress("observers: %d/%d events per agent", len(res.Driver[0].Lat), b.o.observerEvents)
	}
	b.res.observers = res
	return nil
}

// observersTarget is the bound on what observers may cost the driver: its tail
// with the most observers measured within 1.2× of its tail with none.
var observersTarget = target{"≤ 1.2× none", func(_, r float64) bool { return r <= 1.2 }}

// figures adds the observers phase's figures: the driver's tail p50 and p99 by count
// of observers — with none beside the floor, with some beside none (the most held to
// observersTarget) — the observers' own tail, and the cost per appended event by count,
// gateway posts beside their floor of one per reader.
func (res observersResult) figures(add func(section, name, unit string, value float64, floor *float64, t target)) {
	if len(res.Counts) == 0 || len(res.Driver[0].Lat) == 0 {
		return
	}
	fl := func(v float64) *float64 { return &v }
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	most := len(res.Counts) - 1
	sec := fmt.Sprintf("observers: driver's tail, append → driver receive, fast path (%d events per agent)", len(res.Driver[0].Lat))
	for _, p := range []float64{50, 99} {
		none := msf(percentile(res.Driver[0].Lat, p))
		add(sec, fmt.Sprintf("driver p%g, no observers (floor: PutItem + post)", p), "ms", none, fl(msf(percentile(res.Floor, p))), noTarget)
		for i := 1; i < len(res.Counts); i++ {
			t := noTarget
			if i == most {
				t = observersTarget
			}
			add(sec, fmt.Sprintf("driver p%g, %d observer%s (floor: no observers)", p, res.Counts[i], plural(res.Counts[i])), "ms",
				msf(percentile(res.Driver[i].Lat, p)), fl(none), t)
		}
	}
	for _, p := range []float64{50, 99} {
		add(sec, fmt.Sprintf("observers p%g, %d observers (floor: their driver)", p, res.Counts[most]), "ms",
			msf(percentile(res.Obs[most], p)), fl(msf(percentile(res.Driver[most].Lat, p))), noTarget)
	}
	// The append shares the store with every seat's sender: on one DynamoDB Local it
	// slows with their writes, on DynamoDB it does not (other items).
	for i, n := range res.Counts {
		if len(res.Driver[i].Append) > 0 {
			add(sec, fmt.Sprintf("of which the append p50, %d observer%s (floor: no observers)", n, plural(n)), "ms",
				msf(percentile(res.Driver[i].Append, 50)), fl(msf(percentile(res.Driver[0].Append, 50))), noTarget)
		}
	}
	sec = "observers: cost per appended event"
	for i, n := range res.Counts {
		c, ev := res.Driver[i].Cost, float64(max(res.Driver[i].Events, 1))
		readers := float64(n + 1)
		add(sec, fmt.Sprintf("gateway posts / event, %d observer%s (floor: one per reader)", n, plural(n)), "msgs", float64(c.posts())/ev, fl(readers), atMost(readers))
		add(sec, fmt.Sprintf("read units / event, %d observer%s (no Scan)", n, plural(n)), "RRU", deployedReads(c)/ev, nil, noTarget)
		add(sec, fmt.Sprintf("write units / event, %d observer%s", n, plural(n)), "WRU", c.wru()/ev, nil, noTarget)
		add(sec, fmt.Sprintf("Lambda invocations / event, %d observer%s", n, plural(n)), "invocations", float64(c.Inv.total())/ev, nil, noTarget)
	}
}

// deployedReads is c's read units less the local schedule engine's Scan of the agents
// table (schedule.Service.All: terret dev's only, run on a timer, so it grows with the
// phase's time, not with its events).
func deployedReads(c phaseCost) float64 {
	return c.DDB.sum(func(k opKey) bool { return k.Service == "DynamoDB" && k.Op != "Scan" }).RRU
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// reportObservers adds the observers phase to r: its figures, and each count's cost
// by request and as a cost row ("observers_<n>", per appended event).
func (b *bench) reportObservers(r *report) {
	res := b.res.observers
	res.figures(r.add)
	r.Settings["observer_events"], r.Settings["observer_counts"] = b.o.observerEvents, b.o.observerCounts
	for i, n := range res.Counts {
		d := res.Driver[i]
		r.addBreakdown(b, fmt.Sprintf("observers: %d observer%s", n, plural(n)), d.Cost, int64(d.Events))
		r.CostFigures[fmt.Sprintf("observers_%d", n)] = costRowOf("event", d.Cost, int64(d.Events), b.st.cfg.LogTable, 0)
	}
}
