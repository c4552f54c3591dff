package agent_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

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

// stateItem reads the agent's state item straight from AgentsTable.
func stateItem(t *testing.T, e *env) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.db.GetItem(e.ctx, &dynamodb.GetItemInput{TableName: aws.String(e.names["AgentsTable"]), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "agent#" + e.agentID}, "sk": &types.AttributeValueMemberS{Value: "state"}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// A turn of an idle, titled agent writes the runtime's items three times when its text
// is short: the inject queues it on the state item (and counts the stimulus in the same
// write), the lease write also claims the turn and takes the text off the queue, and
// the release also clears and meters the ended turn. A longer text is an inbox item of
// its own, counted against the inbox's bound and put by the inject, uncounted and
// deleted once logged: six writes. The release is preceded by the put of
// the turn's folded history (a fold item, docs/architecture.md). Either way the turn
// is metered exactly once. (Lease renewals come on top, every third of the lease while
// the runner works.)
func TestTurnWrites(t *testing.T) {
	t.Parallel()
	const (
		queue   = "UpdateItem SET #inbox.#id = :it ADD #pending :one"
		claim   = "UpdateItem SET #owner = :me, #lease_until = :until, #pending = if_not_exists(#pending, :zero), #turn_id = :t, #turn_seq = :seq, #turn_key = :k, #turn_rules = :rules" // the turn's rules pinned in the claim
		release = "UpdateItem SET #ck = :ck REMOVE #owner, #lease_until, #turn_id"                                                                                                       // the checkpoint rides the release
		counted = "UpdateItem ADD #items :one, #bytes :size"                                                                                                                             // the inbox's bound
		uncount = "UpdateItem ADD #items :items, #bytes :size"
		fold    = "PutItem" // the turn's history, folded, written before the checkpoint moves past it
	)
	for _, tc := range []struct {
		name string
		text string
		want []string // each write's operation and the start of its update expression
	}{
		{"short text", "second", []string{queue, claim + ", #turn_wake = :w REMOVE #cancel_turn, #cancel_reason, #inbox.#q", fold, release}},
		{"long text", strings.Repeat("long text ", agent.InlineTextBytes/10+1), []string{counted, "PutItem", claim + " REMOVE #cancel_turn, #cancel_reason", uncount, "DeleteItem", fold, release}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var w *writeLog
			e := newEnv(t, opts{wrapDB: func(db agent.DB) agent.DB { w = &writeLog{DB: db}; return w }})
			e.inject("first", true) // titles the session
			e.waitFor("session/titled", func(evs []sessionlog.Event) bool {
				return count(evs, agent.TypeSessionTitled) == 1
			})
			e.settle()
			w.take()

			e.inject(tc.text, true)
			evs := e.waitTurnEnds(2)
			e.settle()
			e.noErrors()
			got := w.take()
			var ops []string
			for _, op := range got {
				if op != "UpdateItem SET #lease_until = :until" { // the heartbeat's renewal: by time (testLease is short), not by turn
					ops = append(ops, op)
				}
			}
			ok := len(ops) == len(tc.want)
			for i := 0; ok && i < len(ops); i++ {
				ok = strings.HasPrefix(ops[i], tc.want[i])
			}
			if !ok {
				t.Fatalf("writes of a turn:\n  %s\nwant (prefixes)\n  %s", strings.Join(ops, "\n  "), strings.Join(tc.want, "\n  "))
			}
			if um := ofType(evs, agent.TypeUserMessage); len(um) != 2 || str(um[1], "text") != tc.text {
				t.Errorf("user/message events %d, want 2, the second with the injected text\n%s", len(um), dump(evs))
			}
			c, err := e.svc.Usage(e.ctx, e.agentID)
			if err != nil {
				t.Fatal(err)
			}
			if c.Turns != 2 || c.QuotaTurns != 2 {
				t.Errorf("counters %+v; want turns 2 and quota_turns 2", c)
			}
			item := stateItem(t, e)
			for a, v := range item {
				if slices.Contains([]string{"owner", "lease_until", "turn_id", "turn_key", "turn_wake"}, a) {
					t.Errorf("state item after the turn has %s = %v, want none", a, v)
				}
			}
			if n := queued(t, item); n != 0 {
				t.Errorf("%d injects still queued on the state item after the turn, want 0", n)
			}
		})
	}
}

// queued counts the injects queued on a state item.
func queued(t *testing.T, item map[string]types.AttributeValue) int {
	t.Helper()
	q, ok := item["inbox"]
	if !ok {
		return 0
	}
	m, ok := q.(*types.AttributeValueMemberM)
	if !ok {
		t.Fatalf("state item's inbox is %T, want a map", q)
	}
	return len(m.Value)
}

// At most agent.MaxInline injects wait on the state item; more wait as inbox items of
// their own, and a turn drains both kinds together in the order they were sent.
func TestInlineQueueBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{})
	var want []string
	for i := range agent.MaxInline + 2 {
		text := fmt.Sprintf("steer %d", i)
		e.inject(text, false)
		want = append(want, text)
	}
	if n := queued(t, stateItem(t, e)); n != agent.MaxInline {
		t.Fatalf("%d injects queued on the state item, want %d", n, agent.MaxInline)
	}
	e.inject("go", true)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	var got []string
	for _, ev := range ofType(evs, agent.TypeContextInjected) {
		got = append(got, str(ev, "text"))
	}
	if !slices.Equal(got, want) {
		t.Errorf("context/injected %q, want %q\n%s", got, want, dump(evs))
	}
	if um := ofType(evs, agent.TypeUserMessage); len(um) != 1 || str(um[0], "text") != "go" {
		t.Errorf("user/message\n%s", dump(evs))
	}
	if n := queued(t, stateItem(t, e)); n != 0 {
		t.Errorf("%d injects still queued after the turn, want 0", n)
	}
	out, err := e.db.Query(e.ctx, &dynamodb.QueryInput{TableName: aws.String(e.names["AgentsTable"]), ConsistentRead: aws.Bool(true),
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :p)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "agent#" + e.agentID},
			":p": &types.AttributeValueMemberS{Value: "inbox#"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 0 {
		t.Errorf("%d inbox items left after the turn, want 0", len(out.Items))
	}
}

// An inject too long for the state item is stored gzip-compressed when that makes its
// item smaller (its put and its delete are billed per KB), and is logged as sent.
func TestLongInjectCompressed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{})
	text := strings.Repeat("A long steer that a user pasted. ", 60) // ~2 KB
	e.inject(text, false)
	out, err := e.db.Query(e.ctx, &dynamodb.QueryInput{TableName: aws.String(e.names["AgentsTable"]), ConsistentRead: aws.Bool(true),
		KeyConditionExpression: aws.String("pk = :pk AND begins_with(sk, :p)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "agent#" + e.agentID},
			":p": &types.AttributeValueMemberS{Value: "inbox#"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 1 {
		t.Fatalf("%d inbox items, want 1", len(out.Items))
	}
	gz, ok := out.Items[0]["gz"].(*types.AttributeValueMemberB)
	if _, plain := out.Items[0]["text"]; plain || !ok || len(gz.Value) >= 1024 {
		t.Fatalf("inbox item %v: want the text gzip-compressed under 1 KB and no plain text", out.Items[0])
	}
	e.inject("go", true)
	evs := e.waitTurnEnds(1)
	e.settle()
	e.noErrors()
	if ci := ofType(evs, agent.TypeContextInjected); len(ci) != 1 || str(ci[0], "text") != text {
		t.Errorf("the compressed inject is not logged as sent\n%s", dump(evs))
	}
}
