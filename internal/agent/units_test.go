package agent_test

import (
	"context"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// unitMeter is the DynamoDB client with the write units every write consumed summed, as
// DynamoDB reports them (ReturnConsumedCapacity TOTAL), by table; a lease renewal's
// (by time, not by turn: testLease is short) is kept apart.
type unitMeter struct {
	*dynamodb.Client
	mu       sync.Mutex
	units    map[string]float64
	renewals float64
}

func (m *unitMeter) add(cc []types.ConsumedCapacity, renewal bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range cc {
		if renewal {
			m.renewals += aws.ToFloat64(c.CapacityUnits)
			continue
		}
		m.units[aws.ToString(c.TableName)] += aws.ToFloat64(c.CapacityUnits)
	}
}

func (m *unitMeter) take() (map[string]float64, float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, r := m.units, m.renewals
	m.units, m.renewals = map[string]float64{}, 0
	return u, r
}

func one(c *types.ConsumedCapacity) []types.ConsumedCapacity {
	if c == nil {
		return nil
	}
	return []types.ConsumedCapacity{*c}
}

func (m *unitMeter) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.Client.PutItem(ctx, in, o...)
	if err == nil {
		m.add(one(out.ConsumedCapacity), false)
	}
	return out, err
}

func (m *unitMeter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.Client.UpdateItem(ctx, in, o...)
	if err == nil {
		m.add(one(out.ConsumedCapacity), aws.ToString(in.UpdateExpression) == "SET #lease_until = :until")
	}
	return out, err
}

func (m *unitMeter) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.Client.DeleteItem(ctx, in, o...)
	if err == nil {
		m.add(one(out.ConsumedCapacity), false)
	}
	return out, err
}

func (m *unitMeter) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := m.Client.TransactWriteItems(ctx, in, o...)
	if err == nil {
		m.add(out.ConsumedCapacity, false)
	}
	return out, err
}

// TestTurnUnits: the write units the runtime consumes (its log appends and its agents
// table writes; delivery's are not the runtime's), as DynamoDB Local reports them: a
// plain turn of an idle, titled agent is its 5 events' appends at 1 unit each — the
// runner's appends are plain puts under its lease, the epoch fence adding nothing —
// and 4 writes of its own (the inject's queue write, the claim, the fold item, the
// release), 9 in all; a set_policy is its append in a transaction with the check of
// the log's epoch (2 units for the put, 2 for the check) between its two state
// writes, 6. docs/cost.md gives the same figures.
func TestTurnUnits(t *testing.T) {
	t.Parallel()
	m := &unitMeter{Client: dynamotest.Client(t), units: map[string]float64{}}
	names := testTables(t)
	e := newEnv(t, opts{names: names, wrapDB: func(agent.DB) agent.DB { return m },
		wrapLog: func(agent.Log) agent.Log { return sessionlog.New(m, names["LogTable"]) }})
	e.inject("first", true) // titles the session
	e.waitFor("session/titled", func(evs []sessionlog.Event) bool { return count(evs, agent.TypeSessionTitled) == 1 })
	e.settle()
	m.take()

	e.inject("second", true)
	evs := e.waitTurnEnds(2)
	e.settle()
	e.noErrors()
	units, renewals := m.take()
	logUnits, agentUnits := units[names["LogTable"]], units[names["AgentsTable"]]
	if n := len(evs) - indexOf(evs, agent.TypeUserMessage, map[string]any{"text": "second"}); n != 5 {
		t.Fatalf("the plain turn logged %d events, want 5\n%s", n, dump(evs))
	}
	t.Logf("plain turn: %.1f write units (log %.1f, agents table %.1f), lease renewals %.1f", logUnits+agentUnits, logUnits, agentUnits, renewals)
	if logUnits != 5 || agentUnits != 4 {
		t.Errorf("a plain turn consumed %.1f write units on the log and %.1f on the agents table, want 5 and 4", logUnits, agentUnits)
	}

	if err := e.svc.SetPolicy(stamped(e.ctx, 1), e.agentID, []string{"echo"}); err != nil {
		t.Fatal(err)
	}
	units, _ = m.take()
	t.Logf("set_policy: log %.1f, agents table %.1f write units", units[names["LogTable"]], units[names["AgentsTable"]])
	if units[names["LogTable"]] != 4 || units[names["AgentsTable"]] != 2 {
		t.Errorf("a set_policy consumed %.1f write units on the log and %.1f on the agents table, want 4 and 2", units[names["LogTable"]], units[names["AgentsTable"]])
	}
}
