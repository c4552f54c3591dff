package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fleetResult is one fleet size of the agents phase: N agents, each with one client
// subscribed, running turns at the same time.
type fleetResult struct {
	Agents    int
	TurnsEach int
	Events    int64           // events the clients received in the counted turns
	Lat       []time.Duration // per received event: its append (the envelope's at) → receipt
	TurnWall  []time.Duration // per turn: inject sent → turn/end received
	Cost      phaseCost       // the counted turns, from the first inject until the stack is quiet
	Turns     time.Duration   // first inject → last turn/end
}

// fleetTurnText is the waking inject of every fleet turn: the scripted model's plain
// reply (5 events), the cheapest turn through the whole runtime.
const fleetTurnText = "Summarise the benchmark in one line."

// agentCounts parses -agents ("10,50,200").
func agentCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-agents: %q is not a positive number of agents", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-agents: no fleet size")
	}
	return out, nil
}

// runAgents runs, for each fleet size N of -agents, N agents at once, each driven by its
// own subscribed client through -agent-turns plain turns after an uncounted first turn
// (which also titles the session). Per size: units, invocations and gateway messages
// per delivered event, the tail latency of every event (append → client receive) and
// each turn's wall time. Flat across N is the goal (docs/scale.md).
func (b *bench) runAgents(ctx context.Context) error {
	sizes, err := agentCounts(b.o.agents)
	if err != nil {
		return err
	}
	for _, n := range sizes {
		r, err := b.runFleet(ctx, n)
		if err != nil {
			return fmt.Errorf("%d agents: %w", n, err)
		}
		b.res.agents = append(b.res.agents, r)
		b.progress("agents: %d agents × %d turns: %d events, tail p50 %v p99 %v, turn p99 %v", n, r.TurnsEach, r.Events,
			percentile(r.Lat, 50).Round(time.Millisecond), percentile(r.Lat, 99).Round(time.Millisecond), percentile(r.TurnWall, 99).Round(time.Millisecond))
	}
	return nil
}

// fleetClient connects a client to agent and subscribes from 0. Its frames go to a
// channel of its own, smaller than connect's: hundreds of clients are open at once.
func (b *bench) fleetClient(ctx context.Context, agent string) (*wsClient, error) {
	token, err := b.st.tokens.Create(ctx, agent)
	if err != nil {
		return nil, fmt.Errorf("token for %s: %w", agent, err)
	}
	frames := make(chan frame, 1024)
	cl, err := dialAgent(ctx, b.st.dev.WebSocketURL(), agent, token, func(f frame) { frames <- f })
	if err != nil {
		return nil, err
	}
	cl.frames = frames
	if _, err := cl.until(time.Minute, func(f frame) bool { return f.Type == "hello" }); err != nil {
		cl.close()
		return nil, err
	}
	if err := cl.send(ctx, subscribe(0)); err != nil {
		cl.close()
		return nil, err
	}
	if _, err := cl.expectSeq(time.Minute, 0); err != nil {
		cl.close()
		return nil, err
	}
	return cl, nil
}

// fleetTurn sends a waking inject and reads to its turn/end: the events received, each
// one's append → receipt latency, and the turn's wall time.
func fleetTurn(ctx context.Context, cl *wsClient, text string) (lat []time.Duration, wall time.Duration, err error) {
	t0 := time.Now()
	if err := cl.send(ctx, map[string]any{"type": "inject", "text": text, "wake": true}); err != nil {
		return nil, 0, err
	}
	for {
		f, err := cl.next(2 * time.Minute)
		if err != nil {
			return lat, 0, err
		}
		if f.Type == "error" {
			return lat, 0, fmt.Errorf("%s: error frame %s", cl.agent, f.Code)
		}
		if f.Seq != nil {
			lat = append(lat, f.At.Sub(f.Logged))
		}
		if f.Type == "turn/end" {
			return lat, f.At.Sub(t0), nil
		}
	}
}

// runFleet measures one fleet size.
func (b *bench) runFleet(ctx context.Context, n int) (fleetResult, error) {
	r := fleetResult{Agents: n, TurnsEach: b.o.agentTurns}
	clients := make([]*wsClient, n)
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.close()
			}
		}
	}()
	runID := time.Now().UnixNano() % 1e6
	if err := parallel(16, n, func(i int) error {
		cl, err := b.fleetClient(ctx, fmt.Sprintf("fleet%d-%d-%d", n, runID, i))
		clients[i] = cl
		return err
	}); err != nil {
		return r, err
	}
	// The first turn of a session also runs the titler: not counted.
	if err := parallel(n, n, func(i int) error {
		_, _, err := fleetTurn(ctx, clients[i], "Warm up and title the session.")
		return err
	}); err != nil {
		return r, fmt.Errorf("warm-up turn: %w", err)
	}
	b.st.settle(ctx)
	for _, cl := range clients {
		drainFrames(cl)
	}

	var mu sync.Mutex
	before := b.st.snap()
	if err := parallel(n, n, func(i int) error {
		for range b.o.agentTurns {
			lat, wall, err := fleetTurn(ctx, clients[i], fleetTurnText)
			if err != nil {
				return err
			}
			mu.Lock()
			r.Lat = append(r.Lat, lat...)
			r.TurnWall = append(r.TurnWall, wall)
			mu.Unlock()
		}
		return nil
	}); err != nil {
		return r, err
	}
	r.Turns = time.Since(before.at)
	b.st.settle(ctx)
	// Events after a turn/end (none expected) still count, with their latency.
	for _, cl := range clients {
		r.Lat = append(r.Lat, drainFrames(cl)...)
	}
	r.Cost = before.to(b.st.snap())
	r.Events = int64(len(r.Lat))
	return r, nil
}

// drainFrames empties cl's frames without waiting and returns the latency of each
// event among them.
func drainFrames(cl *wsClient) (lat []time.Duration) {
	for {
		select {
		case f := <-cl.frames:
			if f.Seq != nil {
				lat = append(lat, f.At.Sub(f.Logged))
			}
		default:
			return lat
		}
	}
}

// reportAgents adds the agents phase's figures: per fleet size, the cost per delivered
// event and the latencies, each beside the smallest fleet's (the floor: flat is the
// goal).
func (b *bench) reportAgents(r *report, add func(section, name, unit string, value float64, floor *float64, t target)) {
	rs := b.res.agents
	if len(rs) == 0 {
		return
	}
	r.Settings["agents"], r.Settings["agent_turns"] = b.o.agents, b.o.agentTurns
	sec := fmt.Sprintf("agents: N concurrent agents, one subscribed client each, %d plain turns each (floor: the %d-agent fleet)", rs[0].TurnsEach, rs[0].Agents)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	type metric struct {
		name, unit string
		v          func(fleetResult) float64
	}
	perEvent := func(x float64, f fleetResult) float64 { return x / float64(max(f.Events, 1)) }
	ms2 := []metric{
		{"events delivered / turn", "events", func(f fleetResult) float64 {
			return float64(f.Events) / float64(max(f.Agents*f.TurnsEach, 1))
		}},
		{"write units / event", "WRU", func(f fleetResult) float64 { return perEvent(f.Cost.wru(), f) }},
		{"read units / event", "RRU", func(f fleetResult) float64 { return perEvent(f.Cost.rru(), f) }},
		{"Lambda invocations / event", "invocations", func(f fleetResult) float64 { return perEvent(float64(f.Cost.Inv.total()), f) }},
		{"gateway messages / event", "msgs", func(f fleetResult) float64 { return perEvent(float64(f.Cost.posts()), f) }},
		{"tail p50 (append → client receive)", "ms", func(f fleetResult) float64 { return ms(percentile(f.Lat, 50)) }},
		{"tail p99 (append → client receive)", "ms", func(f fleetResult) float64 { return ms(percentile(f.Lat, 99)) }},
		{"turn p50 (inject → turn/end)", "ms", func(f fleetResult) float64 { return ms(percentile(f.TurnWall, 50)) }},
		{"turn p99 (inject → turn/end)", "ms", func(f fleetResult) float64 { return ms(percentile(f.TurnWall, 99)) }},
		{"turns completed / s", "turns/s", func(f fleetResult) float64 {
			return float64(f.Agents*f.TurnsEach) / max(f.Turns.Seconds(), 1e-9)
		}},
	}
	for _, m := range ms2 {
		base := m.v(rs[0])
		for _, f := range rs {
			var floor *float64
			if f.Agents != rs[0].Agents {
				floor = &base
			}
			add(sec, fmt.Sprintf("N=%d: %s", f.Agents, m.name), m.unit, m.v(f), floor, noTarget)
		}
	}
	for _, f := range rs {
		r.addBreakdown(b, fmt.Sprintf("agents N=%d", f.Agents), f.Cost, f.Events)
		r.CostFigures[fmt.Sprintf("agents_%d", f.Agents)] = costRowOf("event", f.Cost, f.Events, b.st.cfg.LogTable, 0)
	}
}
