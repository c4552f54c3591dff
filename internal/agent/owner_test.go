package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent"
)

// TestInjectFromOwner: a client frame's inject queues its text only while the agent's
// state item names the frame's connection as owner (agent.OwnerClaim, written by the
// connect that made it the owner). A frame of a superseded connection, of one whose
// agent was never claimed, or of one whose claim a reset or delete took off (the
// state item's conn removed) queues nothing and is ErrNotOwner — short texts (queued
// on the state item) and long ones (inbox items of their own) alike.
func TestInjectFromOwner(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", agent.InlineTextBytes+1)
	cases := []struct {
		name   string
		claims []string // connections claiming the agent, in order ("-": the claim removed)
		from   string
		text   string
		queued bool
	}{
		{"owner, short text", []string{"c1"}, "c1", "hi", true},
		{"owner, long text", []string{"c1"}, "c1", long, true},
		{"superseded, short text", []string{"c1", "c2"}, "c1", "hi", false},
		{"superseded, long text", []string{"c1", "c2"}, "c1", long, false},
		{"never claimed", nil, "c1", "hi", false},
		{"claim removed (reset, delete), short text", []string{"c1", "-"}, "c1", "hi", false},
		{"claim removed (reset, delete), long text", []string{"c1", "-"}, "c1", long, false},
		{"claimed again after the removal", []string{"c1", "-", "c3"}, "c3", "hi", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, opts{})
			table := e.names["AgentsTable"]
			for _, c := range tc.claims {
				w := agent.OwnerClaim(table, e.agentID, c)
				if c == "-" { // what a reset's or delete's fence does
					w = types.TransactWriteItem{Update: &types.Update{TableName: aws.String(table), Key: w.Update.Key,
						UpdateExpression: aws.String("REMOVE #conn"), ExpressionAttributeNames: map[string]string{"#conn": "conn"}}}
				}
				if _, err := e.db.TransactWriteItems(e.ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{w}}); err != nil {
					t.Fatal(err)
				}
			}
			err := e.svc.InjectFrom(e.ctx, e.agentID, tc.text, false, tc.from)
			switch {
			case tc.queued && err != nil:
				t.Fatalf("inject from the owner: %v", err)
			case !tc.queued && !errors.Is(err, agent.ErrNotOwner):
				t.Fatalf("inject from %s after claims %v: %v, want ErrNotOwner", tc.from, tc.claims, err)
			}
			if got := queuedTexts(t, e.ctx, e.db, table, e.agentID); (got == 1) != tc.queued || got > 1 {
				t.Fatalf("%d texts queued, want queued=%v", got, tc.queued)
			}
		})
	}
}

// queuedTexts counts the injects queued for agentID: inbox items of their own and
// those on the state item.
func queuedTexts(t *testing.T, ctx context.Context, db *dynamodb.Client, table, agentID string) int {
	t.Helper()
	out, err := db.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String(table), KeyConditionExpression: aws.String("pk = :pk"), ConsistentRead: aws.Bool(true),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "agent#" + agentID}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, it := range out.Items {
		sk := it["sk"].(*types.AttributeValueMemberS).Value
		switch {
		case strings.HasPrefix(sk, "inbox#"):
			n++
		case sk == "state":
			if q, ok := it["inbox"].(*types.AttributeValueMemberM); ok {
				n += len(q.Value)
			}
		}
	}
	return n
}
