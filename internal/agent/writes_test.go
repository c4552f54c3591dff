package agent_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// writeLog is the agents table's client with every write it makes recorded, by
// operation and update expression: the real client underneath.
type writeLog struct {
	agent.DB
	mu     sync.Mutex
	writes []string
}

func (w *writeLog) add(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, s)
}

func (w *writeLog) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.writes
	w.writes = nil
	return out
}

func (w *writeLog) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	w.add("PutItem")
	return w.DB.PutItem(ctx, in, o...)
}

func (w *writeLog) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	w.add("UpdateItem " + *in.UpdateExpression)
	return w.DB.UpdateItem(ctx, in, o...)
}

func (w *writeLog) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	w.add("DeleteItem")
	return w.DB.DeleteItem(ctx, in, o...)
}

// A turn of an idle, titled agent writes the runtime's items five times: the inbox
// item (queued and deleted), the lease (taken, and released together with the ended
// turn's metering) and the turn's claim. The inject counts no stimulus, as no runner
// holds the lease; the turn is still metered exactly once. (Lease renewals come on
// top, every third of the lease while the runner works.)
func TestTurnWrites(t *testing.T) {
	t.Parallel()
	var w *writeLog
	e := newEnv(t, opts{wrapDB: func(db agent.DB) agent.DB { w = &writeLog{DB: db}; return w }})
	e.inject("first", true) // titles the session
	e.waitFor("session/titled", 30*time.Second, func(evs []sessionlog.Event) bool {
		return count(evs, agent.TypeSessionTitled) == 1
	})
	e.settle()
	w.take()

	e.inject("second", true)
	e.waitTurnEnds(2)
	e.settle()
	e.noErrors()
	got := w.take()
	var ops []string
	for _, op := range got {
		if op == "UpdateItem SET #lease_until = :until" {
			continue // the heartbeat's renewal: by time (testLease is short), not by turn
		}
		ops = append(ops, op[:min(len(op), 10)])
	}
	want := []string{"PutItem", "UpdateItem", "UpdateItem", "DeleteItem", "UpdateItem"}
	if !slices.Equal(ops, want) {
		t.Fatalf("writes of a turn:\n%s\nwant %v", fmt.Sprint(got), want)
	}
	c, err := e.svc.Usage(e.ctx, e.agentID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Turns != 2 || c.QuotaTurns != 2 {
		t.Errorf("counters %+v; want turns 2 and quota_turns 2", c)
	}
	out, err := e.db.GetItem(e.ctx, &dynamodb.GetItemInput{TableName: aws.String(e.names["AgentsTable"]), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "agent#" + e.agentID}, "sk": &types.AttributeValueMemberS{Value: "state"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"owner", "lease_until", "turn_id", "turn_key"} {
		if v, ok := out.Item[a]; ok {
			t.Errorf("state item after the turn has %s = %v, want none", a, v)
		}
	}
}
