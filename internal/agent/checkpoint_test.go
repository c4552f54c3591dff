package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/invoke"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tables"
	"github.com/terret/terret-ws/internal/tools"
)

// nopInvoker records runner invocations without running them: the test runs the
// runner itself, one invocation at a time.
type nopInvoker struct{ calls atomic.Int64 }

func (n *nopInvoker) Invoke(context.Context, *invoke.Input) (*invoke.Output, error) {
	n.calls.Add(1)
	return &invoke.Output{StatusCode: 202}, nil
}

// readsLog records the lowest seq any Read of the log started at.
type readsLog struct {
	agent.Log
	mu  sync.Mutex
	low int64
}

func (r *readsLog) Read(ctx context.Context, id string, from int64, limit int) ([]sessionlog.Event, error) {
	r.mu.Lock()
	r.low = min(r.low, from)
	r.mu.Unlock()
	return r.Log.Read(ctx, id, from, limit)
}

func (r *readsLog) lowest() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.low
}

func (r *readsLog) reset() {
	r.mu.Lock()
	r.low = 1 << 62
	r.mu.Unlock()
}

// aged is one agent with a seeded log, its runner driven by the test.
type aged struct {
	t      *testing.T
	ctx    context.Context
	id     string
	names  tables.Names
	plain  *sessionlog.Log
	reads  *dynamotest.ReadUnits
	logged *readsLog
	svc    *agent.Service
	runner *agent.Runner
	cfg    agent.Config
}

// newAged seeds an agent's log with n events after session/created (seedLog) and wires
// a Service and Runner whose reads are metered.
func newAged(t *testing.T, names tables.Names, n int, prof tools.Profile, change func(*agent.Config)) *aged {
	t.Helper()
	a := &aged{t: t, ctx: context.Background(), id: dynamotest.UniqueName("aged-"), names: names, reads: &dynamotest.ReadUnits{}}
	db := dynamotest.Client(t)
	a.plain = sessionlog.New(db, names["LogTable"])
	if _, err := a.plain.Create(a.ctx, a.id); err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		seedLog(t, db, names["LogTable"], a.id, n)
	}
	mdb := a.reads.Client(t)
	a.logged = &readsLog{Log: sessionlog.New(mdb, names["LogTable"])}
	a.logged.reset()
	a.cfg = agent.Config{Log: a.logged, DB: mdb, AgentsTable: names["AgentsTable"], Invoker: &nopInvoker{}, RunnerFunction: runnerFunction,
		Profile: &prof, Approvals: true, LeaseDuration: testLease, DeadlineMargin: time.Second}
	if change != nil {
		change(&a.cfg)
	}
	a.restart()
	return a
}

// restart makes a new Service and Runner, as a cold start does.
func (a *aged) restart() {
	a.t.Helper()
	var err error
	if a.svc, err = agent.New(a.cfg); err != nil {
		a.t.Fatal(err)
	}
	if a.runner, err = agent.NewRunner(a.cfg); err != nil {
		a.t.Fatal(err)
	}
}

// turn injects a waking text and runs one runner invocation; it returns the events the
// turn appended (read from the tip before it).
func (a *aged) turn(text string) []sessionlog.Event {
	a.t.Helper()
	from := a.tip() + 1
	if err := a.svc.Inject(a.ctx, a.id, text, true); err != nil {
		a.t.Fatal(err)
	}
	if err := a.runner.Run(a.ctx, a.id); err != nil {
		a.t.Fatalf("run: %v", err)
	}
	return a.since(from)
}

func (a *aged) tip() int64 {
	a.t.Helper()
	tip, err := a.plain.Tip(a.ctx, a.id)
	if err != nil {
		a.t.Fatal(err)
	}
	return tip
}

func (a *aged) since(from int64) []sessionlog.Event {
	a.t.Helper()
	evs, err := a.plain.Read(a.ctx, a.id, from, 1<<30)
	if err != nil {
		a.t.Fatal(err)
	}
	return evs
}

// checkpointSeq reads the checkpoint's seq from the state item (-1: none).
func (a *aged) checkpointSeq() int64 {
	a.t.Helper()
	out, err := dynamotest.Client(a.t).GetItem(a.ctx, &dynamodb.GetItemInput{TableName: aws.String(a.names["AgentsTable"]),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "agent#" + a.id}, "sk": &types.AttributeValueMemberS{Value: "state"}},
		ConsistentRead: aws.Bool(true)})
	if err != nil {
		a.t.Fatal(err)
	}
	ck, ok := out.Item["ck"].(*types.AttributeValueMemberM)
	if !ok {
		return -1
	}
	var seq int64
	if v, ok := ck.Value["seq"].(*types.AttributeValueMemberN); ok {
		fmt.Sscan(v.Value, &seq)
	}
	return seq
}

// historyFloor reads the checkpoint's history floor (ck.hist.floor) from the state
// item: below it, events may expire (-1: none).
func (a *aged) historyFloor() int64 {
	a.t.Helper()
	out, err := dynamotest.Client(a.t).GetItem(a.ctx, &dynamodb.GetItemInput{TableName: aws.String(a.names["AgentsTable"]),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "agent#" + a.id}, "sk": &types.AttributeValueMemberS{Value: "state"}},
		ConsistentRead: aws.Bool(true)})
	if err != nil {
		a.t.Fatal(err)
	}
	ck, _ := out.Item["ck"].(*types.AttributeValueMemberM)
	if ck == nil {
		return -1
	}
	h, _ := ck.Value["hist"].(*types.AttributeValueMemberM)
	if h == nil {
		return -1
	}
	var floor int64 = -1
	if v, ok := h.Value["floor"].(*types.AttributeValueMemberN); ok {
		fmt.Sscan(v.Value, &floor)
	}
	return floor
}

// foldItem is one of the agent's fold items: the seqs it covers and its TTL.
type foldItem struct {
	from, to, expires int64
	key               map[string]types.AttributeValue
}

// folds reads the agent's fold items (sk "fold#…"), ascending.
func (a *aged) folds() []foldItem {
	a.t.Helper()
	out, err := dynamotest.Client(a.t).Query(a.ctx, &dynamodb.QueryInput{TableName: aws.String(a.names["AgentsTable"]),
		KeyConditionExpression: aws.String("pk = :p AND begins_with(sk, :f)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":p": &types.AttributeValueMemberS{Value: "agent#" + a.id}, ":f": &types.AttributeValueMemberS{Value: "fold#"}},
		ConsistentRead: aws.Bool(true)})
	if err != nil {
		a.t.Fatal(err)
	}
	var fs []foldItem
	for _, it := range out.Items {
		f := foldItem{key: map[string]types.AttributeValue{"pk": it["pk"], "sk": it["sk"]}}
		fmt.Sscan(strings.TrimPrefix(it["sk"].(*types.AttributeValueMemberS).Value, "fold#"), &f.from)
		fmt.Sscan(it["to"].(*types.AttributeValueMemberN).Value, &f.to)
		if e, ok := it["expires_at"].(*types.AttributeValueMemberN); ok {
			fmt.Sscan(e.Value, &f.expires)
		}
		fs = append(fs, f)
	}
	return fs
}

// seedLog writes n events (seq 1..n) with BatchWriteItem, as an agent from before
// checkpoints left them: a policy/updated allowing only echo and guarded_echo at seq
// 1, then completed turns of four events each (user/message, turn/start, one final
// assistant/chunk, turn/end), padded with policy-free session events to n.
func seedLog(t *testing.T, db *dynamodb.Client, table, id string, n int) {
	t.Helper()
	at := time.Now().UTC().Format(sessionlog.TimeFormat)
	ev := func(seq int64, typ string, payload any) sessionlog.Event {
		b, _ := json.Marshal(payload)
		return sessionlog.Event{ID: fmt.Sprintf("ev_seed_%d", seq), SessionID: id, Seq: seq, At: at, Type: typ, Payload: b}
	}
	events := make([]sessionlog.Event, 0, n)
	events = append(events, ev(1, agent.TypePolicyUpdated, map[string]any{"patterns": []string{"echo", "guarded_echo"}}))
	for seq := int64(2); seq <= int64(n); {
		turn := fmt.Sprintf("turn_seed_%d", seq)
		if int64(n)-seq+1 < 4 {
			events = append(events, ev(seq, agent.TypeSessionTitled, map[string]any{"title": "seeded"}))
			seq++
			continue
		}
		events = append(events,
			ev(seq, agent.TypeUserMessage, map[string]any{"text": fmt.Sprintf("question %d about the weather in town", seq), "turn_id": turn}),
			ev(seq+1, agent.TypeTurnStart, map[string]any{"turn_id": turn}),
			ev(seq+2, agent.TypeAssistantChunk, map[string]any{"text": fmt.Sprintf("answer %d: sunny, 21 degrees", seq), "index": 0, "final": true}),
			ev(seq+3, agent.TypeTurnEnd, map[string]any{"turn_id": turn, "status": "completed"}))
		seq += 4
	}
	writeEvents(t, db, table, events)
}

// writeEvents writes events to the log table with BatchWriteItem, 25 a request from
// 8 goroutines, as a runner of before checkpoints (or another writer) left them.
func writeEvents(t *testing.T, db *dynamodb.Client, table string, events []sessionlog.Event) {
	t.Helper()
	var wg sync.WaitGroup
	batches := make(chan []sessionlog.Event)
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				reqs := make([]types.WriteRequest, len(b))
				for i, e := range b {
					reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: e.Item()}}
				}
				in := &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}}
				for len(in.RequestItems[table]) > 0 {
					out, err := db.BatchWriteItem(context.Background(), in)
					if err != nil {
						errs <- err
						return
					}
					in.RequestItems = out.UnprocessedItems
				}
			}
		}()
	}
	for i := 0; i < len(events); i += 25 {
		batches <- events[i:min(i+25, len(events))]
	}
	close(batches)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("seed log: %v", err)
	default:
	}
}

func lastTurnEndOf(t *testing.T, evs []sessionlog.Event) map[string]any {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == agent.TypeTurnEnd {
			return payload(evs[i])
		}
	}
	t.Fatalf("no turn/end in:\n%s", dump(evs))
	return nil
}

// agedSizes are the log lengths TestCheckpointReadsDoNotGrowWithAge compares: a young
// log and one fifty times older under make soak (SOAK=1: 100,000 events, about twenty
// minutes under -race), five times older in make test.
func agedSizes() []int {
	if os.Getenv("SOAK") == "1" {
		return []int{2_000, 100_000}
	}
	return []int{2_000, 10_000}
}

func agedProfile(budget int64) tools.Profile {
	p := tools.DefaultProfile()
	p.Context.BudgetTokens = budget
	return p
}

// TestCheckpointReadsDoNotGrowWithAge: on a log of 10,000 events (100,000 under make
// soak) from before checkpoints, the first invocation builds the checkpoint (and
// compacts the history into the budget); from then on a plain turn reads no event below
// the checkpoint and as many read units as on a 2,000-event log, and the policy set at seq 1 is in force.
func TestCheckpointReadsDoNotGrowWithAge(t *testing.T) {
	t.Parallel() // the 100,000-event seeding overlaps the rest of the package
	names := testTables(t)
	const budget = 4000
	rru := map[int]float64{}
	sizes := agedSizes()
	for _, n := range sizes {
		a := newAged(t, names, n, agedProfile(budget), nil)
		if got := a.checkpointSeq(); got != -1 {
			t.Fatalf("%d events: checkpoint before any run = %d", n, got)
		}
		first := a.turn("warm up")
		if te := lastTurnEndOf(t, first); te["status"] != agent.StatusCompleted {
			t.Fatalf("%d events: first turn %v", n, te)
		}
		ck := a.checkpointSeq()
		if n > 1000 && ck < int64(n)/2 {
			t.Fatalf("%d events: checkpoint at %d after the first run, want most of the log behind it", n, ck)
		}
		for round := range 3 {
			a.reads.Reset()
			a.logged.reset()
			ck := a.checkpointSeq()
			evs := a.turn(fmt.Sprintf("hello %d", round))
			te := lastTurnEndOf(t, evs)
			if te["status"] != agent.StatusCompleted || chunkText(evs) != fmt.Sprintf("hello %d", round) {
				t.Fatalf("%d events: turn %d: %v\n%s", n, round, te, dump(evs))
			}
			if low := a.logged.lowest(); low < ck {
				t.Fatalf("%d events: turn %d read the log from seq %d, below the checkpoint %d", n, round, low, ck)
			}
			rru[n] = a.reads.Units("")
			t.Logf("%d events: turn %d: log %.1f agents %.1f, read from %d, checkpoint %d, tip %d", n, round, a.reads.Units(names["LogTable"]), a.reads.Units(names["AgentsTable"]), a.logged.lowest(), ck, a.tip())
		}
		// The policy seeded at seq 1, long behind the checkpoint, still holds: clock is
		// refused, echo runs.
		evs := a.turn(script(`{"call":[{"tool":"clock","args":{}},{"tool":"echo","args":{"text":"x"}}]}`, `{"say":"ok"}`))
		results := ofType(evs, agent.TypeToolResult)
		if len(results) != 2 || !strings.Contains(string(results[0].Payload), agent.ErrTextPolicy) || !strings.Contains(string(results[1].Payload), `"text":"x"`) {
			t.Fatalf("%d events: the seeded policy is not in force:\n%s", n, dump(evs))
		}
		t.Logf("%d events: checkpoint %d, read units of a plain turn %.1f", n, a.checkpointSeq(), rru[n])
	}
	young, old := sizes[0], sizes[len(sizes)-1]
	if rru[old] > rru[young]*1.2 {
		t.Fatalf("a plain turn reads %.1f units on a %d-event log, %.1f on a %d-event one", rru[old], old, rru[young], young)
	}
}
