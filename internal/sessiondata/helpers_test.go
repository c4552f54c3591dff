package sessiondata_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/sessiondata"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// rig is one set of fresh tables on DynamoDB Local.
type rig struct {
	db     *dynamodb.Client
	tables sessiondata.Tables
	log    *sessionlog.Log
}

func newRig(t *testing.T) rig {
	t.Helper()
	names := dynamotest.CreateTables(t)
	db := dynamotest.Client(t)
	tb := sessiondata.Tables{Log: names["LogTable"], Connections: names["ConnectionsTable"], Agents: names["AgentsTable"]}
	return rig{db: db, tables: tb, log: sessionlog.New(db, tb.Log)}
}

// seed writes a log of n events (seq 0 session/created, then note events) with
// BatchWriteItem, 25 at a time, as a long-lived session would have left it.
func (r rig) seed(t *testing.T, agent string, n int) {
	t.Helper()
	seedItems(t, r.db, r.tables.Log, n, func(i int) map[string]types.AttributeValue {
		typ, payload := "note", json.RawMessage(fmt.Sprintf(`{"i":%d,"text":"<event & %d>"}`, i, i))
		if i == 0 {
			typ, payload = sessionlog.TypeSessionCreated, json.RawMessage(`{}`)
		}
		return sessionlog.Event{ID: fmt.Sprintf("%032x", i+1), SessionID: agent, Seq: int64(i),
			At: "2026-12-01T00:00:00.000000Z", Type: typ, Payload: payload}.Item()
	})
}

func seedItems(t *testing.T, db *dynamodb.Client, table string, n int, item func(i int) map[string]types.AttributeValue) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	errs := make(chan error, n/25+1)
	for i := 0; i < n; i += 25 {
		var reqs []types.WriteRequest
		for j := i; j < min(i+25, n); j++ {
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: item(j)}})
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			pending := map[string][]types.WriteRequest{table: reqs}
			for len(pending) > 0 {
				out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
				if err != nil {
					errs <- err
					return
				}
				pending = out.UnprocessedItems
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("seed: %v", err)
	}
}

// count returns how many items partition pk=value of table holds.
func count(t *testing.T, db *dynamodb.Client, table, key, value string) int {
	t.Helper()
	var n int
	var start map[string]types.AttributeValue
	for {
		out, err := db.Query(context.Background(), &dynamodb.QueryInput{
			TableName: aws.String(table), KeyConditionExpression: aws.String("#k = :v"),
			ExpressionAttributeNames:  map[string]string{"#k": key},
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": &types.AttributeValueMemberS{Value: value}},
			Select:                    types.SelectCount, ConsistentRead: aws.Bool(true), ExclusiveStartKey: start,
		})
		if err != nil {
			t.Fatal(err)
		}
		n += int(out.Count)
		if len(out.LastEvaluatedKey) == 0 {
			return n
		}
		start = out.LastEvaluatedKey
	}
}

func getItem(t *testing.T, db *dynamodb.Client, table string, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	t.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int) types.AttributeValue    { return &types.AttributeValueMemberN{Value: strconv.Itoa(v)} }

func put(t *testing.T, db *dynamodb.Client, table string, item map[string]types.AttributeValue) {
	t.Helper()
	if _, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatal(err)
	}
}

// runtimeState writes what a busy agent's runtime leaves in the agents table: a state
// item with a profile, counters, an open turn, a queue, a policy claim, model roles
// and a checkpoint-like attribute, inbox items of its own, and two fold items of the
// runner's history fold (sk "fold#<from>").
func (r rig) runtimeState(t *testing.T, agent string) {
	t.Helper()
	put(t, r.db, r.tables.Agents, map[string]types.AttributeValue{
		"pk": s("agent#" + agent), "sk": s("state"),
		"profile": s(`{"system":"x"}`), "usage_turns": n(7), "usage_input_tokens": n(1000),
		"quota_month": s("2026-12"), "quota_tokens": n(900),
		"turn_id": s("t1"), "turn_seq": n(5), "turn_key": s("k"), "pending": n(3),
		"policy_at": s("k2"), "policy_seq": n(4), "model_main": s("scripted"),
		"cancel_at": s("k3"), "checkpoint": s(`{"through_seq":4}`),
		"inbox": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"i1": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"id": s("i1")}}}},
	})
	for i := range 30 {
		put(t, r.db, r.tables.Agents, map[string]types.AttributeValue{"pk": s("agent#" + agent), "sk": s(fmt.Sprintf("inbox#%03d", i)), "text": s("steer")})
	}
	for _, from := range []int{0, 3} {
		put(t, r.db, r.tables.Agents, map[string]types.AttributeValue{"pk": s("agent#" + agent), "sk": s(fmt.Sprintf("fold#%020d", from)),
			"to": n(from + 2), "h": &types.AttributeValueMemberB{Value: []byte(`[{"s":1,"t":"user/message","p":{"text":"hi"},"w":3}]`)}})
	}
	put(t, r.db, r.tables.Agents, map[string]types.AttributeValue{"pk": s("quota#deferred"), "sk": s(agent), "ref": s("r")})
}

func attrNames(item map[string]types.AttributeValue) map[string]bool {
	out := map[string]bool{}
	for k := range item {
		out[k] = true
	}
	return out
}
