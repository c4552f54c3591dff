package connections

// The sender lease on an ownership record: taking it (Acquire), the backstop's mark,
// writing progress under it and letting it go (Checkpoint, Release, Abandon).

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/lease"
)

// AcquireOutcome is what an Acquire found.
type AcquireOutcome int

// Outcomes of Acquire.
const (
	// Acquired: the lease is the caller's; AcquireResult.Owner is the record as written.
	Acquired AcquireOutcome = iota + 1
	// LeaseHeld: another holder's lease is live; Owner is the record as it stands.
	LeaseHeld
	// NothingOwed: the lease is free, but the owner is not subscribed and has had hello,
	// or the cursor is already past upTo; Owner is the record as it stands.
	NothingOwed
	// NoOwner: no connection owns the agent; Owner is zero.
	NoOwner
)

func (k AcquireOutcome) String() string {
	switch k {
	case Acquired:
		return "acquired"
	case LeaseHeld:
		return "lease held"
	case NothingOwed:
		return "nothing owed"
	case NoOwner:
		return "no owner"
	}
	return fmt.Sprintf("AcquireOutcome(%d)", int(k))
}

// AcquireResult is the outcome of Acquire and the ownership record it saw or wrote.
type AcquireResult struct {
	Owner   Owner
	Outcome AcquireOutcome
}

// Acquire takes the sender lease of agentID's owner connection for ttl for h, if it is
// free or expired and there is something to send: hello not yet sent, or a
// subscription — and, with upTo >= 0, the cursor not past upTo (or a Pending mark). The
// result tells which it found (see AcquireOutcome); an error means only that DynamoDB
// could not be asked. Cost: 1 write unit; a refusal returns the record at no extra
// request (ReturnValuesOnConditionCheckFailure ALL_OLD).
func (st *Store) Acquire(ctx context.Context, agentID string, h Holder, ttl time.Duration, upTo int64) (AcquireResult, error) {
	now := st.now()
	cond := "attribute_exists(#conn) AND (attribute_not_exists(#lease) OR " + lease.ExpiredCond("#lease_until", ":now") + ") AND (#hello = :false OR #sub > :zero)"
	vals := map[string]types.AttributeValue{
		":me": s(h.ID), ":kind": s(string(h.Kind)), ":now": n(now.UnixMilli()), ":until": n(now.Add(ttl).UnixMilli()),
		":false": &types.AttributeValueMemberBOOL{Value: false}, ":zero": n(0),
	}
	if upTo >= 0 {
		cond += " AND (#hello = :false OR #next <= :upto OR attribute_exists(#pending))"
		vals[":upto"] = n(upTo)
	}
	out, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(st.table),
		Key:                                 ownerKey(agentID),
		UpdateExpression:                    aws.String("SET #lease = :me, #lease_kind = :kind, #lease_until = :until REMOVE #pending"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return AcquireResult{decodeOwner(out.Attributes), Acquired}, nil
	}
	old, failed := dynamoerr.CondFailedItem(err)
	switch {
	case !failed:
		return AcquireResult{}, fmt.Errorf("connections: acquire lease on %s: %w", agentID, err)
	case old == nil:
		return AcquireResult{Outcome: NoOwner}, nil
	}
	o := decodeOwner(old)
	if o.Lease != "" && lease.Live(o.LeaseUntil, now) {
		return AcquireResult{o, LeaseHeld}, nil
	}
	return AcquireResult{o, NothingOwed}, nil
}

// MarkPending asks the current lease holder of agentID to look at the log again before
// it lets go, for events up to upTo (upTo < 0: whatever is new). It returns done=true
// when the holder will see them — marked, the cursor is already past upTo, or a mark
// already reaches upTo — or when the lease turns out let go with the cursor past upTo
// (nothing owed), and done=false if no live lease is held and something may be owed
// (the caller should try Acquire).
//
// A mark for upTo >= 0 carries upTo (the mark's seq), so that a holder whose cursor is
// past it lets go in one write (Release). The seq only grows: the write is conditional
// on the mark being absent or a lower seq, so two wake-ups racing leave the higher, and
// a mark without a seq (upTo < 0: a subscribe, a kick, a watcher), which reaches every
// seq, is never narrowed to one. Cost: 1 write unit, none billed beyond it when the
// condition fails (the record comes back with the failure).
func (st *Store) MarkPending(ctx context.Context, agentID string, upTo int64) (done bool, err error) {
	now := st.now().UnixMilli()
	cond := "attribute_exists(#lease) AND " + lease.LiveCond("#lease_until", ":now")
	vals := map[string]types.AttributeValue{":mark": &types.AttributeValueMemberBOOL{Value: true}, ":now": n(now)}
	if upTo >= 0 {
		// A wake-up for events already sent must not keep the holder busy.
		cond += " AND #next <= :upto AND (attribute_not_exists(#pending) OR (attribute_type(#pending, :ntype) AND #pending < :upto))"
		vals[":upto"] = n(upTo)
		vals[":ntype"] = s("N")
		vals[":mark"] = n(upTo)
	}
	_, err = st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                           aws.String(st.table),
		Key:                                 ownerKey(agentID),
		UpdateExpression:                    aws.String("SET #pending = :mark"),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if old, failed := dynamoerr.CondFailedItem(err); failed {
		o := decodeOwner(old)
		switch {
		case old == nil:
			return false, nil
		case o.Lease != "" && lease.LiveMs(o.LeaseUntil.UnixMilli(), now):
			return true, nil // leased, and already past upTo or marked up to it
		case upTo >= 0 && o.HelloSent && (o.Sub == 0 || o.Next > upTo) && !o.Pending:
			// Let go meanwhile, past upTo: Acquire would find nothing owed (and a
			// failed write of its own would cost a write unit).
			return true, nil
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("connections: mark pending on %s: %w", agentID, err)
	}
	return true, nil
}

// MarkReaches reports whether o carries a mark that reaches upTo: one without a seq,
// or one whose seq is upTo or beyond (upTo < 0 asks for a mark without a seq).
func (o Owner) MarkReaches(upTo int64) bool {
	return o.Pending && (o.PendingTo == 0 || upTo >= 0 && o.PendingTo > upTo)
}

// Progress is what a lease holder writes back.
type Progress struct {
	Next      int64
	HelloSent bool
	Truncated bool // still owed
}

// Checkpoint records progress made under the lease for subscription o.Sub of o.ConnID
// and extends the lease by ttl. If the record moved under the holder (resubscribe), it
// returns the new record and ErrLeaseLost is NOT returned as long as the holder still
// holds the lease: the holder continues from the returned record. It returns
// ErrLeaseLost if the lease or the ownership is gone.
func (st *Store) Checkpoint(ctx context.Context, o Owner, holder string, p Progress, ttl time.Duration) (Owner, error) {
	return st.write(ctx, o, holder, p, ttl, false)
}

// Release records progress and lets the lease go, clearing a mark the progress covers
// (no mark, or a mark whose seq is below p.Next), in one conditional write. Otherwise
// the lease is kept and the current record returned with released=false, so that the
// holder looks at the log again: after a resubscribe, with the new subscription's
// cursor; for a mark without a seq, with the mark cleared (one more write, so that a
// mark left after the holder's next read stops its next release); for a mark whose seq
// is at or past p.Next, with the mark left as it is — the holder sends at least up to
// its seq (those events are in the log: the mark was left after they were appended)
// and the next Release clears it. A holder of a connection not subscribed (o.Sub 0) sends
// no events, so a mark with a seq never stops its release. Cost: 1 write unit when the
// progress covers the mark.
func (st *Store) Release(ctx context.Context, o Owner, holder string, p Progress) (cur Owner, released bool, err error) {
	cur, err = st.write(ctx, o, holder, p, 0, true)
	if err != nil {
		return cur, false, err
	}
	return cur, cur.Lease == "", nil
}

func (st *Store) write(ctx context.Context, o Owner, holder string, p Progress, ttl time.Duration, release bool) (Owner, error) {
	now := st.now()
	for {
		set := "SET #next = :next, #hello = :hello, #trunc = :trunc"
		vals := map[string]types.AttributeValue{
			":me": s(holder), ":c": s(o.ConnID), ":sub": n(o.Sub), ":next": n(p.Next),
			":hello": &types.AttributeValueMemberBOOL{Value: p.HelloSent},
			":trunc": &types.AttributeValueMemberBOOL{Value: p.Truncated},
		}
		update := set
		cond := "#lease = :me AND #conn = :c AND #sub = :sub"
		if release {
			update += ", #rel = :me REMOVE #lease, #lease_kind, #lease_until, #pending"
			if o.Sub == 0 {
				// Not subscribed: a mark with a seq asks for events nobody is owed, and
				// a holder never sends them (a subscribe marks anew, without a seq).
				// Kept, it would refuse every release of a holder that cannot move past it.
				cond += " AND (attribute_not_exists(#pending) OR attribute_type(#pending, :ntype))"
			} else {
				cond += " AND (attribute_not_exists(#pending) OR (attribute_type(#pending, :ntype) AND #pending < :next))"
			}
			vals[":ntype"] = s("N")
		} else {
			update += ", #lease_until = :until"
			vals[":until"] = n(now.Add(ttl).UnixMilli())
		}
		out, err := st.update(ctx, &dynamodb.UpdateItemInput{
			TableName:                           aws.String(st.table),
			Key:                                 ownerKey(o.Key()),
			UpdateExpression:                    aws.String(update),
			ConditionExpression:                 aws.String(cond),
			ExpressionAttributeValues:           vals,
			ReturnValues:                        types.ReturnValueAllNew,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return decodeOwner(out.Attributes), nil
		}
		old, failed := dynamoerr.CondFailedItem(err)
		if !failed {
			return Owner{}, fmt.Errorf("connections: write progress on %s: %w", o.AgentID, err)
		}
		cur := decodeOwner(old)
		if old == nil || cur.Lease != holder || cur.ConnID != o.ConnID {
			return cur, fmt.Errorf("%w: %s", ErrLeaseLost, o.AgentID)
		}
		if cur.Sub != o.Sub {
			// Resubscribed: the new subscription's cursor wins; keep the lease, clear
			// pending (we are about to look), and hand the new record back.
			out, err := st.update(ctx, &dynamodb.UpdateItemInput{
				TableName:                 aws.String(st.table),
				Key:                       ownerKey(o.Key()),
				UpdateExpression:          aws.String("SET #hello = :hello, #lease_until = :until REMOVE #pending"),
				ConditionExpression:       aws.String("#lease = :me AND #conn = :c AND #sub = :sub"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(holder), ":c": s(o.ConnID), ":sub": n(cur.Sub), ":hello": &types.AttributeValueMemberBOOL{Value: p.HelloSent || cur.HelloSent}, ":until": n(now.Add(leaseFloor(ttl)).UnixMilli())},
				ReturnValues:              types.ReturnValueAllNew,
			})
			if dynamoerr.CondFailed(err) {
				continue // moved again: look again
			}
			if err != nil {
				return Owner{}, fmt.Errorf("connections: adopt subscription on %s: %w", o.AgentID, err)
			}
			return decodeOwner(out.Attributes), nil
		}
		if cur.Pending && cur.PendingTo > p.Next && o.Sub != 0 {
			// A mark with a seq ahead of the progress (release only): keep the lease
			// and the mark; the holder sends up to the seq and releases again.
			return cur, nil
		}
		// A mark without a seq (release only): clear it, keep the lease, write the progress.
		out, err = st.update(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(st.table),
			Key:                       ownerKey(o.Key()),
			UpdateExpression:          aws.String(set + ", #lease_until = :until REMOVE #pending"),
			ConditionExpression:       aws.String("#lease = :me AND #conn = :c AND #sub = :sub"),
			ExpressionAttributeValues: withUntil(vals, n(now.Add(leaseFloor(ttl)).UnixMilli()), ":ntype"),
			ReturnValues:              types.ReturnValueAllNew,
		})
		if dynamoerr.CondFailed(err) {
			continue
		}
		if err != nil {
			return Owner{}, fmt.Errorf("connections: clear pending on %s: %w", o.AgentID, err)
		}
		return decodeOwner(out.Attributes), nil
	}
}

// leaseFloor is the lease extension used when a release turns into more work.
func leaseFloor(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return DefaultLease
	}
	return ttl
}

// DefaultLease is how long a sender may post to a connection before it must checkpoint.
const DefaultLease = 30 * time.Second

// withUntil returns vals with :until set and the placeholders drop left out (DynamoDB
// refuses a value no expression uses).
func withUntil(vals map[string]types.AttributeValue, until types.AttributeValue, drop ...string) map[string]types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(vals)+1)
	for k, v := range vals {
		out[k] = v
	}
	for _, k := range drop {
		delete(out, k)
	}
	out[":until"] = until
	return out
}

// Abandon records progress and lets the lease go even if Pending is set, for a holder
// that must stop (its invocation is ending) and hands the work to a fresh one. If the
// subscription changed under the holder, only the lease goes: the new subscription's
// cursor is kept.
func (st *Store) Abandon(ctx context.Context, o Owner, holder string, p Progress) error {
	_, err := st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(st.table),
		Key:                 ownerKey(o.Key()),
		UpdateExpression:    aws.String("SET #next = :next, #hello = :hello, #trunc = :trunc, #rel = :me REMOVE #lease, #lease_kind, #lease_until"),
		ConditionExpression: aws.String("#lease = :me AND #conn = :c AND #sub = :sub"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":me": s(holder), ":c": s(o.ConnID), ":sub": n(o.Sub), ":next": n(p.Next),
			":hello": &types.AttributeValueMemberBOOL{Value: p.HelloSent}, ":trunc": &types.AttributeValueMemberBOOL{Value: p.Truncated},
		},
	})
	if err == nil {
		return nil
	}
	if !dynamoerr.CondFailed(err) {
		return fmt.Errorf("connections: abandon lease on %s: %w", o.AgentID, err)
	}
	// Resubscribed meanwhile: the progress belongs to the replaced subscription and is
	// dropped, but the lease must still go, or the new subscription would wait for it to
	// run out. Pending stays set for whoever comes next.
	_, err = st.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.table),
		Key:                       ownerKey(o.Key()),
		UpdateExpression:          aws.String("SET #rel = :me REMOVE #lease, #lease_kind, #lease_until"),
		ConditionExpression:       aws.String("#lease = :me AND #conn = :c"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(holder), ":c": s(o.ConnID)},
	})
	if err != nil && !dynamoerr.CondFailed(err) {
		return fmt.Errorf("connections: abandon lease on %s: %w", o.AgentID, err)
	}
	return nil
}

// SlotGroupSize is k, the number of slots one poll for a free slot reads: Slots are
// split into groups of k so that a waiter's read costs k half read units whatever the
// number of slots, and the reads of W waiters spread over all groups instead of landing
// on every slot item (docs/scale.md, "The replay slots"). It is far under the 100 keys
// one BatchGetItem takes.
const SlotGroupSize = 4
