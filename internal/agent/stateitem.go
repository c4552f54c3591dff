package agent

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// state is the agent's state item. The fields are named for what they hold (the
// runner holding the lease, the count of stimuli); the stored attribute names stay
// "owner" and "pending", as in tables already deployed.
type state struct {
	Runner         string `dynamodbav:"owner"`       // runner invocation holding the lease
	LeaseUntil     int64  `dynamodbav:"lease_until"` // unix ms
	Stimuli        int64  `dynamodbav:"pending"`     // stimulus counter, bumped by every stimulus
	TurnID         string `dynamodbav:"turn_id"`     // turn being started, open, or ending
	TurnSeq        int64  `dynamodbav:"turn_seq"`    // lower bound of that turn's first seq
	CancelTurn     string `dynamodbav:"cancel_turn"` // turn a cancel was asked for
	CancelReason   string `dynamodbav:"cancel_reason"`
	ModelMain      string `dynamodbav:"model_main"`
	ModelTitler    string `dynamodbav:"model_titler"`
	ModelCompactor string `dynamodbav:"model_compactor"`
	// TurnKey is the stamp key (protocol.Stamp.Key) of the waking inject that started
	// the recorded turn; a cancel only stops a turn whose wake it was sent after.
	TurnKey string `dynamodbav:"turn_key"`
	// TurnRules is the recorded turn's rules, JSON, pinned by its claim (pinnedRules);
	// "": none pinned (a turn claimed before rules were pinned uses the profile's).
	TurnRules string `dynamodbav:"turn_rules"`
	// PolicyAt and PolicySeq are the stamp key and log seq of the newest claimed
	// policy/updated (claimPolicy): claims only ever rise in both.
	PolicyAt  string `dynamodbav:"policy_at"`
	PolicySeq int64  `dynamodbav:"policy_seq"`
	// CancelAt is the stamp key of the latest cancel that found no turn running but one
	// owed: a turn started by a wake with a key not above it is cancelled at its start.
	CancelAt       string `dynamodbav:"cancel_at"`
	CancelAtReason string `dynamodbav:"cancel_at_reason"`
	Profile        string `dynamodbav:"profile"` // per-agent profile override, JSON
	// TurnWake is the recorded turn's waking inject when it was queued on the state
	// item: the write that claims the turn moves it here from the queue, so the claim
	// and the consumption are one write and a claim that logged nothing still has its
	// text. It goes with the turn.
	TurnWake *inboxItem `dynamodbav:"turn_wake,omitempty"`
	// Inbox holds the injects queued on the state item, by inbox id.
	Inbox map[string]inboxItem `dynamodbav:"inbox,omitempty"`
	// Ck is the runner's checkpoint (checkpoint.go); nil on an agent from before it.
	Ck *checkpoint `dynamodbav:"ck,omitempty"`
	// QuotaRefused is the stimulus count a quota refusal was last logged at
	// (refuseForQuota): a later invocation that finds no stimulus since logs none again.
	QuotaRefused *int64 `dynamodbav:"quota_refused,omitempty"`
	// InboxItems is the count of injects queued as items of their own (reserveInbox):
	// it rises before such an inject is put, so a runner can tell that none was queued
	// since it read the inbox (activeRun.apply).
	InboxItems int64 `dynamodbav:"inbox_items"`
	Counters
}

// Counters are an agent's usage totals, kept on its state item with atomic ADDs.
type Counters struct {
	Turns        int64 `dynamodbav:"usage_turns" json:"turns"`
	InputTokens  int64 `dynamodbav:"usage_input_tokens" json:"input_tokens"`
	OutputTokens int64 `dynamodbav:"usage_output_tokens" json:"output_tokens"`
	ModelCalls   int64 `dynamodbav:"usage_model_calls" json:"model_calls"`
	ToolCalls    int64 `dynamodbav:"usage_tool_calls" json:"tool_calls"`
	WallMS       int64 `dynamodbav:"usage_wall_ms" json:"wall_ms"`
	// The quota counters of a UTC day and month (see quota.go): turns and tokens are
	// added by the write that meters a turn, and reset by the first turn start of a new
	// period.
	QuotaDay    string `dynamodbav:"quota_day" json:"quota_day"`     // 2006-01-02
	QuotaTurns  int64  `dynamodbav:"quota_turns" json:"quota_turns"` // turns ended on QuotaDay
	QuotaMonth  string `dynamodbav:"quota_month" json:"quota_month"` // 2006-01
	QuotaTokens int64  `dynamodbav:"quota_tokens" json:"quota_tokens"`
}

func decodeState(item map[string]types.AttributeValue) (state, error) {
	var st state
	if len(item) == 0 {
		return st, nil
	}
	if err := attributevalue.UnmarshalMap(item, &st); err != nil {
		return state{}, fmt.Errorf("agent: decode state item: %w", err)
	}
	if st.TurnWake != nil {
		st.TurnWake.attr = attrTurnWake
	}
	for id, it := range st.Inbox {
		it.ID, it.attr = id, attrInbox
		st.Inbox[id] = it
	}
	return st, nil
}

// names maps every attribute placeholder the runtime uses: "owner" is a DynamoDB
// reserved word, and naming all of them keeps the expressions uniform.
func names(attrs ...string) map[string]string {
	m := make(map[string]string, len(attrs))
	for _, a := range attrs {
		m["#"+a] = a
	}
	return m
}

// boundaryAttrs are what a runner reads at a step boundary (not the profile or the
// counters, which only grow the read).
var boundaryAttrs = []string{attrOwner, attrLeaseUntil, attrPending, attrTurnID, attrTurnSeq, attrTurnKey, attrCancelTurn, attrCancelReason, attrTurnRules,
	attrCancelAt, attrCancelAtReason, attrModelMain, attrModelTitler, attrModelCompactor,
	attrQuotaDay, attrQuotaTurns, attrQuotaMonth, attrQuotaTokens, attrQuotaRefused}

// getState reads the state item strongly consistent; attrs limits the attributes
// read (none: all). A missing item is the zero state.
func (st *store) getState(ctx context.Context, agentID string, attrs ...string) (state, error) {
	in := &dynamodb.GetItemInput{TableName: aws.String(st.table), Key: key(agentID, skState), ConsistentRead: aws.Bool(true)}
	if len(attrs) > 0 {
		proj := ""
		for i, a := range attrs {
			if i > 0 {
				proj += ", "
			}
			proj += "#" + a
		}
		in.ProjectionExpression = aws.String(proj)
		in.ExpressionAttributeNames = names(attrs...)
	}
	out, err := st.db.GetItem(ctx, in)
	if err != nil {
		return state{}, fmt.Errorf("agent: read state of %s: %w", agentID, err)
	}
	return decodeState(out.Item)
}

// clauses is an update expression by its clauses, each a list of actions; String
// writes the clauses that have any, SET, REMOVE, ADD.
type clauses struct {
	set, remove, add []string
}

func (c clauses) String() string {
	var parts []string
	for _, cl := range []struct {
		verb    string
		actions []string
	}{{"SET", c.set}, {"REMOVE", c.remove}, {"ADD", c.add}} {
		if len(cl.actions) > 0 {
			parts = append(parts, cl.verb+" "+strings.Join(cl.actions, ", "))
		}
	}
	return strings.Join(parts, " ")
}
