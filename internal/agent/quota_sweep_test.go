package agent

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/invoke"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
)

// wakeCounter is the Invoke API as the sweep sees it: it counts the runner events per
// agent and runs nothing.
type wakeCounter struct {
	mu    sync.Mutex
	wakes map[string]int
}

func (w *wakeCounter) Invoke(_ context.Context, in *invoke.Input) (*invoke.Output, error) {
	var ev RunnerEvent
	if err := json.Unmarshal(in.Payload, &ev); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakes[ev.AgentID]++
	return &invoke.Output{StatusCode: 202}, nil
}

// queryBarrier holds every Query of the deferred-wake partition until n sweeps have
// made theirs, so that all of them see every marker before any claims one.
type queryBarrier struct {
	DB
	n       int
	mu      sync.Mutex
	arrived int
	all     chan struct{}
}

func (b *queryBarrier) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := b.DB.Query(ctx, in, opts...)
	b.mu.Lock()
	if b.arrived++; b.arrived == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return out, err
}

// TestSweepQuotasOnceEach: two sweeps running at once, both having read every marker,
// start exactly one runner per agent whose quota allows a turn, and delete those
// markers; the marker of an agent still over quota stays, and a later sweep starts
// nothing more.
func TestSweepQuotasOnceEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names := dynamotest.CreateTables(t)
	db := dynamotest.Client(t)
	table := names["AgentsTable"]
	st := &store{db: db, table: table}
	now := time.Now()
	prefix := dynamotest.UniqueName("sweep-")
	allowed := []string{prefix + "-a", prefix + "-b", prefix + "-c", prefix + "-d", prefix + "-e"}
	capped := prefix + "-capped"
	for _, id := range append(append([]string{}, allowed...), capped) {
		if err := st.deferWake(ctx, id, now); err != nil {
			t.Fatal(err)
		}
	}
	// The capped agent used its one turn today; "-a" used it yesterday (the day reset);
	// "-b" had its cap raised to 2.
	setCounters(t, st, capped, `{"quotas":{"turns_per_day":1}}`, now.UTC().Format(time.DateOnly), 1)
	setCounters(t, st, allowed[0], `{"quotas":{"turns_per_day":1}}`, now.UTC().AddDate(0, 0, -1).Format(time.DateOnly), 1)
	setCounters(t, st, allowed[1], `{"quotas":{"turns_per_day":2}}`, now.UTC().Format(time.DateOnly), 1)

	rn := &wakeCounter{wakes: map[string]int{}}
	barrier := &queryBarrier{DB: db, n: 2, all: make(chan struct{})}
	newRunner := func() *Runner {
		t.Helper()
		r, err := NewRunner(Config{Log: sessionlog.New(db, names["LogTable"]), DB: barrier, AgentsTable: table, Invoker: rn, RunnerFunction: "runner"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	sweeps := []*Runner{newRunner(), newRunner()} // two invocations of the function
	woken := make([]int, len(sweeps))
	var wg sync.WaitGroup
	for i, r := range sweeps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if woken[i], err = r.SweepQuotas(ctx); err != nil {
				t.Errorf("sweep %d: %v", i, err)
			}
		}()
	}
	wg.Wait()

	if got := woken[0] + woken[1]; got != len(allowed) {
		t.Errorf("sweeps woke %v agents, want %d in all", woken, len(allowed))
	}
	for _, id := range allowed {
		if got := rn.wakes[id]; got != 1 {
			t.Errorf("agent %s woken %d times, want 1", id, got)
		}
	}
	if got := rn.wakes[capped]; got != 0 {
		t.Errorf("agent over quota woken %d times, want 0", got)
	}
	left, err := st.deferredWakes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].AgentID != capped {
		t.Errorf("markers left %+v, want only %s's", left, capped)
	}
	if n, err := sweeps[0].SweepQuotas(ctx); err != nil || n != 0 {
		t.Errorf("a third sweep woke %d (err %v), want 0", n, err)
	}
}

// TestDeferredWakeNewerRefusal: a refusal made while a sweep handles the agent's
// earlier marker replaces it; the sweep's claim and delete leave the newer marker.
func TestDeferredWakeNewerRefusal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names := dynamotest.CreateTables(t)
	st := &store{db: dynamotest.Client(t), table: names["AgentsTable"]}
	id := dynamotest.UniqueName("agent-")
	now := time.Now()
	if err := st.deferWake(ctx, id, now); err != nil {
		t.Fatal(err)
	}
	marks, err := st.deferredWakes(ctx)
	if err != nil || len(marks) != 1 {
		t.Fatalf("markers %+v (err %v), want 1", marks, err)
	}
	old := marks[0]
	if ok, err := st.claimWake(ctx, old, now, now.Add(claimFor)); err != nil || !ok {
		t.Fatalf("claim = %v, %v; want true", ok, err)
	}
	if ok, err := st.claimWake(ctx, old, now, now.Add(claimFor)); err != nil || ok {
		t.Errorf("second claim = %v, %v; want false (held)", ok, err)
	}
	if err := st.deferWake(ctx, id, now); err != nil { // the newer refusal
		t.Fatal(err)
	}
	if err := st.dropWake(ctx, old); err != nil {
		t.Fatal(err)
	}
	marks, err = st.deferredWakes(ctx)
	if err != nil || len(marks) != 1 || marks[0].Ref == old.Ref || marks[0].ClaimUntil != 0 {
		t.Errorf("markers %+v (err %v), want the newer refusal's, unclaimed", marks, err)
	}
}

// setCounters stores an agent's profile and its quota counters of day.
func setCounters(t *testing.T, st *store, agentID, profile, day string, turns int64) {
	t.Helper()
	if _, err := tools.DecodeProfile([]byte(profile)); err != nil {
		t.Fatal(err)
	}
	err := st.setAttr(context.Background(), agentID, "profile", profile)
	if err == nil {
		err = st.setAttr(context.Background(), agentID, "quota_day", day)
	}
	if err == nil {
		_, err = st.update(context.Background(), agentID, &dynamodb.UpdateItemInput{
			UpdateExpression: aws.String("SET #quota_turns = :t, #quota_month = :m"), ExpressionAttributeNames: names("quota_turns", "quota_month"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":t": n(turns), ":m": s(day[:7])},
		})
	}
	if err != nil {
		t.Fatal(err)
	}
}
