package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/invoke"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/model/openai"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
)

// The age phase: does a turn cost the same at any age? On logs of 100, 10,000 and
// 100,000 events (-age-sizes; seeded with BatchWriteItem before the stack starts,
// outside the figures) an agent whose main model is an OpenAI-compatible server in
// this process (2,000 characters a turn) runs a warm-up turn — the first invocation
// builds the runner's checkpoint and compacts the history into the budget — and then
// -age-rounds plain turns, each one runner invocation driven here. The turns go in
// paired rounds: each round runs one turn on every log back to back, youngest first
// in even rounds and oldest first in odd ones, so that the machine's load of the
// moment falls on all alike. Per turn: the read and write units (the meter on the agent
// runtime's own client; a refused conditional write priced 1 WRU), the runner
// invocations the Service asked for, inject → turn/end, the runner's peak heap over the
// heap before it, and the bytes of the model requests.
//
// A second case (-age-cases streaming) takes logs that never compact: an agent that
// streams, its events mostly assistant/chunk — four seeded turns whose answers hold
// ageStreamText characters in all, whatever the log's length, so every log has the same
// history — on a budget of ageStreamBudget tokens, which that history and the measured
// turns stay under. The warm-up turn folds the seeded history (docs/architecture.md,
// "The history fold"); the turns after it must read what the history holds, not the
// events.

const (
	ageBudget = 2000 // context.budget_tokens
	ageReply  = 2000 // characters of each answer

	ageStreamBudget = 64000  // context.budget_tokens of the streaming case
	ageStreamText   = 100000 // characters of the streaming case's seeded answers, in all
)

// ageCase is one case of the age phase: compacting (every few turns compact) or
// streaming (mostly chunks, never compacts).
type ageCase struct {
	name   string
	budget int64
	agent  func(size int) string
	seed   func(ctx context.Context, db *dynamodb.Client, table, id string, n int) error
}

var ageCases = []ageCase{
	{name: "compacting", budget: ageBudget, agent: ageAgent, seed: seedAged},
	{name: "streaming", budget: ageStreamBudget, agent: func(n int) string { return fmt.Sprintf("age-stream-%d", n) }, seed: seedStreaming},
}

// ageCasesOf parses -age-cases.
func ageCasesOf(s string) ([]ageCase, error) {
	var out []ageCase
	for _, f := range strings.Split(s, ",") {
		i := slices.IndexFunc(ageCases, func(c ageCase) bool { return c.name == strings.TrimSpace(f) })
		if i < 0 {
			return nil, fmt.Errorf("-age-cases %q: want compacting, streaming or both, comma-separated", s)
		}
		out = append(out, ageCases[i])
	}
	return out, nil
}

// ageRequestBound is the most bytes a model request may carry on the budget: the
// history at about 4 bytes a token, the summary (at most budget_tokens bytes), and
// 6 KB for the system prompt, the tools and the JSON around them.
const ageRequestBound = 4*ageBudget + ageBudget + 6000

type ageResult struct {
	Events      int     `json:"events"`
	RRU         float64 `json:"rru_per_turn"`
	WRU         float64 `json:"wru_per_turn"`
	Invocations float64 `json:"invocations_per_turn"`
	// P50 is the median of this log's turns (inject → turn/end). Paired is the turn
	// of the median round — the round whose ratio of this log's turn to the youngest
	// log's turn in the same round is the median of the rounds' — and PairedFloor that
	// round's turn on the youngest log: Paired/PairedFloor is the median ratio.
	P50         float64 `json:"p50_ms"`
	Paired      float64 `json:"paired_ms"`
	PairedFloor float64 `json:"paired_floor_ms"`
	// PeakHeapMB is the runner's peak heap over the heap before the turn: the larger of
	// the least of the compacting turns' and the least of the others'. The heap is the
	// process's, and the stack's own goroutines (the stream pollers, delivery) only add
	// to it when they happen to run during a turn: the least of several turns is the
	// tightest bound on the runner's, taken for both kinds of turn.
	PeakHeapMB   float64   `json:"peak_heap_mb"`
	RequestBytes int       `json:"max_model_request_bytes"`
	WarmUpMS     float64   `json:"warm_up_ms"`
	TurnsMS      []float64 `json:"turns_ms"` // by round
	HeapMB       []float64 `json:"peak_heap_mb_turns"`
	Compacted    []bool    `json:"compacted_turns"` // the turns that logged a context/compacted
}

// ageServer is the OpenAI-compatible chat-completions server: every answer is ageReply
// characters, streamed with a usage chunk; it records the largest request body.
type ageServer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	largest int
}

func newAgeServer() *ageServer {
	s := &ageServer{}
	reply, _ := json.Marshal(strings.Repeat("Sunny and mild. ", ageReply/16))
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.largest = max(s.largest, len(body))
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":` + string(reply) + `},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, len(body)/4, ageReply/4),
			`[DONE]`,
		} {
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
	}))
	return s
}

func (s *ageServer) takeLargest() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.largest
	s.largest = 0
	return n
}

type countInvoker struct{ n atomic.Int64 }

func (c *countInvoker) Invoke(context.Context, *invoke.Input) (*invoke.Output, error) {
	c.n.Add(1)
	return &invoke.Output{StatusCode: 202}, nil
}

// ageSizes parses -age-sizes: log lengths, ascending, the first the floor.
func ageSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 10 || (len(out) > 0 && n <= out[len(out)-1]) {
			return nil, fmt.Errorf("-age-sizes %q: want ascending event counts of at least 10, comma-separated", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func ageAgent(size int) string { return fmt.Sprintf("age-%d", size) }

// seedAge seeds the age phase's logs, before the stack starts (seedAll).
func (b *bench) seedAge(ctx context.Context) error {
	sizes, err := ageSizes(b.o.ageSizes)
	if err != nil {
		return err
	}
	cases, err := ageCasesOf(b.o.ageCases)
	if err != nil {
		return err
	}
	began := time.Now()
	total := 0
	for _, c := range cases {
		for _, n := range sizes {
			if err := c.seed(ctx, b.st.raw, b.st.cfg.LogTable, c.agent(n), n); err != nil {
				return fmt.Errorf("seed %d events for the age phase (%s): %w", n, c.name, err)
			}
			total += n
		}
	}
	b.res.ageSeeded = time.Since(began)
	b.progress("seeded %d events for the age phase in %v", total, b.res.ageSeeded.Round(time.Millisecond))
	return nil
}

// ageTurn is one measured turn.
type ageTurn struct {
	wall      time.Duration
	heap      uint64
	units     opStat
	invoked   int64
	requests  int  // the largest model request's bytes
	compacted bool // it logged a context/compacted
}

func (b *bench) runAge(ctx context.Context) error {
	cases, err := ageCasesOf(b.o.ageCases)
	if err != nil {
		return err
	}
	for _, c := range cases {
		res, err := b.runAgeCase(ctx, c)
		if err != nil {
			return fmt.Errorf("age (%s): %w", c.name, err)
		}
		if c.name == "streaming" {
			b.res.ageStream = res
		} else {
			b.res.age = res
		}
	}
	return nil
}

func (b *bench) runAgeCase(ctx context.Context, c ageCase) ([]ageResult, error) {
	sizes, err := ageSizes(b.o.ageSizes)
	if err != nil {
		return nil, err
	}
	streaming := c.name == "streaming"
	srv := newAgeServer()
	defer srv.srv.Close()
	p, err := openai.NewProvider(http.DefaultClient, openai.Config{BaseURL: srv.srv.URL + "/v1"})
	if err != nil {
		return nil, err
	}
	reg := model.NewRegistry()
	if err := reg.Register("bench", p); err != nil {
		return nil, err
	}
	m := newMeter()
	db := b.st.cfg.DynamoDB(m.install(b.st.awsCfg))
	prof := tools.DefaultProfile()
	prof.Context.BudgetTokens = c.budget
	inv := &countInvoker{}
	cfg := agent.Config{Log: sessionlog.New(db, b.st.cfg.LogTable), DB: db, AgentsTable: b.st.cfg.AgentsTable, Invoker: inv,
		RunnerFunction: "bench-age-runner", Models: reg, MainModel: "bench/age-model", Profile: &prof, Logger: b.st.logger}
	svc, err := agent.New(cfg)
	if err != nil {
		return nil, err
	}
	runner, err := agent.NewRunner(cfg)
	if err != nil {
		return nil, err
	}
	plain := sessionlog.New(b.st.raw, b.st.cfg.LogTable)
	turn := func(size int, text string) (ageTurn, error) {
		id := c.agent(size)
		from, err := plain.Tip(ctx, id)
		if err != nil {
			return ageTurn{}, err
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		peak := base
		done := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(2 * time.Millisecond)
			defer t.Stop()
			for {
				var s runtime.MemStats
				runtime.ReadMemStats(&s)
				peak = max(peak, s.HeapAlloc)
				select {
				case <-done:
					return
				case <-t.C:
				}
			}
		}()
		srv.takeLargest()
		before, invBefore := m.snapshot(), inv.n.Load()
		t0 := time.Now()
		err = svc.Inject(ctx, id, text, true)
		if err == nil {
			err = runner.Run(ctx, id)
		}
		took := time.Since(t0)
		close(done)
		<-sampled
		if err != nil {
			return ageTurn{}, err
		}
		at := ageTurn{wall: took, heap: peak - base, units: m.snapshot().since(before).sum(dynamo), invoked: inv.n.Load() - invBefore, requests: srv.takeLargest()}
		evs, err := plain.Read(ctx, id, from+1, 1000)
		if err != nil || len(evs) == 0 || evs[len(evs)-1].Type != agent.TypeTurnEnd || !strings.Contains(string(evs[len(evs)-1].Payload), `"completed"`) {
			return ageTurn{}, fmt.Errorf("turn on the %d-event log did not complete: %v %v", size, evs, err)
		}
		for _, ev := range evs {
			at.compacted = at.compacted || ev.Type == agent.TypeContextCompacted
		}
		return at, nil
	}
	res := make([]ageResult, len(sizes))
	turns := make([][]ageTurn, len(sizes))
	for i, size := range sizes {
		t, err := turn(size, "Warm up: what happened so far?")
		if err != nil {
			return nil, err
		}
		res[i] = ageResult{Events: size, WarmUpMS: msOf(t.wall)}
		if streaming {
			if t.compacted {
				return nil, fmt.Errorf("the warm-up turn on the %d-event streaming log compacted: its history is over the budget", size)
			}
			b.progress("age (%s): warm-up turn on %d events (checkpoint built, history folded) in %v", c.name, size, t.wall.Round(time.Millisecond))
			continue
		}
		b.progress("age: warm-up turn on %d events (checkpoint built, history compacted) in %v", size, t.wall.Round(time.Millisecond))
		// Every log then runs plain turns until two of them have compacted: from the
		// second on, what a compaction keeps is the same on every log (the turns since
		// the previous one, no seeded event), so every log compacts on the same rounds
		// and each round's turns do the same work whatever the log's age.
		for k, compacted := 0, 0; compacted < 2; k++ {
			if k == 12 {
				return nil, fmt.Errorf("%d compactions in 12 turns on the %d-event log, want 2", compacted, size)
			}
			if t, err = turn(size, fmt.Sprintf("Plain question %d: and the weather tomorrow?", k)); err != nil {
				return nil, err
			}
			if t.compacted {
				compacted++
			}
		}
	}
	rounds := max(b.o.ageRounds, 1)
	for r := range rounds {
		order := make([]int, len(sizes))
		for i := range order {
			order[i] = i
			if r%2 == 1 {
				order[i] = len(sizes) - 1 - i
			}
		}
		for _, i := range order {
			t, err := turn(sizes[i], fmt.Sprintf("Plain question %d: and the weather tomorrow?", r))
			if err != nil {
				return nil, err
			}
			if streaming && t.compacted {
				return nil, fmt.Errorf("a turn on the %d-event streaming log compacted: its history is over the budget", sizes[i])
			}
			turns[i] = append(turns[i], t)
		}
	}
	for i := range sizes {
		x := &res[i]
		for _, t := range turns[i] {
			x.RRU += t.units.RRU / float64(rounds)
			x.WRU += (t.units.WRU + float64(t.units.CondFailed)) / float64(rounds)
			x.Invocations += float64(t.invoked) / float64(rounds)
			x.RequestBytes = max(x.RequestBytes, t.requests)
			x.TurnsMS = append(x.TurnsMS, msOf(t.wall))
			x.HeapMB = append(x.HeapMB, float64(t.heap)/(1<<20))
			x.Compacted = append(x.Compacted, t.compacted)
		}
	}
	summarizeAge(res)
	for _, x := range res {
		b.progress("age (%s): %d events: %.1f RRU, %.1f WRU, %.1f invocations a turn; inject→turn/end p50 %.0f ms, median round %.0f ms vs %.0f ms on %d events (%.2f×); runner peak heap %.2f MB; largest model request %d bytes (budget %d tokens)",
			c.name, x.Events, x.RRU, x.WRU, x.Invocations, x.P50, x.Paired, x.PairedFloor, sizes[0], x.Paired/x.PairedFloor, x.PeakHeapMB, x.RequestBytes, c.budget)
	}
	return res, nil
}

// summarizeAge sets each log's P50 (the median of its turns), its PeakHeapMB and its
// paired figure: the round whose ratio of this log's turn to the youngest log's (res[0])
// is the median of the rounds' ratios, that is Paired/PairedFloor — a ratio of two
// turns a second apart, under the same load.
func summarizeAge(res []ageResult) {
	for i := range res {
		x := &res[i]
		x.P50 = median(x.TurnsMS)
		least := map[bool]float64{}
		for r, h := range x.HeapMB {
			c := r < len(x.Compacted) && x.Compacted[r]
			if l, ok := least[c]; !ok || h < l {
				least[c] = h
			}
		}
		x.PeakHeapMB = max(least[true], least[false])
		rounds := min(len(x.TurnsMS), len(res[0].TurnsMS))
		if rounds == 0 {
			continue
		}
		ratios := make([]float64, rounds)
		for r := range rounds {
			ratios[r] = x.TurnsMS[r] / res[0].TurnsMS[r]
		}
		m := medianIndex(ratios)
		x.Paired, x.PairedFloor = x.TurnsMS[m], res[0].TurnsMS[m]
	}
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// medianIndex is the index of the median of xs (the lower middle one for an even
// count), as the replay's rounds take it.
func medianIndex(xs []float64) int {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(xs[a], xs[b]) })
	return idx[(len(idx)-1)/2]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[medianIndex(xs)]
}

// seedAged writes session/created and n events after it — a policy/updated, then
// completed turns of four events (user/message, turn/start, a final assistant/chunk,
// turn/end), padded with session/titled — as an agent from before checkpoints left
// them, with BatchWriteItem from several goroutines.
func seedAged(ctx context.Context, db *dynamodb.Client, table, id string, n int) error {
	at := time.Now().UTC().Format(sessionlog.TimeFormat)
	ev := func(seq int, typ string, payload any) sessionlog.Event {
		p, _ := json.Marshal(payload)
		return sessionlog.Event{ID: fmt.Sprintf("ev_age_%d", seq), SessionID: id, Seq: int64(seq), At: at, Type: typ, Payload: p}
	}
	evs := []sessionlog.Event{ev(0, "session/created", map[string]any{}), ev(1, agent.TypePolicyUpdated, map[string]any{"patterns": []string{"*"}})}
	for seq := 2; seq <= n; {
		if n-seq+1 < 4 {
			evs = append(evs, ev(seq, agent.TypeSessionTitled, map[string]any{"title": "aged"}))
			seq++
			continue
		}
		turn := fmt.Sprintf("turn_age_%d", seq)
		evs = append(evs,
			ev(seq, agent.TypeUserMessage, map[string]any{"text": fmt.Sprintf("question %d about the weather in town", seq), "turn_id": turn}),
			ev(seq+1, agent.TypeTurnStart, map[string]any{"turn_id": turn}),
			ev(seq+2, agent.TypeAssistantChunk, map[string]any{"text": fmt.Sprintf("answer %d: sunny, 21 degrees", seq), "index": 0, "final": true}),
			ev(seq+3, agent.TypeTurnEnd, map[string]any{"turn_id": turn, "status": "completed"}))
		seq += 4
	}
	return writeBatches(ctx, db, table, evs)
}

// writeBatches writes evs with BatchWriteItem, 25 a request, from 8 goroutines.
func writeBatches(ctx context.Context, db *dynamodb.Client, table string, evs []sessionlog.Event) error {
	batches := make(chan []sessionlog.Event)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for batch := range batches {
				reqs := make([]types.WriteRequest, len(batch))
				for i, e := range batch {
					reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: e.Item()}}
				}
				items := map[string][]types.WriteRequest{table: reqs}
				for len(items[table]) > 0 {
					out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: items})
					if err != nil {
						mu.Lock()
						first = err
						mu.Unlock()
						break
					}
					items = out.UnprocessedItems
				}
			}
		}()
	}
	for i := 0; i < len(evs); i += 25 {
		batches <- evs[i:min(i+25, len(evs))]
	}
	close(batches)
	wg.Wait()
	return first
}

// seedStreaming writes session/created and n events after it as a long-lived agent
// that streams left them: four completed turns (user/message, turn/start, the answer
// as many assistant/chunk events, turn/end), the first followed by its session/titled,
// padded with session/titled; the answers
// hold ageStreamText characters in all whatever n (at least one a chunk), so every
// log's history is the same size.
func seedStreaming(ctx context.Context, db *dynamodb.Client, table, id string, n int) error {
	at := time.Now().UTC().Format(sessionlog.TimeFormat)
	evs := []sessionlog.Event{}
	add := func(typ string, payload any) {
		p, _ := json.Marshal(payload)
		seq := len(evs)
		evs = append(evs, sessionlog.Event{ID: fmt.Sprintf("ev_age_%d", seq), SessionID: id, Seq: int64(seq), At: at, Type: typ, Payload: p})
	}
	add("session/created", map[string]any{})
	const turns = 4
	chunks := max((n-turns*3-1)/turns, 1)
	per := max(ageStreamText/(turns*chunks), 1)
	for k := range turns {
		turn := fmt.Sprintf("turn_age_stream_%d", k)
		add(agent.TypeUserMessage, map[string]any{"text": fmt.Sprintf("question %d: tell me a long story", k), "turn_id": turn})
		add(agent.TypeTurnStart, map[string]any{"turn_id": turn})
		for i := range chunks {
			c := map[string]any{"text": strings.Repeat("s", per), "index": i}
			if i == chunks-1 {
				c["final"] = true
				c["usage"] = map[string]any{"input_tokens": 100, "output_tokens": ageStreamText / turns / 4}
			}
			add(agent.TypeAssistantChunk, c)
		}
		add(agent.TypeTurnEnd, map[string]any{"turn_id": turn, "status": "completed"})
		if k == 0 {
			add(agent.TypeSessionTitled, map[string]any{"title": "a long story"})
		}
	}
	for len(evs) <= n {
		add(agent.TypeSessionTitled, map[string]any{"title": "streaming"})
	}
	return writeBatches(ctx, db, table, evs)
}

// ageMetrics are the age phase's figures of a log; each is held, at the oldest log,
// to 1.2× the youngest log's (a turn costs the same at any age).
var ageMetrics = []struct {
	name, unit string
	v          func(ageResult) float64
}{
	{"read units / turn", "RRU", func(x ageResult) float64 { return x.RRU }},
	{"write units / turn", "WRU", func(x ageResult) float64 { return x.WRU }},
	{"runner invocations / turn", "invocations", func(x ageResult) float64 { return x.Invocations }},
	{"runner peak heap over the heap before the turn", "MB", func(x ageResult) float64 { return x.PeakHeapMB }},
	{"largest model request", "bytes", func(x ageResult) float64 { return float64(x.RequestBytes) }},
}

// reportAge adds the age phase's figures: per log length, each metric beside the
// youngest log's, the oldest log's held to ≤ 1.2× it; inject → turn/end as the median
// of the paired rounds' ratios; the model request against the budget's bound.
func (b *bench) reportAge(r *report, add func(section, name, unit string, value float64, floor *float64, t target)) {
	if len(b.res.age) == 0 && len(b.res.ageStream) == 0 {
		return
	}
	r.Age, r.AgeStreaming = b.res.age, b.res.ageStream
	r.Settings["age_sizes"], r.Settings["age_rounds"], r.Settings["age_cases"] = b.o.ageSizes, b.o.ageRounds, b.o.ageCases
	r.Settings["age_budget_tokens"], r.Settings["age_reply_chars"] = ageBudget, ageReply
	r.Settings["age_streaming_budget_tokens"], r.Settings["age_streaming_text_chars"] = ageStreamBudget, ageStreamText
	r.Settings["age_seeded_s"] = b.res.ageSeeded.Seconds()
	if rs := b.res.age; len(rs) > 0 {
		reportAgeCase(rs, fmt.Sprintf("age: a plain turn on an aged log, %d paired rounds (floor: the %d-event log)", len(rs[0].TurnsMS), rs[0].Events), ageBudget, add)
	}
	if rs := b.res.ageStream; len(rs) > 0 {
		reportAgeCase(rs, fmt.Sprintf("age, streaming: a plain turn on an aged log of chunks that never compacts, %d paired rounds (floor: the %d-event log)", len(rs[0].TurnsMS), rs[0].Events), ageStreamBudget, add)
	}
	add("age", "seeding (BatchWriteItem, not part of the figures)", "s", b.res.ageSeeded.Seconds(), nil, noTarget)
}

// reportAgeCase adds one case's figures under sec; budget is its budget_tokens.
func reportAgeCase(rs []ageResult, sec string, budget int64, add func(section, name, unit string, value float64, floor *float64, t target)) {
	young, oldest := rs[0], rs[len(rs)-1].Events
	targetAt := func(x ageResult) target {
		if x.Events == oldest && oldest != young.Events {
			return ratioAtMost(1.2)
		}
		return noTarget
	}
	for _, x := range rs {
		name := fmt.Sprintf("%d events: inject → turn/end, median round", x.Events)
		if x.Events == young.Events {
			add(sec, fmt.Sprintf("%d events: inject → turn/end p50", x.Events), "ms", x.P50, nil, noTarget)
			continue
		}
		// The median round's pair: its ratio is the median of the rounds' ratios.
		pf := x.PairedFloor
		add(sec, name, "ms", x.Paired, &pf, targetAt(x))
	}
	for _, m := range ageMetrics {
		base := m.v(young)
		for _, x := range rs {
			var floor *float64
			if x.Events != young.Events {
				floor = &base
			}
			add(sec, fmt.Sprintf("%d events: %s", x.Events, m.name), m.unit, m.v(x), floor, targetAt(x))
		}
	}
	reqBound := float64(4*budget + budget + 6000)
	bound := target{fmt.Sprintf("≤ %.0f B (budget %d tokens)", reqBound, budget), func(v, _ float64) bool { return v <= reqBound }}
	for _, x := range rs {
		add(sec, fmt.Sprintf("%d events: largest model request, bounded by the budget", x.Events), "bytes", float64(x.RequestBytes), nil, bound)
	}
}
