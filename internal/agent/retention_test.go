package agent_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// TestRetentionKeepsWhatTheRunnerNeeds: with retention_days 30 in the profile (over a
// deployment's 7), exactly the events below the checkpoint's history floor get a TTL,
// 30 days after their `at` (or after the newest event of their fold, seconds later) —
// never seq 0, the tip, the newest context/compacted or the events after its
// through_seq — and so do the fold items wholly below the floor, and no other. Then the
// test does what TTL does 31 days later (DynamoDB Local expires nothing): it deletes
// every event and fold item that has expired by then. A cold runner's
// next turn still completes with the newest summary and the history after it, and its
// model request is the one it would have sent without the deletes.
func TestRetentionKeepsWhatTheRunnerNeeds(t *testing.T) {
	t.Parallel()
	srv := newChatServer(t, 0, strings.Repeat("x", 2000))
	prof := agedProfile(2000)
	prof.RetentionDays = 30
	models := withModel(srv.models(t))
	a := newAged(t, testTables(t), 0, prof, func(c *agent.Config) { models(c); c.RetentionDays = 7 })
	// Turns until one compacts: its release moves the checkpoint past the history.
	for i := 0; len(compactions(a.since(0))) == 0; i++ {
		if i == 12 {
			t.Fatal("no compaction in 12 turns of 2,000 characters on a 2,000-token budget")
		}
		evs := a.turn(fmt.Sprintf("question %d", i))
		if te := lastTurnEndOf(t, evs); te["status"] != agent.StatusCompleted {
			t.Fatalf("turn %d: %v\n%s", i, te, dump(evs))
		}
	}
	all := a.since(0)
	cs := compactions(all)
	ck := a.historyFloor()
	through := int64(cs[len(cs)-1]["through_seq"].(float64))
	if ck < 2 || ck > through+1 || ck > a.checkpointSeq() {
		t.Fatalf("history floor %d, newest through_seq %d, checkpoint %d: want 2 ≤ floor ≤ through_seq+1, floor ≤ checkpoint", ck, through, a.checkpointSeq())
	}
	tip := all[len(all)-1].Seq
	expiring := 0
	for _, ev := range all {
		at, err := time.Parse(sessionlog.TimeFormat, ev.At)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(0)
		if ev.Seq >= 1 && ev.Seq < ck && ev.Seq < tip {
			want = at.Add(30 * 24 * time.Hour).Unix()
			expiring++
		}
		if ev.Expires < want || ev.Expires > want+3600 || (want == 0) != (ev.Expires == 0) {
			t.Fatalf("seq %d (%s; checkpoint %d, tip %d) expires at %d, want %d", ev.Seq, ev.Type, ck, tip, ev.Expires, want)
		}
	}
	// TTL, 31 days on: every event expired by then is deleted.
	db := dynamotest.Client(t)
	later := time.Now().Add(31 * 24 * time.Hour)
	deleted := 0
	for _, ev := range all {
		if !ev.Expired(later) {
			continue
		}
		if _, err := db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(a.names["LogTable"]),
			Key: map[string]types.AttributeValue{
				"session_id": &types.AttributeValueMemberS{Value: a.id},
				"seq":        &types.AttributeValueMemberN{Value: strconv.FormatInt(ev.Seq, 10)},
			}}); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	if deleted != expiring || deleted == 0 {
		t.Fatalf("deleted %d events, %d had a TTL", deleted, expiring)
	}
	expired := 0
	for _, f := range a.folds() {
		if (f.expires != 0) != (f.to < ck) {
			t.Fatalf("fold item %d..%d expires at %d, history floor %d", f.from, f.to, f.expires, ck)
		}
		if f.expires != 0 && time.Unix(f.expires, 0).Before(later) {
			if _, err := db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(a.names["AgentsTable"]), Key: f.key}); err != nil {
				t.Fatal(err)
			}
			expired++
		}
	}
	if expired == 0 {
		t.Fatal("no fold item expired below the history floor")
	}
	a.restart()
	evs := a.turn("after the expiry")
	if te := lastTurnEndOf(t, evs); te["status"] != agent.StatusCompleted {
		t.Fatalf("turn after the expiry: %v\n%s", te, dump(evs))
	}
	reqs := srv.requests()
	last := reqs[len(reqs)-1]
	if last.compactor {
		t.Fatal("the last model request is the compactor's: a turn ends with the main model's")
	}
	newest := compactions(a.since(0))
	if len(newest) == 0 {
		t.Fatal("no context/compacted left after the expiry")
	}
	summary := newest[len(newest)-1]["summary"].(string)
	if !strings.Contains(last.system, summary) {
		t.Fatalf("model request after the expiry lacks the newest summary %q: %q", summary, last.system)
	}
	// Every user message after the newest through_seq reached the model.
	for _, ev := range a.since(int64(newest[len(newest)-1]["through_seq"].(float64)) + 1) {
		if ev.Type != agent.TypeUserMessage {
			continue
		}
		sent := false
		for _, m := range last.messages {
			if c, _ := m.Content.(string); c == str(ev, "text") {
				sent = true
			}
		}
		if !sent {
			t.Fatalf("user message %q at seq %d, after the newest through_seq, not sent after the expiry", str(ev, "text"), ev.Seq)
		}
	}
}
