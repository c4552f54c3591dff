package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/lease"
)

// Deferred wakes. A turn that a quota refused leaves its waking inject queued; nothing
// would start the runner for it until the agent's next stimulus. So the refusal also
// writes a marker — one small item per agent, under the one partition pk
// "quota#deferred" with sk the agent id — and a periodic sweep (the runner function's
// QuotaSweep schedule on AWS, a ticker in `terret dev`) Queries that partition and
// starts the runner, exactly as an inject does, for each agent whose quota now allows
// a turn: its day or month reset, or its cap was raised. The runner's lease makes a
// sweep's invoke as safe as any other; the marker's claim makes it one invoke per
// marker even with sweeps running at once.

// QuotaSweepInput is the runner function's event that runs Runner.SweepQuotas
// (template.yaml, RunnerFunction's QuotaSweep schedule).
const QuotaSweepInput = `{"sweep":"quotas"}`

// deferredPK is the partition of the deferred-wake markers.
const deferredPK = "quota#deferred"

// claimFor is how long a sweep's claim on a marker holds off other sweeps: a sweep that
// died between its claim and its invoke leaves the marker to the sweeps after this.
const claimFor = time.Minute

// sweepWorkers bounds the markers one sweep handles at once.
const sweepWorkers = 8

// deferred is one deferred-wake marker.
type deferred struct {
	AgentID    string `dynamodbav:"sk"`
	Ref        string `dynamodbav:"ref"`         // random per refusal: a newer marker is another one
	At         string `dynamodbav:"at"`          // when the refusal was made (RFC 3339), for operators
	ClaimUntil int64  `dynamodbav:"claim_until"` // unix ms; a sweep is waking the agent until then
}

func deferredKey(agentID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": s(deferredPK), "sk": s(agentID)}
}

// deferWake records that agentID has a wake a quota refused. It replaces any earlier
// marker of the agent (a new ref), so a sweep finishing with the earlier one leaves it.
// Cost: 1 write unit.
func (st *store) deferWake(ctx context.Context, agentID string, now time.Time) error {
	_, err := st.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(st.table),
		Item: map[string]types.AttributeValue{
			"pk": s(deferredPK), "sk": s(agentID), "ref": s(randomHex(8)), "at": s(now.UTC().Format(time.RFC3339)),
		},
	})
	if err != nil {
		return fmt.Errorf("agent: defer wake of %s: %w", agentID, err)
	}
	return nil
}

// deferredWakes returns every marker. An eventually consistent Query: a marker written
// since is seen by the next sweep. Cost: 0.5 read units per 4 KB of markers (0.5 with
// none).
func (st *store) deferredWakes(ctx context.Context) ([]deferred, error) {
	var out []deferred
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(st.table),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": s(deferredPK)},
	}
	for {
		page, err := st.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("agent: read deferred wakes: %w", err)
		}
		for _, item := range page.Items {
			var d deferred
			if err := attributevalue.UnmarshalMap(item, &d); err != nil {
				return nil, fmt.Errorf("agent: decode deferred wake: %w", err)
			}
			out = append(out, d)
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// claimWake takes marker d for one sweep until `until`: it reports false when the
// marker is gone, was replaced by a newer refusal's, or another sweep's claim holds.
// Cost: 1 write unit.
func (st *store) claimWake(ctx context.Context, d deferred, now, until time.Time) (bool, error) {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       deferredKey(d.AgentID),
		UpdateExpression:          aws.String("SET #claim_until = :until"),
		ConditionExpression:       aws.String("#ref = :ref AND (attribute_not_exists(#claim_until) OR " + lease.ExpiredCond("#claim_until", ":now") + ")"),
		ExpressionAttributeNames:  names("ref", "claim_until"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":ref": s(d.Ref), ":now": n(now.UnixMilli()), ":until": n(until.UnixMilli())},
	})
	if dynamoerr.CondFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("agent: claim deferred wake of %s: %w", d.AgentID, err)
	}
	return true, nil
}

// unclaimWake gives a claim back after a failed invoke, so the next sweep retries.
func (st *store) unclaimWake(ctx context.Context, d deferred) error {
	_, err := st.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       deferredKey(d.AgentID),
		UpdateExpression:          aws.String("REMOVE #claim_until"),
		ConditionExpression:       aws.String("#ref = :ref"),
		ExpressionAttributeNames:  names("ref", "claim_until"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":ref": s(d.Ref)},
	})
	if err == nil || dynamoerr.CondFailed(err) {
		return nil
	}
	return fmt.Errorf("agent: release claim on deferred wake of %s: %w", d.AgentID, err)
}

// dropWake deletes marker d once its wake is started, unless a newer refusal replaced
// it meanwhile (that one waits for its own wake). Cost: 1 write unit.
func (st *store) dropWake(ctx context.Context, d deferred) error {
	_, err := st.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(st.table),
		Key:                       deferredKey(d.AgentID),
		ConditionExpression:       aws.String("#ref = :ref"),
		ExpressionAttributeNames:  names("ref"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":ref": s(d.Ref)},
	})
	if err == nil || dynamoerr.CondFailed(err) {
		return nil
	}
	return fmt.Errorf("agent: drop deferred wake of %s: %w", d.AgentID, err)
}

// SweepQuotas starts the runner for every agent with a deferred wake whose quota now
// allows a turn, and returns how many it started. Each such marker is claimed (a
// conditional write), the runner invoked as an inject invokes it, and the marker
// deleted — unless a newer refusal replaced it. Sweeps may run at once, and race
// injects and refusals: a marker is claimed by one sweep only, a newer refusal's
// marker survives, and a runner started for an agent whose wake already ran finds
// nothing to do. A marker whose agent is still over quota stays, at one state read per
// sweep. A failed invoke gives the claim back and is returned, joined with any other
// error, after the other markers are handled.
//
// Cost: one Query (0.5 read units with no marker); per marker, a strongly consistent
// read of the agent's state item (1 read unit); per agent woken, 2 write units and one
// asynchronous invoke.
func (r *Runner) SweepQuotas(ctx context.Context) (int, error) {
	c := r.c
	marks, err := c.store.deferredWakes(ctx)
	if err != nil {
		return 0, err
	}
	var (
		mu    sync.Mutex
		woken int
		errs  []error
		wg    sync.WaitGroup
	)
	work := make(chan deferred)
	for range min(sweepWorkers, len(marks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				ok, err := r.sweepOne(ctx, d)
				mu.Lock()
				if ok {
					woken++
				}
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	for _, d := range marks {
		work <- d
	}
	close(work)
	wg.Wait()
	return woken, errors.Join(errs...)
}

// sweepOne wakes d's agent if its quota allows a turn now, and reports whether it did.
func (r *Runner) sweepOne(ctx context.Context, d deferred) (bool, error) {
	c := r.c
	now := c.now()
	if lease.LiveMs(d.ClaimUntil, now.UnixMilli()) {
		return false, nil // another sweep is waking it
	}
	st, err := c.store.getState(ctx, d.AgentID, attrProfile, attrQuotaDay, attrQuotaTurns, attrQuotaMonth, attrQuotaTokens)
	if err != nil {
		return false, err
	}
	// A profile that does not decode lets the runner run: the turn fails on it, with
	// that reason, as it would at the next inject.
	if prof, err := c.agentProfile(st.Profile); err == nil && !quotaAllows(prof, st.Counters, now) {
		return false, nil
	}
	ok, err := c.store.claimWake(ctx, d, now, now.Add(claimFor))
	if err != nil || !ok {
		return false, err
	}
	if err := c.invoke(ctx, d.AgentID); err != nil {
		return false, errors.Join(err, c.store.unclaimWake(ctx, d))
	}
	c.logger.InfoContext(ctx, "deferred wake started", "agent_id", d.AgentID, "refused_at", d.At)
	return true, c.store.dropWake(ctx, d)
}

// handleSweep serves the runner function's scheduled event (QuotaSweepInput).
func (r *Runner) handleSweep(ctx context.Context, sweep string) error {
	if sweep != "quotas" {
		return fmt.Errorf("agent: unknown sweep %q", sweep)
	}
	n, err := r.SweepQuotas(ctx)
	if n > 0 {
		r.c.logger.InfoContext(ctx, "deferred wakes started", "agents", n)
	}
	return err
}
