package agent_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// unitMeter is the DynamoDB client with every write it sends recorded by table and
// kind, with the size of each item it writes: a lease renewal (by time, not by turn:
// testLease is short) is kept apart. The write units are computed as DynamoDB bills
// them (1 per KB of each item; a transaction's items twice), from the requests: DynamoDB
// Local's own ConsumedCapacity is not AWS's.
type unitMeter struct {
	*dynamodb.Client
	mu       sync.Mutex
	writes   map[string][]string // by table: "put", "update", "delete", "tx-put", "tx-check"
	renewals int
}

func (m *unitMeter) add(table, kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes[table] = append(m.writes[table], kind)
}

func (m *unitMeter) take() (map[string][]string, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, r := m.writes, m.renewals
	m.writes, m.renewals = map[string][]string{}, 0
	return w, r
}

func (m *unitMeter) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	m.add(aws.ToString(in.TableName), "put")
	return m.Client.PutItem(ctx, in, o...)
}

func (m *unitMeter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if aws.ToString(in.UpdateExpression) == "SET #lease_until = :until" {
		m.mu.Lock()
		m.renewals++
		m.mu.Unlock()
	} else {
		m.add(aws.ToString(in.TableName), "update")
	}
	return m.Client.UpdateItem(ctx, in, o...)
}

func (m *unitMeter) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	m.add(aws.ToString(in.TableName), "delete")
	return m.Client.DeleteItem(ctx, in, o...)
}

func (m *unitMeter) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			m.add(aws.ToString(it.Put.TableName), "tx-put")
		case it.ConditionCheck != nil:
			m.add(aws.ToString(it.ConditionCheck.TableName), "tx-check")
		case it.Update != nil:
			m.add(aws.ToString(it.Update.TableName), "tx-update")
		}
	}
	return m.Client.TransactWriteItems(ctx, in, o...)
}

// units is what writes of items under 1 KB are billed: 1 a write, 2 a transaction's item.
func units(kinds []string) int {
	n := 0
	for _, k := range kinds {
		if strings.HasPrefix(k, "tx-") {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// TestTurnUnits: the writes the runtime sends (its log appends and its agents table
// writes; delivery's are not the runtime's). A plain turn of an idle, titled agent is
// its 5 events' appends, each a plain put — the runner's appends are fenced by its
// lease, the epoch fence adding no request — and 4 writes of its own (the inject's
// queue write, the claim, the fold item, the release): 9 write units for items under
// 1 KB. A set_policy is its append in a transaction with the check of the log's
// epoch (2 units for the put, 2 for the check) between its two state writes: 6.
// docs/cost.md gives the same figures.
func TestTurnUnits(t *testing.T) {
	t.Parallel()
	m := &unitMeter{Client: dynamotest.Client(t), writes: map[string][]string{}}
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
	writes, renewals := m.take()
	logW, agentW := writes[names["LogTable"]], writes[names["AgentsTable"]]
	if n := len(evs) - indexOf(evs, agent.TypeUserMessage, map[string]any{"text": "second"}); n != 5 {
		t.Fatalf("the plain turn logged %d events, want 5\n%s", n, dump(evs))
	}
	t.Logf("plain turn: log %v, agents table %v: %d write units; lease renewals %d", logW, agentW, units(logW)+units(agentW), renewals)
	// A put whose lease the runner could not renew in time (a loaded machine's slow
	// DynamoDB Local against testLease's 1 s) is a transaction instead: counted, not
	// failed.
	puts := slices.DeleteFunc(slices.Clone(logW), func(k string) bool { return k == "tx-check" })
	if len(puts) != 5 || units(agentW) != 4 {
		t.Errorf("a plain turn wrote %v to the log and %v to the agents table; want 5 puts and 4 writes", logW, agentW)
	}
	if tx := len(logW) - len(puts); tx > 0 {
		t.Logf("%d of the plain turn's appends were checked by transaction (the lease too short for the machine's latency)", tx)
	}

	if err := e.svc.SetPolicy(stamped(e.ctx, 1), e.agentID, []string{"echo"}); err != nil {
		t.Fatal(err)
	}
	writes, _ = m.take()
	logW, agentW = writes[names["LogTable"]], writes[names["AgentsTable"]]
	t.Logf("set_policy: log %v, agents table %v: %d write units", logW, agentW, units(logW)+units(agentW))
	if !slices.Equal(logW, []string{"tx-check", "tx-put"}) || !slices.Equal(agentW, []string{"update", "update"}) {
		t.Errorf("a set_policy wrote %v to the log and %v to the agents table; want a transaction of the check and the put, and 2 updates", logW, agentW)
	}
}
