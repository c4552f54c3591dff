package connections

// The replay slots: a cluster-wide counting semaphore on the connections table.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/lease"
)

// ErrNoSlotGroup is returned by Slots.TryAcquire for a group outside [0, Groups()).
var ErrNoSlotGroup = errors.New("connections: no such slot group")

// Slots is a cluster-wide counting semaphore of n slots, items "slot#<i>" of the
// connections table, each a lease with an expiry so a crashed holder frees its slot.
// It bounds concurrent replay reads across every Lambda instance: at most n held at
// once. The slots form Groups() groups of SlotGroupSize (the last may be smaller): group
// g is slot#(g·k) … slot#(min((g+1)·k, n)−1). A waiter polls one group at a time.
type Slots struct {
	store *Store
	n     int
	ttl   time.Duration
}

// NewSlots returns a semaphore of n slots with leases of ttl.
func (st *Store) NewSlots(n int, ttl time.Duration) *Slots { return &Slots{store: st, n: n, ttl: ttl} }

// Groups returns G = ⌈n / SlotGroupSize⌉, the number of slot groups (1 for n ≤ 4).
func (sl *Slots) Groups() int { return (sl.n + SlotGroupSize - 1) / SlotGroupSize }

// TryAcquire takes a free slot of group (0 ≤ group < Groups()) and returns its index, or
// -1 if all of the group's slots are held (slots of other groups may be free: a waiter
// picks a group at random for each poll). It first reads the group's slots (one
// eventually consistent BatchGetItem of at most SlotGroupSize keys, half a read unit
// each) and writes only to those that look free, starting from a random one, so that a
// crowd of waiters costs reads, not failed conditional writes.
func (sl *Slots) TryAcquire(ctx context.Context, holder string, group int) (int, error) {
	if group < 0 || group >= sl.Groups() {
		return -1, fmt.Errorf("connections: acquire slot in group %d of %d: %w", group, sl.Groups(), ErrNoSlotGroup)
	}
	lo := group * SlotGroupSize
	size := min(lo+SlotGroupSize, sl.n) - lo
	now := sl.store.now()
	busy, err := sl.busy(ctx, lo, size, now)
	if err != nil {
		return -1, err
	}
	start := rand.IntN(size)
	for j := range size {
		i := lo + (start+j)%size
		if busy[i] {
			continue
		}
		_, err := sl.store.update(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(sl.store.table),
			Key:                       slotKey(i),
			UpdateExpression:          aws.String("SET #holder = :me, #until_ms = :until"),
			ConditionExpression:       aws.String("attribute_not_exists(#holder) OR " + lease.ExpiredCond("#until_ms", ":now")),
			ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(holder), ":until": n(now.Add(sl.ttl).UnixMilli()), ":now": n(now.UnixMilli())},
		})
		if err == nil {
			return i, nil
		}
		if !dynamoerr.CondFailed(err) {
			return -1, fmt.Errorf("connections: acquire slot %d: %w", i, err)
		}
	}
	return -1, nil
}

func slotKey(i int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: s(slotPrefix + strconv.Itoa(i))}
}

// busy reports which of the size slots from lo hold a live lease, as far as an
// eventually consistent read can tell (a stale answer only costs one failed conditional
// write).
func (sl *Slots) busy(ctx context.Context, lo, size int, now time.Time) (map[int]bool, error) {
	keys := make([]map[string]types.AttributeValue, size)
	for j := range keys {
		keys[j] = slotKey(lo + j)
	}
	busy := map[int]bool{}
	req := map[string]types.KeysAndAttributes{sl.store.table: {Keys: keys}}
	for len(req) > 0 {
		out, err := sl.store.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return nil, fmt.Errorf("connections: read slots %d-%d: %w", lo, lo+size-1, err)
		}
		for _, item := range out.Responses[sl.store.table] {
			i, _ := strconv.Atoi(strings.TrimPrefix(str(item, attrPK), slotPrefix))
			if str(item, attrSlotHolder) != "" && lease.LiveMs(num(item, attrSlotUntil), now.UnixMilli()) {
				busy[i] = true
			}
		}
		req = out.UnprocessedKeys
	}
	return busy, nil
}

// Release frees slot i if holder still holds it.
func (sl *Slots) Release(ctx context.Context, holder string, i int) error {
	_, err := sl.store.update(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(sl.store.table),
		Key:                       slotKey(i),
		UpdateExpression:          aws.String("REMOVE #holder, #until_ms"),
		ConditionExpression:       aws.String("#holder = :me"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":me": s(holder)},
	})
	if err != nil && !dynamoerr.CondFailed(err) {
		return fmt.Errorf("connections: release slot %d: %w", i, err)
	}
	return nil
}
