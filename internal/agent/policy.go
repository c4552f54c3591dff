package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/dynamoerr"

	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/tools"
)

// The policy in force (docs/architecture.md, "Policies in send order").
//
// Every policy/updated a set_policy appends carries the frame's stamp key on its log
// item (sessionlog.Event.Stamp). The policy in force is the fold of the log's
// policy/updated in seq order in which an event takes over unless it is stamped below
// the one in force (policyIn): the one sent last among those logged. The spec's rule,
// "the last one appended wins", is kept by repeating the policy in force, with its
// stamp, after any policy/updated stamped below it (a stale tail). The set_policy
// handlers do that as they race (SetPolicy), and the runner does it before it applies
// a policy (activeRun.policy), so that a handler killed half-way never leaves a stale
// tail where a tool call reads it.

// maxPolicyRepeats bounds the repeats one SetPolicy or one policy check makes: each one
// takes another set_policy appending meanwhile.
const maxPolicyRepeats = 16

// SetPolicy appends policy/updated with patterns, stamped with the frame's
// protocol.Stamp key (from ctx), and claims it on the state item, counting the
// stimulus so a running turn reads the log again before its next tool call.
//
// A set_policy sent before one already received (seePolicy) or claimed appends
// nothing: a burst of set_policy frames logs the newest, not each of them, and only
// frames handled out of send order at the same time repeat one (at most
// maxPolicyRepeats each). Handlers that race
// may log out of send order; claims rise in both stamp and seq (claimPolicy), so a
// handler whose claim is refused knows which way: its policy/updated logged after a
// later-sent one's repeats that one after it; one that finds an earlier-sent one logged
// and claimed after its own repeats its own. Each handler that returns has left its
// policy, or a later-sent one, the last policy/updated in the log. A handler killed
// between its append and its claim leaves an unclaimed policy/updated, which the fold
// reads as well; a stale tail it leaves is repeated over by the runner.
//
// Cost: 1 write of the state item (seePolicy), the append (a transaction with the
// check of the log's epoch: 4 write units up to 1 KB, and 1 read unit for the tip when
// this process has not appended to the log lately) and the claim (1 write unit). A repeat — only for frames handled out of send order
// at the same time — adds 1 read, 1 append and 1 claim. One sent before one already
// received costs the write alone.
func (s *Service) SetPolicy(ctx context.Context, agentID string, patterns []string) (err error) {
	done, dup, err := s.c.once(ctx, agentID)
	if err != nil || dup {
		return err
	}
	defer func() { done(err) }()
	if patterns == nil {
		patterns = []string{}
	}
	if expect, ok := control.ExpectOf(ctx); ok {
		return s.setPolicyExpecting(ctx, agentID, patterns, expect)
	}
	key := s.c.stamp(ctx).Key()
	newest, err := s.c.store.seePolicy(ctx, agentID, key)
	if err != nil {
		return err
	}
	if !newest {
		return nil // a later set_policy was received, or is logged and claimed
	}
	s.c.pause(PausePolicyRead, agentID)
	// Fence{}: the handler read no epoch; its put is checked against the log's seq 0,
	// so a tip cached from a log since reset or deleted is never appended on.
	ev, err := s.c.log.AppendIn(ctx, agentID, sessionlog.Fence{}, TypePolicyUpdated, policyUpdated{Patterns: patterns, ClientID: control.FrameFrom(ctx).ClientID}, key)
	if err != nil {
		return fmt.Errorf("agent: update policy of %s: %w", agentID, err)
	}
	s.c.pause(PausePolicyLogged, agentID)
	if s.c.crashed(CrashPolicyLogged) {
		return ErrCrashed
	}
	return s.claimPolicy(ctx, agentID, ev)
}

// claimPolicy claims ev, a policy/updated just logged, and repeats the newest policy
// after it while the claim finds the log out of send order (see SetPolicy).
func (s *Service) claimPolicy(ctx context.Context, agentID string, ev sessionlog.Event) error {
	for range maxPolicyRepeats {
		old, claimed, err := s.c.store.claimPolicy(ctx, agentID, ev.Stamp, ev.Seq)
		if err != nil || claimed {
			return err
		}
		var again sessionlog.Event
		switch {
		case old.PolicyAt == ev.Stamp, old.PolicyAt > ev.Stamp && (old.PolicySeq > ev.Seq || old.PolicySeq == 0):
			// Sent later (or in the same millisecond, unnumbered) and logged later: ev
			// is not the tail. (No seq: claimed before claims had one, as the last
			// policy/updated then.)
			return nil
		case old.PolicyAt > ev.Stamp:
			// ev is logged after the policy/updated of a set_policy sent later.
			evs, err := s.c.log.Read(ctx, agentID, old.PolicySeq, 1)
			if err != nil {
				return fmt.Errorf("agent: read claimed policy of %s: %w", agentID, err)
			}
			if len(evs) != 1 || evs[0].Type != TypePolicyUpdated || evs[0].Stamp != old.PolicyAt {
				return fmt.Errorf("agent: claimed policy of %s at seq %d: not a policy/updated stamped %s", agentID, old.PolicySeq, old.PolicyAt)
			}
			again = evs[0]
		default:
			// A set_policy sent earlier is logged and claimed after ev.
			again = ev
		}
		ev, err = s.c.log.AppendIn(ctx, agentID, sessionlog.Fence{Epoch: ev.Epoch}, TypePolicyUpdated, json.RawMessage(again.Payload), again.Stamp)
		if errors.Is(err, sessionlog.ErrEpoch) {
			return nil // reset or deleted since: the policy went with its log
		}
		if err != nil {
			return fmt.Errorf("agent: repeat policy of %s: %w", agentID, err)
		}
		if s.c.crashed(CrashPolicyRepeated) {
			return ErrCrashed
		}
	}
	return fmt.Errorf("agent: update policy of %s: %w", agentID, errPolicyContended)
}

// errPolicyContended: a set_policy kept finding others logging out of order.
var errPolicyContended = errors.New("agent: policy claim contended")

// policyIn is the policy/updated in force in events, the agent's log from seq 0 (nil:
// none): the fold in seq order in which each one takes over unless it is stamped below
// the one in force (one without a stamp always takes over). stale reports that the
// newest policy/updated is not the one in force.
func policyIn(events []sessionlog.Event) (inForce *sessionlog.Event, stale bool) {
	var last *sessionlog.Event
	for i := range events {
		ev := &events[i]
		if ev.Type != TypePolicyUpdated {
			continue
		}
		last = ev
		if inForce == nil || ev.Stamp == "" || ev.Stamp >= inForce.Stamp {
			inForce = ev
		}
	}
	return inForce, last != inForce
}

// policyOf is the tools.Policy of the policy/updated in force in events.
func policyOf(events []sessionlog.Event) tools.Policy {
	ev, _ := policyIn(events)
	if ev == nil {
		return tools.Policy{}
	}
	return tools.Policy{Patterns: decode[policyUpdated](*ev).Patterns, Set: true}
}

// policy is the policy in force for the next run of tools: the window's fold, which
// starts from the checkpoint's. A stale tail — left by a set_policy killed between its
// append and its claim — is repeated over first, so the last policy/updated before a
// tool call is always the one it ran under.
func (rn *activeRun) policy(ctx context.Context) (tools.Policy, error) {
	for range maxPolicyRepeats {
		f := rn.log.fold
		if f.policy == nil {
			return tools.Policy{}, nil
		}
		if !f.stale() {
			return tools.Policy{Patterns: f.policy.patterns, Set: true}, nil
		}
		if _, err := rn.log.appendStamped(ctx, TypePolicyUpdated, policyUpdated{Patterns: f.policy.patterns}, f.policy.stamp); err != nil {
			return tools.Policy{}, err
		}
	}
	return tools.Policy{}, fmt.Errorf("agent: policy of %s: %w", rn.agent, errPolicyContended)
}

// seePolicy records key as the newest set_policy received, reporting false — writing
// nothing — when a set_policy sent later was received (policy_seen) or claimed
// (policy_at) already. Frames of one millisecond from a client that does not number
// them share a key: each is taken as the newest. Cost: 1 write unit.
func (st *store) seePolicy(ctx context.Context, agentID, key string) (bool, error) {
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression: aws.String("SET #policy_seen = :k"),
		ConditionExpression: aws.String("(attribute_not_exists(#policy_seen) OR #policy_seen <= :k) AND " +
			"(attribute_not_exists(#policy_at) OR #policy_at <= :k)"),
		ExpressionAttributeNames:  names(attrPolicyAt, attrPolicySeen),
		ExpressionAttributeValues: map[string]types.AttributeValue{":k": s(key)},
	})
	if dynamoerr.CondFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("agent: record set_policy of %s: %w", agentID, err)
	}
	return true, nil
}
