package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/model/openai"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
)

// The age phase: does a turn cost the same at any age? On logs of 100, 10,000 and
// 100,000 events (seeded with BatchWriteItem, outside the figures) an agent whose main
// model is an OpenAI-compatible server in this process (2,000 characters a turn) runs
// a warm-up turn — the first invocation builds the runner's checkpoint and compacts the
// history into the budget — and then ageTurns plain turns, each one runner invocation
// driven here. Per turn: the read and write units (the meter on the agent runtime's
// own client; a refused conditional write priced 1 WRU), the runner invocations the
// Service asked for, inject → turn/end, the runner's peak heap over the heap before it,
// and the bytes of the model request.

var ageSizes = []int{100, 10_000, 100_000}

const (
	ageTurns  = 5
	ageBudget = 2000 // context.budget_tokens
	ageReply  = 2000 // characters of each answer
)

type ageResult struct {
	Events       int     `json:"events"`
	RRU          float64 `json:"rru_per_turn"`
	WRU          float64 `json:"wru_per_turn"`
	Invocations  float64 `json:"invocations_per_turn"`
	P50          float64 `json:"p50_ms"`
	PeakHeapMB   float64 `json:"peak_heap_mb"`
	RequestBytes int     `json:"max_model_request_bytes"`
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

func (c *countInvoker) Invoke(context.Context, *lambda.InvokeInput, ...func(*lambda.Options)) (*lambda.InvokeOutput, error) {
	c.n.Add(1)
	return &lambda.InvokeOutput{StatusCode: 202}, nil
}

func (b *bench) runAge(ctx context.Context) error {
	srv := newAgeServer()
	defer srv.srv.Close()
	p, err := openai.NewProvider(http.DefaultClient, openai.Config{BaseURL: srv.srv.URL + "/v1"})
	if err != nil {
		return err
	}
	reg := model.NewRegistry()
	if err := reg.Register("bench", p); err != nil {
		return err
	}
	m := newMeter()
	db := b.st.cfg.DynamoDB(m.install(b.st.awsCfg))
	prof := tools.DefaultProfile()
	prof.Context.BudgetTokens = ageBudget
	inv := &countInvoker{}
	cfg := agent.Config{Log: sessionlog.New(db, b.st.cfg.LogTable), DB: db, AgentsTable: b.st.cfg.AgentsTable, Invoker: inv,
		RunnerFunction: "bench-age-runner", Models: reg, MainModel: "bench/age-model", Profile: &prof, Logger: b.st.logger}
	svc, err := agent.New(cfg)
	if err != nil {
		return err
	}
	runner, err := agent.NewRunner(cfg)
	if err != nil {
		return err
	}
	plain := sessionlog.New(b.st.raw, b.st.cfg.LogTable)
	for _, size := range ageSizes {
		id := fmt.Sprintf("age-%d-%d", size, time.Now().UnixNano()%1e9)
		began := time.Now()
		if err := seedAged(ctx, b.st.raw, b.st.cfg.LogTable, id, size); err != nil {
			return fmt.Errorf("seed %d events: %w", size, err)
		}
		b.progress("age: seeded %d events in %v", size, time.Since(began).Round(time.Millisecond))
		turn := func(text string) (time.Duration, uint64, error) {
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
			t0 := time.Now()
			err := svc.Inject(ctx, id, text, true)
			if err == nil {
				err = runner.Run(ctx, id)
			}
			took := time.Since(t0)
			close(done)
			<-sampled
			if err != nil {
				return 0, 0, err
			}
			tip, err := plain.Tip(ctx, id)
			if err != nil {
				return 0, 0, err
			}
			last, err := plain.Read(ctx, id, tip, 1)
			if err != nil || len(last) != 1 || last[0].Type != agent.TypeTurnEnd || !strings.Contains(string(last[0].Payload), `"completed"`) {
				return 0, 0, fmt.Errorf("turn on the %d-event log did not complete: %v %v", size, last, err)
			}
			return took, peak - base, nil
		}
		if _, _, err := turn("Warm up: what happened so far?"); err != nil {
			return err
		}
		srv.takeLargest()
		r := ageResult{Events: size}
		var walls []time.Duration
		var peak uint64
		before, invBefore := m.snapshot(), inv.n.Load()
		for i := range ageTurns {
			took, heap, err := turn(fmt.Sprintf("Plain question %d: and the weather tomorrow?", i))
			if err != nil {
				return err
			}
			walls = append(walls, took)
			peak = max(peak, heap)
		}
		u := m.snapshot().since(before).sum(dynamo)
		r.RRU = u.RRU / ageTurns
		r.WRU = (u.WRU + float64(u.CondFailed)) / ageTurns
		r.Invocations = float64(inv.n.Load()-invBefore) / ageTurns
		slices.Sort(walls)
		r.P50 = float64(walls[len(walls)/2].Microseconds()) / 1000
		r.PeakHeapMB = float64(peak) / (1 << 20)
		r.RequestBytes = srv.takeLargest()
		b.res.age = append(b.res.age, r)
		b.progress("age: %d events: %.1f RRU, %.1f WRU, %.1f invocations a turn; p50 inject→turn/end %.0f ms; runner peak heap %.1f MB; largest model request %d bytes (budget %d tokens)",
			size, r.RRU, r.WRU, r.Invocations, r.P50, r.PeakHeapMB, r.RequestBytes, ageBudget)
	}
	return nil
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
