package sessiondata

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/lease"
)

// The agents table's layout, as internal/agent keeps it: every item of an agent has
// pk "agent#<id>"; the state item has sk "state". Deferred-wake markers live in one
// partition, sk the agent id.
const (
	agentPrefix = "agent#"
	skState     = "state"
	deferredPK  = "quota#deferred"
	// The runner lease on the state item: holder and expiry (unix ms).
	attrOwner      = "owner"
	attrLeaseUntil = "lease_until"
	attrOwnerConn  = "conn" // the owner connection a client frame's inbox write is conditional on (agent.InjectFrom)
)

// fencePrefix starts the runner-lease holder id a reset or delete writes. Runner ids
// never start with it, so a second run knows a fence left by an interrupted one and
// does not wait for it.
const fencePrefix = "session-op-"

// fenceTerm is how long a fence holds the runner lease before it must be renewed: an
// interrupted reset or delete blocks the agent's turns for at most this long.
const fenceTerm = time.Minute

// keptOnReset reports whether a reset keeps a state item attribute: the keys, the
// profile, and the usage and quota counters. Everything else is runtime state — the
// inbox, the open turn, the cancel marks, the policy claim, the model roles, any
// checkpoint — and goes, whatever its name, so that state added later is covered.
func keptOnReset(name string) bool {
	return name == "profile" || keptOnDelete(name)
}

// keptOnDelete reports whether a delete keeps a state item attribute: only the usage
// and quota counters billing and quotas need (docs/security.md, "Deleting a session").
func keptOnDelete(name string) bool {
	return name == "pk" || name == "sk" || strings.HasPrefix(name, "usage_") || strings.HasPrefix(name, "quota_")
}

func stateKey(agentID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": str(agentPrefix + agentID), "sk": str(skState)}
}

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// fence is the runner lease a reset or delete holds while it works.
type fence struct {
	id      string
	renewed time.Time
}

// takeFence takes agentID's runner lease, whoever holds it: a runner holding it loses
// it at its next renewal (a third of its lease) and stops writing, and no runner
// starts until the fence is let go. It returns until when the lease it took over
// could still be used by its holder (zero if none was held, or only by a fence). It
// writes the state item even if it does not exist (the strip at the end removes it
// again). Cost: 1 write unit.
func (st *Store) takeFence(ctx context.Context, agentID string) (*fence, time.Time, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	f := &fence{id: fencePrefix + hex.EncodeToString(b)}
	old, err := st.setFence(ctx, agentID, f)
	if err != nil {
		return nil, time.Time{}, err
	}
	var until time.Time
	if o, ok := old[attrOwner].(*types.AttributeValueMemberS); ok && !strings.HasPrefix(o.Value, fencePrefix) {
		if lu, ok := old[attrLeaseUntil].(*types.AttributeValueMemberN); ok {
			if ms, err := strconv.ParseInt(lu.Value, 10, 64); err == nil && lease.LiveMs(ms, st.now().UnixMilli()) {
				until = time.UnixMilli(ms)
			}
		}
	}
	return f, until, nil
}

func (st *Store) setFence(ctx context.Context, agentID string, f *fence) (map[string]types.AttributeValue, error) {
	now := st.now()
	out, err := st.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.t.Agents),
		Key:       stateKey(agentID),
		// The fence also takes the agent's owner connection off the state item: from
		// here on no client frame queues anything (agent.InjectFrom), so nothing a
		// connection of the old session sent can land after the erase, in the session
		// the agent id holds next. A connect after the operation names its own.
		UpdateExpression:          aws.String("SET #owner = :f, #lease_until = :u REMOVE #conn"),
		ExpressionAttributeNames:  map[string]string{"#owner": attrOwner, "#lease_until": attrLeaseUntil, "#conn": attrOwnerConn},
		ExpressionAttributeValues: map[string]types.AttributeValue{":f": str(f.id), ":u": num(now.Add(fenceTerm).UnixMilli())},
		ReturnValues:              types.ReturnValueAllOld,
	})
	if err != nil {
		return nil, fmt.Errorf("sessiondata: fence runner of %s: %w", agentID, err)
	}
	f.renewed = now
	return out.Attributes, nil
}

// keep renews the fence once a third of its term has passed. Cost: 1 write unit then.
func (st *Store) keep(ctx context.Context, agentID string, f *fence) error {
	if st.now().Sub(f.renewed) < fenceTerm/3 {
		return nil
	}
	_, err := st.setFence(ctx, agentID, f)
	return err
}

// waitLease waits until a runner lease taken over by the fence has run out: its holder
// renews every third of its term, so by then it has found the lease lost and stopped.
func waitLease(ctx context.Context, until time.Time, now time.Time) error {
	if until.IsZero() {
		return nil
	}
	// Live through its last millisecond (internal/lease): run out from the next one.
	if err := sleep(ctx, until.Add(time.Millisecond).Sub(now)); err != nil {
		return fmt.Errorf("sessiondata: wait for the runner lease: %w", err)
	}
	return nil
}

// eraseAgentItems deletes every item of agentID in the agents table but the state
// item (inbox items, and any other side record by its key prefix), and its
// deferred-wake marker. Cost: one Query per 1,000 items (keys only is still billed by
// item size) and 1 write unit per item.
func (st *Store) eraseAgentItems(ctx context.Context, e *eraser, agentID string) error {
	var start map[string]types.AttributeValue
	for {
		out, err := st.api.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(st.t.Agents),
			KeyConditionExpression:    aws.String("pk = :p"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(agentPrefix + agentID)},
			ProjectionExpression:      aws.String("pk, sk"),
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return fmt.Errorf("sessiondata: list agent items of %s: %w", agentID, err)
		}
		var keys []map[string]types.AttributeValue
		for _, it := range out.Items {
			if sk, ok := it["sk"].(*types.AttributeValueMemberS); ok && sk.Value != skState {
				keys = append(keys, it)
			}
		}
		if err := e.erase(ctx, st.t.Agents, keys); err != nil {
			return err
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		start = out.LastEvaluatedKey
	}
	_, err := st.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(st.t.Agents),
		Key:       map[string]types.AttributeValue{"pk": str(deferredPK), "sk": str(agentID)},
	})
	if err != nil {
		return fmt.Errorf("sessiondata: delete deferred wake of %s: %w", agentID, err)
	}
	return nil
}

// errFenceLost: another reset or delete took the fence over.
var errFenceLost = errors.New("sessiondata: another session operation took the agent over")

// strip removes every attribute of agentID's state item that kept does not keep,
// the fence included, in one write conditional on still holding the fence; a state
// item left with its keys only is deleted. Cost: 1 read unit and 1 or 2 write units.
func (st *Store) strip(ctx context.Context, agentID string, f *fence, kept func(string) bool) error {
	out, err := st.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.t.Agents), Key: stateKey(agentID), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return fmt.Errorf("sessiondata: read state of %s: %w", agentID, err)
	}
	var remove []string
	names := map[string]string{"#owner": attrOwner}
	left := 0
	for name := range out.Item {
		if kept(name) {
			if name != "pk" && name != "sk" {
				left++
			}
			continue
		}
		ph := fmt.Sprintf("#r%d", len(remove))
		names[ph] = name
		remove = append(remove, ph)
	}
	sort.Strings(remove)
	cond := aws.String("#owner = :f")
	vals := map[string]types.AttributeValue{":f": str(f.id)}
	if left == 0 {
		_, err = st.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(st.t.Agents), Key: stateKey(agentID),
			ConditionExpression: cond, ExpressionAttributeNames: map[string]string{"#owner": attrOwner},
			ExpressionAttributeValues: vals,
		})
	} else {
		_, err = st.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(st.t.Agents), Key: stateKey(agentID),
			UpdateExpression:    aws.String("REMOVE " + strings.Join(remove, ", ")),
			ConditionExpression: cond, ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
		})
	}
	if dynamoerr.CondFailed(err) {
		return fmt.Errorf("%w: %s", errFenceLost, agentID)
	}
	if err != nil {
		return fmt.Errorf("sessiondata: clear state of %s: %w", agentID, err)
	}
	return nil
}
