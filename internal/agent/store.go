package agent

import (
	"bytes"
	"compress/gzip"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DB is the part of the DynamoDB client the runtime uses on AgentsTable.
type DB interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var _ DB = (*dynamodb.Client)(nil)

// AgentsTable layout (see docs/lifecycle.md): every item of an agent has
// pk "agent#<id>"; the state item has sk "state", inbox items sk "inbox#<inbox id>".
const (
	skState     = "state"
	inboxPrefix = "inbox#"
)

// errLeaseLost means another runner invocation took the agent's lease over; this one
// must stop writing at once.
var errLeaseLost = errors.New("agent: runner lease lost")

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

// inboxItem is one queued inject: an attribute of the state item (inline) when its
// text is at most InlineTextBytes, an item of its own otherwise.
type inboxItem struct {
	ID        string `dynamodbav:"id"`
	Text      string `dynamodbav:"text,omitempty"`
	Wake      bool   `dynamodbav:"wake"`
	Truncated bool   `dynamodbav:"truncated"`
	At        string `dynamodbav:"at"`
	// Gz holds Text gzip-compressed, instead of Text, in an inbox item of its own
	// whose text compresses (see compress).
	Gz []byte `dynamodbav:"gz,omitempty"`
	// attr is the state item's attribute holding an inline inject (inboxAttr, or
	// turnWakeAttr once a turn claimed it); "" for an item of its own.
	attr string `dynamodbav:"-"`
}

// InlineTextBytes is the longest inject text queued on the agent's state item rather
// than as an inbox item of its own. Queued there, an inject costs one write (which
// also counts the stimulus) and no delete: the write that claims the turn, or the
// one that clears a drain, takes it off. The state item is billed by its whole size
// on every write (1 write unit per KB), so only short texts go there; most steers and
// chat messages are shorter.
const InlineTextBytes = 256

// MaxInline is how many injects may be queued on the state item at once; more wait as
// inbox items of their own. It bounds the state item (every write of it is billed by
// its whole size) at about 2 KB, far below DynamoDB's 400 KB item limit, however many
// steers a client sends while a turn works.
const MaxInline = 4

// The state item's attributes holding inline injects: the queue (a map by inbox id)
// and the recorded turn's waking inject.
const (
	inboxAttr    = "inbox"
	turnWakeAttr = "turn_wake"
)

type store struct {
	db    DB
	table string
}

// agentPrefix starts the partition key of every item of an agent in the agents table.
const agentPrefix = "agent#"

func pk(agentID string) string { return agentPrefix + agentID }

func key(agentID, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk(agentID)},
		"sk": &types.AttributeValueMemberS{Value: sk},
	}
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func isCCF(err error) (*types.ConditionalCheckFailedException, bool) {
	var ccf *types.ConditionalCheckFailedException
	return ccf, errors.As(err, &ccf)
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
		st.TurnWake.attr = turnWakeAttr
	}
	for id, it := range st.Inbox {
		it.ID, it.attr = id, inboxAttr
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
var boundaryAttrs = []string{"owner", "lease_until", "pending", "turn_id", "turn_seq", "turn_key", "cancel_turn", "cancel_reason",
	"cancel_at", "cancel_at_reason", "model_main", "model_titler", "model_compactor",
	"quota_day", "quota_turns", "quota_month", "quota_tokens"}

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

func (st *store) update(ctx context.Context, agentID string, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
	in.TableName = aws.String(st.table)
	in.Key = key(agentID, skState)
	return st.db.UpdateItem(ctx, in)
}

// claim is a new turn to record on the state item: its id, a lower bound of its
// first seq, and the waking inject that starts it. An inline wake moves from the
// queue to turn_wake in the same write.
type claim struct {
	turnID string
	seq    int64
	wake   inboxItem
}

// clause adds the claim's parts to an update: the turn's id, first seq and wake key
// set, any cancel of an earlier turn removed, an inline wake moved off the queue; and
// the conditions that the wake is still queued there.
func (c *claim) clause(set, remove, cond *[]string, attrs map[string]string, vals map[string]types.AttributeValue) error {
	*set = append(*set, "#turn_id = :t", "#turn_seq = :seq", "#turn_key = :k")
	*remove = append(*remove, "#cancel_turn", "#cancel_reason")
	for _, a := range []string{"turn_id", "turn_seq", "turn_key", "cancel_turn", "cancel_reason"} {
		attrs["#"+a] = a
	}
	vals[":t"], vals[":seq"], vals[":k"] = s(c.turnID), n(c.seq), s(c.wake.key())
	if c.wake.attr == "" || c.wake.attr == turnWakeAttr {
		return nil
	}
	w, err := attributevalue.Marshal(c.wake)
	if err != nil {
		return fmt.Errorf("agent: encode waking inject: %w", err)
	}
	*set = append(*set, "#turn_wake = :w")
	*remove = append(*remove, "#inbox.#q")
	*cond = append(*cond, "attribute_exists(#inbox.#q)")
	attrs["#turn_wake"], attrs["#inbox"], attrs["#q"] = turnWakeAttr, inboxAttr, c.wake.ID
	vals[":w"] = w
	return nil
}

func expression(set, remove []string) string {
	expr := "SET " + strings.Join(set, ", ")
	if len(remove) > 0 {
		expr += " REMOVE " + strings.Join(remove, ", ")
	}
	return expr
}

// acquire takes the agent's lease for me until `until` if it is free, expired or
// already mine, and returns the state after the write. When another invocation holds
// it, it returns that state and false. With c set, the same write claims the turn c,
// on the further condition that no turn is recorded (and an inline wake is still
// queued); when only that fails, it returns the state found and false as well, and
// the caller takes the lease without the claim. Cost: 1 write unit either way.
func (st *store) acquire(ctx context.Context, agentID, me string, now, until time.Time, c *claim) (state, bool, error) {
	set := []string{"#owner = :me", "#lease_until = :until", "#pending = if_not_exists(#pending, :zero)"}
	var remove []string
	cond := []string{"(attribute_not_exists(#owner) OR #lease_until < :now OR #owner = :me)"}
	attrs := names("owner", "lease_until", "pending")
	vals := map[string]types.AttributeValue{":me": s(me), ":until": n(until.UnixMilli()), ":now": n(now.UnixMilli()), ":zero": n(0)}
	if c != nil {
		cond = append(cond, "attribute_not_exists(#turn_id)")
		if err := c.clause(&set, &remove, &cond, attrs, vals); err != nil {
			return state{}, false, err
		}
	}
	out, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:                    aws.String(expression(set, remove)),
		ConditionExpression:                 aws.String(strings.Join(cond, " AND ")),
		ExpressionAttributeNames:            attrs,
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if ccf, ok := isCCF(err); ok {
		held, derr := decodeState(ccf.Item)
		return held, false, derr
	}
	if err != nil {
		return state{}, false, fmt.Errorf("agent: acquire lease of %s: %w", agentID, err)
	}
	got, err := decodeState(out.Attributes)
	return got, err == nil, err
}

// renew extends my lease. It returns errLeaseLost if the lease is no longer mine.
func (st *store) renew(ctx context.Context, agentID, me string, until time.Time) error {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #lease_until = :until"),
		ConditionExpression:       aws.String("#owner = :me"),
		ExpressionAttributeNames:  names("owner", "lease_until"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(me), ":until": n(until.UnixMilli())},
	})
	if _, ok := isCCF(err); ok {
		return errLeaseLost
	}
	if err != nil {
		return fmt.Errorf("agent: renew lease of %s: %w", agentID, err)
	}
	return nil
}

// endedTurn is a turn whose turn/end is logged and whose state write — clearing it and
// metering its usage — is still to be made.
type endedTurn struct {
	id    string
	usage TurnUsage
}

// release gives my lease up. With pending set, only if no stimulus arrived since the
// runner saw that pending count: otherwise it keeps the lease and returns the current
// state and false, and the runner goes round again. With ended set, the same write
// finishes that turn as finishTurn does, conditional on it still being recorded: a
// release that does not happen finishes nothing. A lease that is not mine any more
// counts as released. With ck set, the same write stores the runner's checkpoint
// (checkpoint.go): a release that does not happen stores none; wrote reports whether
// this write happened (and stored ck). Cost: 1 write unit per KB of the state item
// (the checkpoint adds its own size).
func (st *store) release(ctx context.Context, agentID, me string, pending *int64, ended *endedTurn, ck *checkpoint) (cur state, released, wrote bool, err error) {
	cond := "#owner = :me"
	vals := map[string]types.AttributeValue{":me": s(me)}
	attrs := names("owner", "lease_until")
	if pending != nil {
		cond += " AND #pending = :p"
		vals[":p"] = n(*pending)
		attrs["#pending"] = "pending"
	}
	expr := "REMOVE #owner, #lease_until"
	if ended != nil {
		fin := finishing(ended.id, ended.usage)
		cond += " AND " + *fin.ConditionExpression
		expr = strings.Replace(*fin.UpdateExpression, "REMOVE ", expr+", ", 1)
		for k, v := range fin.ExpressionAttributeNames {
			attrs[k] = v
		}
		for k, v := range fin.ExpressionAttributeValues {
			vals[k] = v
		}
	}
	if ck != nil {
		v, err := attributevalue.Marshal(ck)
		if err != nil {
			return state{}, false, false, fmt.Errorf("agent: encode checkpoint of %s: %w", agentID, err)
		}
		expr += " SET #ck = :ck"
		attrs["#ck"] = ckAttr
		vals[":ck"] = v
	}
	_, err = st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:                    aws.String(expr),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            attrs,
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if ccf, ok := isCCF(err); ok {
		var derr error
		if cur, derr = decodeState(ccf.Item); derr != nil {
			return state{}, false, false, derr
		}
		if cur.Runner != me {
			return cur, true, false, nil
		}
		return cur, false, false, nil
	}
	if err != nil {
		return state{}, false, false, fmt.Errorf("agent: release lease of %s: %w", agentID, err)
	}
	return state{}, true, true, nil
}

// setTurn records turnID as the agent's turn (claimed, open or ending) and clears a
// cancel aimed at another turn. turnSeq is a lower bound of the turn's first seq.
func (st *store) setTurn(ctx context.Context, agentID, me, turnID string, turnSeq int64) error {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #turn_id = :t, #turn_seq = :seq"),
		ConditionExpression:       aws.String("#owner = :me"),
		ExpressionAttributeNames:  names("owner", "turn_id", "turn_seq"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(me), ":t": s(turnID), ":seq": n(turnSeq)},
	})
	if _, ok := isCCF(err); ok {
		return errLeaseLost
	}
	if err != nil {
		return fmt.Errorf("agent: set turn of %s: %w", agentID, err)
	}
	return nil
}

// claimTurn is setTurn for a new turn c, started by a waking inject: any cancel
// recorded for an earlier turn goes, and an inline wake moves off the queue. It
// returns the state after the write, whose CancelAt says whether a cancel sent after
// the wake is owed.
func (st *store) claimTurn(ctx context.Context, agentID, me string, c claim) (state, error) {
	var set, remove []string
	cond := []string{"#owner = :me"}
	attrs := names("owner")
	vals := map[string]types.AttributeValue{":me": s(me)}
	if err := c.clause(&set, &remove, &cond, attrs, vals); err != nil {
		return state{}, err
	}
	out, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String(expression(set, remove)),
		ConditionExpression:       aws.String(strings.Join(cond, " AND ")),
		ExpressionAttributeNames:  attrs,
		ExpressionAttributeValues: vals,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if _, ok := isCCF(err); ok {
		return state{}, errLeaseLost
	}
	if err != nil {
		return state{}, fmt.Errorf("agent: claim turn of %s: %w", agentID, err)
	}
	return decodeState(out.Attributes)
}

// cancelClaimed marks the turn just claimed cancelled: a cancel sent after its wake was
// recorded before the claim (CancelAt).
func (st *store) cancelClaimed(ctx context.Context, agentID, me, turnID, reason string) error {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #cancel_turn = :t, #cancel_reason = :r"),
		ConditionExpression:       aws.String("#owner = :me AND #turn_id = :t"),
		ExpressionAttributeNames:  names("owner", "turn_id", "cancel_turn", "cancel_reason"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(me), ":t": s(turnID), ":r": s(reason)},
	})
	if _, ok := isCCF(err); ok {
		return errLeaseLost
	}
	if err != nil {
		return fmt.Errorf("agent: cancel claimed turn of %s: %w", agentID, err)
	}
	return nil
}

// finishTurn clears the ended turn turnID from the state item and adds its usage to
// the counters, in one write conditional on the turn still being recorded — so a
// turn is metered exactly once however often a runner dies around its end. A turn
// already cleared is no error.
func (st *store) finishTurn(ctx context.Context, agentID, me, turnID string, u TurnUsage) error {
	in := finishing(turnID, u)
	in.ConditionExpression = aws.String("#owner = :me AND " + *in.ConditionExpression)
	in.ExpressionAttributeNames["#owner"] = "owner"
	in.ExpressionAttributeValues[":me"] = s(me)
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	_, err := st.update(ctx, agentID, in)
	if ccf, ok := isCCF(err); ok {
		cur, derr := decodeState(ccf.Item)
		if derr != nil {
			return derr
		}
		if cur.Runner != me {
			return errLeaseLost
		}
		return nil // already finished
	}
	if err != nil {
		return fmt.Errorf("agent: finish turn %s of %s: %w", turnID, agentID, err)
	}
	return nil
}

// finishing is the update that clears the ended turn turnID and meters u, conditional
// on turnID being the recorded turn: finishTurn alone, or folded into release.
func finishing(turnID string, u TurnUsage) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		UpdateExpression: aws.String("REMOVE #turn_id, #turn_seq, #turn_key, #turn_wake, #cancel_turn, #cancel_reason " +
			"ADD #usage_turns :one, #usage_input_tokens :in, #usage_output_tokens :out, #usage_model_calls :mc, #usage_tool_calls :tc, #usage_wall_ms :wall, " +
			"#quota_turns :one, #quota_tokens :tok"),
		ConditionExpression: aws.String("#turn_id = :t"),
		ExpressionAttributeNames: names("turn_id", "turn_seq", "turn_key", "turn_wake", "cancel_turn", "cancel_reason",
			"usage_turns", "usage_input_tokens", "usage_output_tokens", "usage_model_calls", "usage_tool_calls", "usage_wall_ms",
			"quota_turns", "quota_tokens"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":t": s(turnID), ":one": n(1), ":in": n(u.InputTokens), ":out": n(u.OutputTokens),
			":tok": n(u.InputTokens + u.OutputTokens),
			":mc":  n(u.ModelCalls), ":tc": n(u.ToolCalls), ":wall": n(u.WallMS),
		},
	}
}

// clearTurn forgets a claimed turn that never started.
func (st *store) clearTurn(ctx context.Context, agentID, me, turnID string) error {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("REMOVE #turn_id, #turn_seq, #turn_key, #turn_wake, #cancel_turn, #cancel_reason"),
		ConditionExpression:       aws.String("#owner = :me AND #turn_id = :t"),
		ExpressionAttributeNames:  names("owner", "turn_id", "turn_seq", "turn_key", "turn_wake", "cancel_turn", "cancel_reason"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(me), ":t": s(turnID)},
	})
	if _, ok := isCCF(err); ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent: clear turn of %s: %w", agentID, err)
	}
	return nil
}

// addUsage adds usage outside a turn (the titler's model call) to the counters.
func (st *store) addUsage(ctx context.Context, agentID string, in, out int64) error {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("ADD #usage_input_tokens :in, #usage_output_tokens :out, #usage_model_calls :one, #quota_tokens :tok"),
		ExpressionAttributeNames:  names("usage_input_tokens", "usage_output_tokens", "usage_model_calls", "quota_tokens"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":in": n(in), ":out": n(out), ":one": n(1), ":tok": n(in + out)},
	})
	if err != nil {
		return fmt.Errorf("agent: add usage of %s: %w", agentID, err)
	}
	return nil
}

// bump counts a stimulus, so a runner about to release its lease goes round again.
func (st *store) bump(ctx context.Context, agentID string) error {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("ADD #pending :one"),
		ExpressionAttributeNames:  names("pending"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1)},
	})
	if err != nil {
		return fmt.Errorf("agent: record stimulus for %s: %w", agentID, err)
	}
	return nil
}

// cancelOutcome is what cancelRunning found.
type cancelOutcome int

const (
	cancelledRunning cancelOutcome = iota // the recorded turn is marked cancelled
	cancelNoTurn                          // no turn is recorded
	cancelNewerTurn                       // the recorded turn's wake was sent after the cancel
)

// cancelRunning marks the agent's recorded turn cancelled with reason and counts the
// stimulus, if the turn's waking inject was sent before the cancel (key). It also
// raises CancelAt to key, so a turn that a wake sent before the cancel starts later
// (its handler ran late) is cancelled too. A later cancel already recorded makes this
// one a no-op that reports cancelledRunning. Cost: 1 write unit.
func (st *store) cancelRunning(ctx context.Context, agentID, reason, key string) (cancelOutcome, error) {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression: aws.String("SET #cancel_turn = #turn_id, #cancel_reason = :r, #cancel_at = :k, #cancel_at_reason = :r ADD #pending :one"),
		ConditionExpression: aws.String("attribute_exists(#turn_id) AND (attribute_not_exists(#turn_key) OR #turn_key <= :k) " +
			"AND (attribute_not_exists(#cancel_at) OR #cancel_at <= :k)"),
		ExpressionAttributeNames:            names("cancel_turn", "turn_id", "turn_key", "cancel_reason", "cancel_at", "cancel_at_reason", "pending"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":r": s(reason), ":k": s(key), ":one": n(1)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if ccf, ok := isCCF(err); ok {
		cur, derr := decodeState(ccf.Item)
		switch {
		case derr != nil:
			return 0, derr
		case cur.TurnID == "":
			return cancelNoTurn, nil
		case cur.TurnKey != "" && cur.TurnKey > key:
			return cancelNewerTurn, nil
		}
		return cancelledRunning, nil // a later cancel is recorded: it covers this one
	}
	if err != nil {
		return 0, fmt.Errorf("agent: cancel turn of %s: %w", agentID, err)
	}
	return cancelledRunning, nil
}

// owe records a cancel that found no turn running: CancelAt rises to key, so the turn
// a wake sent before the cancel starts is cancelled at its start. Cost: 1 write unit.
func (st *store) owe(ctx context.Context, agentID, reason, key string) error {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #cancel_at = :k, #cancel_at_reason = :r"),
		ConditionExpression:       aws.String("attribute_not_exists(#cancel_at) OR #cancel_at <= :k"),
		ExpressionAttributeNames:  names("cancel_at", "cancel_at_reason"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":r": s(reason), ":k": s(key)},
	})
	if _, ok := isCCF(err); ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent: record cancel of %s: %w", agentID, err)
	}
	return nil
}

// forgo withdraws the owed cancel recorded with key, if it is still the latest and no
// turn has been recorded since. It reports false when a turn was recorded meanwhile
// (the cancel may apply to it after all).
func (st *store) forgo(ctx context.Context, agentID, key string) (bool, error) {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:                    aws.String("REMOVE #cancel_at, #cancel_at_reason"),
		ConditionExpression:                 aws.String("#cancel_at = :k AND attribute_not_exists(#turn_id)"),
		ExpressionAttributeNames:            names("cancel_at", "cancel_at_reason", "turn_id"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":k": s(key)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if ccf, ok := isCCF(err); ok {
		cur, derr := decodeState(ccf.Item)
		if derr != nil {
			return false, derr
		}
		return cur.TurnID == "", nil
	}
	if err != nil {
		return false, fmt.Errorf("agent: withdraw cancel of %s: %w", agentID, err)
	}
	return true, nil
}

// wakeBefore reports whether a waking inject with a stamp key below key is queued: a
// turn the cancel with that key must stop is owed. Cost: one strongly consistent
// Query of the agent's inbox and state item (usually one read unit).
func (st *store) wakeBefore(ctx context.Context, agentID, key string) (bool, error) {
	items, _, err := st.inbox(ctx, agentID)
	if err != nil {
		return false, err
	}
	for _, it := range items {
		if it.Wake && it.attr != turnWakeAttr && it.key() <= key {
			return true, nil
		}
	}
	return false, nil
}

// setLatest sets attr to value on the state item unless a later frame already set it:
// atAttr holds the stamp key of the frame that set it last. It reports false, writing
// nothing, when the value in force is later. Cost: 1 write unit.
func (st *store) setLatest(ctx context.Context, agentID, attr, atAttr, value, key string) (bool, error) {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #a = :v, #at = :k"),
		ConditionExpression:       aws.String("attribute_not_exists(#at) OR #at <= :k"),
		ExpressionAttributeNames:  map[string]string{"#a": attr, "#at": atAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": s(value), ":k": s(key)},
	})
	if _, ok := isCCF(err); ok {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("agent: set %s of %s: %w", attr, agentID, err)
	}
	return true, nil
}

// claimPolicy records the policy/updated at seq, appended for the set_policy with
// stamp key, as the newest claimed and counts the stimulus — if no claim is newer by
// key or later by seq. Otherwise it writes nothing and returns the state holding the
// newer claim (claimed false). Cost: 1 write unit.
func (st *store) claimPolicy(ctx context.Context, agentID, key string, seq int64) (old state, claimed bool, err error) {
	_, err = st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression: aws.String("SET #policy_at = :k, #policy_seq = :s ADD #pending :one"),
		ConditionExpression: aws.String("(attribute_not_exists(#policy_at) OR #policy_at <= :k) AND " +
			"(attribute_not_exists(#policy_seq) OR #policy_seq <= :s)"),
		ExpressionAttributeNames:            names("policy_at", "policy_seq", "pending"),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":k": s(key), ":s": n(seq), ":one": n(1)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if ccf, ok := isCCF(err); ok {
		old, err := decodeState(ccf.Item)
		return old, false, err
	}
	if err != nil {
		return state{}, false, fmt.Errorf("agent: claim policy of %s at seq %d: %w", agentID, seq, err)
	}
	return state{}, true, nil
}

func key2(agentID string) map[string]types.AttributeValue { return key(agentID, skState) }

// setAttr sets one string attribute of the state item (the profile).
func (st *store) setAttr(ctx context.Context, agentID, attr, value string) error {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #a = :v"),
		ExpressionAttributeNames:  map[string]string{"#a": attr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":v": s(value)},
	})
	if err != nil {
		return fmt.Errorf("agent: set %s of %s: %w", attr, agentID, err)
	}
	return nil
}

// newInboxID orders the inbox by the frame's stamp key (so steers drain in the order
// the client sent them) and is unique.
func newInboxID(stampKey string) string {
	return stampKey + "-" + randomHex(4)
}

// key is the stamp key of an inbox item (its id without the random suffix).
func (it inboxItem) key() string {
	if i := strings.LastIndexByte(it.ID, '-'); i > 0 {
		return it.ID[:i]
	}
	return it.ID
}

func randomHex(nbytes int) string {
	b := make([]byte, nbytes)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// putInbox queues one inject and, when it is queued on the state item, counts the
// stimulus in the same write. It reports whether the stimulus was counted. A text of
// at most InlineTextBytes goes on the state item while fewer than MaxInline wait there
// (the agent's first one also creates the queue: one failed conditional write more,
// once); otherwise it is an item of its own. Cost: 1 write unit for an inline inject
// (the state item stays small); 1 per KB of the item otherwise, plus 1 when the queue
// on the state item was found full.
func (st *store) putInbox(ctx context.Context, agentID string, it inboxItem) (bool, error) {
	if len(it.Text) <= InlineTextBytes {
		v, err := attributevalue.Marshal(it)
		if err != nil {
			return false, fmt.Errorf("agent: encode inbox item: %w", err)
		}
		for range 3 {
			_, err = st.update(ctx, agentID, &dynamodb.UpdateItemInput{
				UpdateExpression:                    aws.String("SET #inbox.#id = :it ADD #pending :one"),
				ConditionExpression:                 aws.String("attribute_exists(#inbox) AND size(#inbox) < :max"),
				ExpressionAttributeNames:            map[string]string{"#inbox": inboxAttr, "#id": it.ID, "#pending": "pending"},
				ExpressionAttributeValues:           map[string]types.AttributeValue{":it": v, ":one": n(1), ":max": n(MaxInline)},
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			})
			ccf, failed := isCCF(err)
			if err == nil {
				return true, nil
			}
			if !failed {
				return false, fmt.Errorf("agent: queue inject for %s: %w", agentID, err)
			}
			if _, exists := ccf.Item[inboxAttr]; exists {
				break // the queue is full: an item of its own
			}
			// No queue yet: create it with this inject in it.
			_, err = st.update(ctx, agentID, &dynamodb.UpdateItemInput{
				UpdateExpression:          aws.String("SET #inbox = :q ADD #pending :one"),
				ConditionExpression:       aws.String("attribute_not_exists(#inbox)"),
				ExpressionAttributeNames:  map[string]string{"#inbox": inboxAttr, "#pending": "pending"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":q": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{it.ID: v}}, ":one": n(1)},
			})
			if err == nil {
				return true, nil
			}
			if _, raced := isCCF(err); !raced {
				return false, fmt.Errorf("agent: queue inject for %s: %w", agentID, err)
			}
			// Another inject created it meanwhile: queue into it.
		}
	}
	item, err := attributevalue.MarshalMap(compress(it))
	if err != nil {
		return false, fmt.Errorf("agent: encode inbox item: %w", err)
	}
	for k, v := range key(agentID, inboxPrefix+it.ID) {
		item[k] = v
	}
	if _, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.table), Item: item}); err != nil {
		return false, fmt.Errorf("agent: queue inject for %s: %w", agentID, err)
	}
	return false, nil
}

// compress stores the text of an inbox item of its own gzip-compressed when that makes
// the item smaller: its put and its delete are each billed 1 write unit per KB of the
// item, and text compresses, typically to a half or a third (AWS's advice for large
// attributes: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-use-s3-too.html).
func compress(it inboxItem) inboxItem {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	_, _ = zw.Write([]byte(it.Text))
	if zw.Close() != nil || b.Len() >= len(it.Text) {
		return it
	}
	it.Gz, it.Text = b.Bytes(), ""
	return it
}

// decompress restores the text of an inbox item stored compressed.
func decompress(it inboxItem) (inboxItem, error) {
	if it.Gz == nil {
		return it, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(it.Gz))
	if err == nil {
		var text []byte
		if text, err = io.ReadAll(io.LimitReader(zr, 2*MaxTextBytes)); err == nil {
			it.Text, it.Gz = string(text), nil
			return it, nil
		}
	}
	return inboxItem{}, fmt.Errorf("agent: decompress inbox item %s: %w", it.ID, err)
}

// inbox returns the agent's queued injects in arrival order — the inbox items, the
// injects queued on the state item and the recorded turn's inline wake — and the state
// item, all read strongly consistent in one Query of the agent's items from "inbox#"
// to "state".
func (st *store) inbox(ctx context.Context, agentID string) ([]inboxItem, state, error) {
	var out []inboxItem
	var cur state
	var start map[string]types.AttributeValue
	for {
		page, err := st.db.Query(ctx, &dynamodb.QueryInput{
			TableName:              aws.String(st.table),
			KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :lo AND :hi"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":pk": s(pk(agentID)), ":lo": s(inboxPrefix), ":hi": s(skState),
			},
			ConsistentRead:    aws.Bool(true),
			ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, state{}, fmt.Errorf("agent: read inbox of %s: %w", agentID, err)
		}
		for _, item := range page.Items {
			if sk, _ := item["sk"].(*types.AttributeValueMemberS); sk != nil && sk.Value == skState {
				if cur, err = decodeState(item); err != nil {
					return nil, state{}, err
				}
				continue
			}
			var it inboxItem
			if err := attributevalue.UnmarshalMap(item, &it); err != nil {
				return nil, state{}, fmt.Errorf("agent: decode inbox item: %w", err)
			}
			if it, err = decompress(it); err != nil {
				return nil, state{}, err
			}
			out = append(out, it)
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		start = page.LastEvaluatedKey
	}
	for _, it := range cur.Inbox {
		out = append(out, it)
	}
	if cur.TurnWake != nil {
		out = append(out, *cur.TurnWake)
	}
	slices.SortFunc(out, func(a, b inboxItem) int { return strings.Compare(a.ID, b.ID) })
	return out, cur, nil
}

// deleteInbox takes drained injects off the inbox: one DeleteItem per inbox item, and
// one write for all those queued on the state item (a recorded turn's wake goes with
// the turn). Removing a missing one is no error, so a repeated drain is harmless.
func (st *store) deleteInbox(ctx context.Context, agentID string, items []inboxItem) error {
	var remove []string
	attrs := map[string]string{"#inbox": inboxAttr}
	for _, it := range items {
		switch it.attr {
		case turnWakeAttr:
		case "":
			if _, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(st.table), Key: key(agentID, inboxPrefix+it.ID)}); err != nil {
				return fmt.Errorf("agent: delete drained inbox item %s of %s: %w", it.ID, agentID, err)
			}
		default:
			ph := fmt.Sprintf("#q%d", len(remove))
			remove = append(remove, "#inbox."+ph)
			attrs[ph] = it.ID
		}
	}
	if len(remove) == 0 {
		return nil
	}
	if _, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:         aws.String("REMOVE " + strings.Join(remove, ", ")),
		ExpressionAttributeNames: attrs,
	}); err != nil {
		return fmt.Errorf("agent: remove drained injects of %s: %w", agentID, err)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
