package agent_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/dynamotest"
)

// TestRetentionAcrossAnOpenTurn: a turn on an aged agent with retention_days 1
// compacts its old history, then parks on an approval. The parked invocation gives a
// TTL to events below its checkpoint only: none to the open turn nor to anything after
// the compaction's through_seq. Then the test deletes every event with a TTL, as TTL
// does a day later — the seeded policy/updated at seq 1 among them. A cold runner takes
// the approval and finishes the turn, and the next turn still runs under the seeded
// policy, which only the checkpoint now holds.
func TestRetentionAcrossAnOpenTurn(t *testing.T) {
	t.Parallel()
	prof := agedProfile(1000)
	prof.RetentionDays = 1
	a := newAged(t, testTables(t), 200, prof, nil)
	from := a.tip() + 1
	evs := a.turn(script(`{"call":[{"tool":"clock","args":{}}]}`, `{"call":[{"tool":"guarded_echo","args":{"text":"approved text"}}]}`, `{"say":"done"}`))
	if count(evs, agent.TypeContextCompacted) != 1 || count(evs, agent.TypeApprovalRequested) != 1 || count(evs, agent.TypeTurnEnd) != 0 {
		t.Fatalf("first invocation:\n%s", dump(evs))
	}
	turnStart := ofType(evs, agent.TypeTurnStart)[0].Seq
	through := int64(compactions(evs)[0]["through_seq"].(float64))
	ck := a.historyFloor()
	if ck > turnStart || ck > through+1 || ck < 2 || ck > a.checkpointSeq() {
		t.Fatalf("parked turn starts at %d, newest through_seq %d, history floor at %d, checkpoint at %d", turnStart, through, ck, a.checkpointSeq())
	}
	db := dynamotest.Client(t)
	deleted := 0
	for _, ev := range a.since(0) {
		if (ev.Expires != 0) != (ev.Seq >= 1 && ev.Seq < ck) {
			t.Fatalf("seq %d (%s; history floor %d, turn from %d) expires at %d", ev.Seq, ev.Type, ck, turnStart, ev.Expires)
		}
		if ev.Expires == 0 {
			continue
		}
		if _, err := db.DeleteItem(a.ctx, &dynamodb.DeleteItemInput{TableName: aws.String(a.names["LogTable"]),
			Key: map[string]types.AttributeValue{
				"session_id": &types.AttributeValueMemberS{Value: a.id},
				"seq":        &types.AttributeValueMemberN{Value: strconv.FormatInt(ev.Seq, 10)},
			}}); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	if deleted != int(ck-1) {
		t.Fatalf("deleted %d events, want the %d below the history floor but seq 0", deleted, ck-1)
	}
	a.restart()
	call := str(ofType(evs, agent.TypeToolCall)[1], "id")
	if err := a.svc.Approve(a.ctx, a.id, call); err != nil {
		t.Fatal(err)
	}
	if err := a.run(); err != nil {
		t.Fatal(err)
	}
	evs = a.since(from)
	res := ofType(evs, agent.TypeToolResult)
	if len(res) != 2 || !strings.Contains(string(res[1].Payload), "approved text") || lastTurnEndOf(t, evs)["status"] != agent.StatusCompleted || chunkText(evs) != "done" {
		t.Fatalf("after the expiry and the approval:\n%s", dump(evs))
	}
	a.restart()
	evs = a.turn(script(`{"call":[{"tool":"clock","args":{}}]}`, `{"say":"done"}`))
	if res := ofType(evs, agent.TypeToolResult); len(res) != 1 || !strings.Contains(string(res[0].Payload), agent.ErrTextPolicy) {
		t.Fatalf("clock under the seeded policy, its event expired:\n%s", dump(evs))
	}
}
