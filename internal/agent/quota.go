package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/tools"
)

// Per-agent quotas (the profile's "quotas"): turns per UTC day and model tokens per UTC
// month. Counting costs no extra write: the write that meters an ended turn
// (finishTurn) ADDs to quota_turns and quota_tokens on the state item, and the
// titler's metering write ADDs its tokens. The first turn start of a new day or month
// resets the period's counter (one more write, once per period). The check reads
// nothing extra either: the counters come with the state reads the runner makes anyway.

// quotaTurnPrefix marks the id of a turn that a quota refused: it is logged as
// turn/start and turn/end only, so a runner that died between the two ends it on resume.
const quotaTurnPrefix = "turn_quota_"

// quotaReason returns why a turn may not start now ("" when it may), rolling the
// quota counters over to the current day and month first.
func (rn *activeRun) quotaReason(ctx context.Context) (string, error) {
	now := rn.c.now().UTC()
	day, month := now.Format(time.DateOnly), now.Format("2006-01")
	if rn.st.QuotaDay != day || rn.st.QuotaMonth != month {
		st, err := rn.c.store.rollQuota(ctx, rn.agent, rn.me, rn.st, day, month)
		if err != nil {
			return "", err
		}
		rn.adopt(st)
	}
	prof, err := rn.c.agentProfile(rn.profileJSON)
	if err != nil {
		return "", nil // the turn fails on its profile, with that reason
	}
	return quotaText(prof.Quotas.TurnsPerDay, prof.Quotas.TokensPerMonth, rn.st.QuotaTurns, rn.st.QuotaTokens, now), nil
}

// quotaAllows reports whether counters c leave room for a turn under prof's caps at
// now, counting a past day's or month's counter as 0 (as the runner's roll-over
// would), without writing anything.
func quotaAllows(prof tools.Profile, c Counters, now time.Time) bool {
	now = now.UTC()
	if c.QuotaDay != now.Format(time.DateOnly) {
		c.QuotaTurns = 0
	}
	if c.QuotaMonth != now.Format("2006-01") {
		c.QuotaTokens = 0
	}
	return quotaText(prof.Quotas.TurnsPerDay, prof.Quotas.TokensPerMonth, c.QuotaTurns, c.QuotaTokens, now) == ""
}

// quotaText names the first cap reached, and when it resets.
func quotaText(turnsPerDay, tokensPerMonth, turns, tokens int64, now time.Time) string {
	y, m, d := now.Date()
	switch {
	case turnsPerDay > 0 && turns >= turnsPerDay:
		return fmt.Sprintf("quota: turns_per_day %d reached; resets at %s", turnsPerDay,
			time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339))
	case tokensPerMonth > 0 && tokens >= tokensPerMonth:
		return fmt.Sprintf("quota: tokens_per_month %d reached; resets at %s", tokensPerMonth,
			time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339))
	}
	return ""
}

// refuseForQuota logs a turn that a quota refused: turn/start, then turn/end rejected
// with the reason. The waking inject stays queued, and the turn is not metered; the
// only other write is the agent's deferred-wake marker (quota_sweep.go), which lets
// the quota sweep start the runner once the quota allows — after the reset, or once
// the operator raises the cap — with no further stimulus. One refusal is logged
// per stimulus that finds the agent over quota, so a client sending into a capped
// agent sees why nothing runs, and neither a runner going round nor another invocation
// for the same stimulus (a second asynchronous invoke, Lambda's retry, a waiting
// invocation that takes the lease over after the one that refused) repeats it: the
// stimulus count of the refusal is kept on the state item (quota_refused, 1 write
// unit per refusal).
func (rn *activeRun) refuseForQuota(ctx context.Context, reason string) error {
	if rn.quotaRefused.ok && rn.quotaRefused == rn.seenPending {
		return nil
	}
	if r := rn.st.QuotaRefused; r != nil && rn.seenPending.is(*r) {
		rn.quotaRefused = rn.seenPending
		return nil
	}
	// The marker first: a runner that dies after it leaves at worst a wake the sweep
	// finds nothing to do for; one that dies before it logged nothing.
	if err := rn.c.store.deferWake(ctx, rn.agent, rn.c.now()); err != nil {
		return err
	}
	id := quotaTurnPrefix + randomHex(8)
	if _, err := rn.append(ctx, TypeTurnStart, turnStart{TurnID: id}); err != nil {
		return err
	}
	if err := rn.crash(CrashQuotaStarted); err != nil {
		return err
	}
	if _, err := rn.append(ctx, TypeTurnEnd, turnEnd{TurnID: id, Status: StatusRejected, Reason: reason, Usage: &TurnUsage{}}); err != nil {
		return err
	}
	rn.quotaRefused = rn.seenPending
	meterTurn(StatusRejected)
	if rn.seenPending.ok {
		st, err := rn.c.store.markQuotaRefused(ctx, rn.agent, rn.me, rn.seenPending.v)
		if err != nil {
			return err
		}
		rn.adopt(st)
	}
	return nil
}

// markQuotaRefused records on the state item that a quota refusal was logged at the
// stimulus count pending, while me holds the lease, and returns the state after the
// write. Cost: 1 write unit (state items are small).
func (st *store) markQuotaRefused(ctx context.Context, agentID, me string, pending int64) (state, error) {
	out, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #quota_refused = :p"),
		ConditionExpression:       aws.String("#owner = :me"),
		ExpressionAttributeNames:  names(attrOwner, attrQuotaRefused),
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": n(pending), ":me": s(me)},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if dynamoerr.CondFailed(err) {
		return state{}, errLeaseLost
	}
	if err != nil {
		return state{}, fmt.Errorf("agent: mark quota refusal of %s: %w", agentID, err)
	}
	return decodeState(out.Attributes)
}

// endRefused ends a quota-refused turn left open by a runner that died after its
// turn/start.
func (rn *activeRun) endRefused(ctx context.Context, turnID string) error {
	reason, err := rn.quotaReason(ctx)
	if err != nil {
		return err
	}
	if reason == "" {
		reason = "quota"
	}
	_, err = rn.append(ctx, TypeTurnEnd, turnEnd{TurnID: turnID, Status: StatusRejected, Reason: reason, Usage: &TurnUsage{}})
	return err
}

func isQuotaTurn(turnID string) bool { return strings.HasPrefix(turnID, quotaTurnPrefix) }

// rollQuota starts the counters of a new day and/or month: the one whose period
// changed is set to 0. It returns the state after the write. Cost: 1 write unit (state
// items are small), once per period.
func (st *store) rollQuota(ctx context.Context, agentID, me string, cur state, day, month string) (state, error) {
	set := []string{}
	vals := map[string]types.AttributeValue{":me": s(me), ":zero": n(0)}
	attrs := []string{attrOwner}
	if cur.QuotaDay != day {
		set = append(set, "#quota_day = :d", "#quota_turns = :zero")
		vals[":d"] = s(day)
		attrs = append(attrs, attrQuotaDay, attrQuotaTurns)
	}
	if cur.QuotaMonth != month {
		set = append(set, "#quota_month = :m", "#quota_tokens = :zero")
		vals[":m"] = s(month)
		attrs = append(attrs, attrQuotaMonth, attrQuotaTokens)
	}
	out, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET " + strings.Join(set, ", ")),
		ConditionExpression:       aws.String("#owner = :me"),
		ExpressionAttributeNames:  names(attrs...),
		ExpressionAttributeValues: vals,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if dynamoerr.CondFailed(err) {
		return state{}, errLeaseLost
	}
	if err != nil {
		return state{}, fmt.Errorf("agent: roll quota counters of %s: %w", agentID, err)
	}
	return decodeState(out.Attributes)
}

// errQuota: a model call of the open turn would pass a cap (spendReason); the turn
// ends rejected with the reason a *quotaError carries.
var errQuota = errors.New("agent: quota reached")

// quotaError is errQuota with the reason the turn ends with.
type quotaError struct{ reason string }

func (e *quotaError) Error() string        { return e.reason }
func (e *quotaError) Is(target error) bool { return target == errQuota }

// spendReason returns why the open turn may not make its next model call ("" when it
// may), checked before every model call of a turn — the main model's and the
// compactor's: the month's tokens (the counter as of the turn's start plus what the
// turn used so far) and the turn's own budget (quotas.turn_tokens, turn_model_calls).
// pending is usage of compactor calls not yet logged; estimate is the estimate of the
// call's input tokens, so a call that would pass a token cap is not made.
func (rn *activeRun) spendReason(prof tools.Profile, pending *modelUsage, pendingCalls, estimate int64) string {
	q := prof.Quotas
	var used TurnUsage
	if t := rn.log.turn; t != nil {
		used = t.usage
	}
	if pending != nil {
		used.InputTokens += pending.InputTokens
		used.OutputTokens += pending.OutputTokens
	}
	used.ModelCalls += pendingCalls
	tokens := used.InputTokens + used.OutputTokens
	now := rn.c.now().UTC()
	month := rn.st.QuotaTokens
	if rn.st.QuotaMonth != now.Format("2006-01") {
		month = 0
	}
	switch {
	case q.TurnModelCalls > 0 && used.ModelCalls >= q.TurnModelCalls:
		return fmt.Sprintf("quota: turn_model_calls %d reached", q.TurnModelCalls)
	case q.TurnTokens > 0 && tokens+estimate > q.TurnTokens:
		return fmt.Sprintf("quota: turn_tokens %d reached (%d used, the next call's input about %d)", q.TurnTokens, tokens, estimate)
	case q.TokensPerMonth > 0 && month+tokens+estimate > q.TokensPerMonth:
		y, m, _ := now.Date()
		return fmt.Sprintf("quota: tokens_per_month %d reached; resets at %s", q.TokensPerMonth,
			time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339))
	}
	return ""
}
