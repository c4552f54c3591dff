package agent

import (
	"context"
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/internal/dynamotest"
)

// TestUpdateBuilder: an update writes its actions in the order added, by clause, its
// conditions joined by AND, and names exactly the attributes and map keys its
// expressions hold.
func TestUpdateBuilder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		u         *update
		expr      string
		cond      string
		names     map[string]string
		valsCount int
	}{
		{"renew", newUpdate().Set(attrLeaseUntil, ":until").If("#owner = :me").Val(":me", s("r")).Val(":until", n(1)),
			"SET #lease_until = :until", "#owner = :me", map[string]string{"#lease_until": "lease_until", "#owner": "owner"}, 2},
		{"claim with an inline wake", func() *update {
			u := newUpdate().Set(attrOwner, ":me").If("attribute_not_exists(#turn_id)")
			c := claim{turnID: "t", seq: 3, wake: inboxItem{ID: "100-ab", attr: attrInbox}, rules: "{}"}
			if err := c.apply(u); err != nil {
				t.Fatal(err)
			}
			return u
		}(),
			"SET #owner = :me, #turn_id = :t, #turn_seq = :seq, #turn_key = :k, #turn_rules = :rules, #turn_wake = :w REMOVE #cancel_turn, #cancel_reason, #inbox.#q",
			"attribute_not_exists(#turn_id) AND attribute_exists(#inbox.#q)",
			map[string]string{"#owner": "owner", "#turn_id": "turn_id", "#turn_seq": "turn_seq", "#turn_key": "turn_key", "#turn_rules": "turn_rules",
				"#turn_wake": "turn_wake", "#cancel_turn": "cancel_turn", "#cancel_reason": "cancel_reason", "#inbox": "inbox", "#q": "100-ab"}, 5},
		{"release finishing a turn", func() *update {
			u := newUpdate().Remove(attrOwner, attrLeaseUntil).If("#owner = :me")
			finishing(u, "t", TurnUsage{})
			return u.Set(attrCk, ":ck")
		}(),
			"SET #ck = :ck REMOVE #owner, #lease_until, #turn_id, #turn_seq, #turn_key, #turn_wake, #cancel_turn, #cancel_reason, #turn_rules " +
				"ADD #usage_turns :one, #usage_input_tokens :in, #usage_output_tokens :out, #usage_model_calls :mc, #usage_tool_calls :tc, #usage_wall_ms :wall, #quota_turns :one, #quota_tokens :tok",
			"#owner = :me AND #turn_id = :t", nil, 8},
		{"no condition", newUpdate().Add(attrPending, ":one").Val(":one", n(1)), "ADD #pending :one", "", map[string]string{"#pending": "pending"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.u.input()
			if got := aws.ToString(in.UpdateExpression); got != tc.expr {
				t.Errorf("update expression\n  %s\nwant\n  %s", got, tc.expr)
			}
			if got := aws.ToString(in.ConditionExpression); got != tc.cond || (tc.cond == "") != (in.ConditionExpression == nil) {
				t.Errorf("condition %q, want %q", got, tc.cond)
			}
			if tc.names != nil && !reflect.DeepEqual(in.ExpressionAttributeNames, tc.names) {
				t.Errorf("names %v, want %v", in.ExpressionAttributeNames, tc.names)
			}
			for p, a := range in.ExpressionAttributeNames {
				if p != "#q" && p != "#"+a {
					t.Errorf("placeholder %s names %s", p, a)
				}
			}
			if len(in.ExpressionAttributeValues) != tc.valsCount {
				t.Errorf("%d values, want %d", len(in.ExpressionAttributeValues), tc.valsCount)
			}
		})
	}
}

// TestUpdateUnknownAttribute: an expression naming no state attribute (a misspelling)
// leaves its placeholder unnamed, so DynamoDB refuses the write and nothing is written:
// it fails the first test that sends it, and never panics a running function.
func TestUpdateUnknownAttribute(t *testing.T) {
	t.Parallel()
	u := newUpdate().Set(attrPending, ":one").If("attribute_not_exists(#lease_untl)").Val(":one", n(1))
	in := u.input()
	if _, named := in.ExpressionAttributeNames["#lease_untl"]; named {
		t.Fatalf("names %v: #lease_untl named", in.ExpressionAttributeNames)
	}
	names := dynamotest.CreateTables(t)
	st := &store{db: dynamotest.Client(t), table: names["AgentsTable"]}
	ctx := context.Background()
	if _, err := st.update(ctx, "misspelt", in); err == nil {
		t.Fatal("an update naming #lease_untl was sent and not refused")
	}
	out, err := st.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(st.table), Key: key("misspelt", skState), ConsistentRead: aws.Bool(true)})
	if err != nil || len(out.Item) != 0 {
		t.Fatalf("state item after the refused update = %v, %v; want none", out.Item, err)
	}
}
