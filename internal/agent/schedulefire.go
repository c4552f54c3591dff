package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/schedule"
	"github.com/terret/terret-ws/internal/sessionlog"
)

var _ schedule.Injector = (*Service)(nil)

// scheduleFired is schedule/fired's payload; InboxID ties it to the inject it
// precedes, so a runner that died between the two logs it once.
type scheduleFired struct {
	ScheduleID string `json:"schedule_id"`
	FireAt     string `json:"fire_at"`
	InboxID    string `json:"inbox_id,omitempty"`
}

// logFire appends schedule/fired before the inject of a schedule's fire, unless a dead
// invocation already did.
func (rn *activeRun) logFire(ctx context.Context, it inboxItem) error {
	if it.ScheduleID == "" || rn.log.fired[it.ID] {
		return nil
	}
	_, err := rn.append(ctx, schedule.TypeFired, scheduleFired{ScheduleID: it.ScheduleID, FireAt: it.FireAt, InboxID: it.ID})
	return err
}

// InjectFire queues a schedule's fire: an inject with wake of f.Text as an inbox item
// of its own carrying the schedule's id, written in one transaction with f.Claim (the
// schedule's write) and the inbox's count, so a fire is queued exactly when its claim
// holds. The runner logs schedule/fired and then the inject (a turn on an idle agent,
// a steer on a busy one), as for Inject. A failed claim is schedule.ErrDuplicate; a
// full inbox or a text over MaxTextBytes is schedule.ErrRefused; nothing is written
// then. Cost: the transaction (2 write units per item: the claim's, the inbox item's
// per KB, the state item's) and one asynchronous invoke.
func (s *Service) InjectFire(ctx context.Context, agentID string, f schedule.Fire) error {
	if n := TextBytes(f.Text); n > MaxTextBytes {
		return fmt.Errorf("%w: %w", schedule.ErrRefused, &TextTooLongError{Bytes: n})
	}
	now := s.c.now()
	it := inboxItem{ID: newInboxID(s.c.stamp(ctx).Key()), Text: f.Text, Wake: true, At: now.UTC().Format(sessionlog.TimeFormat),
		ScheduleID: f.ScheduleID, FireAt: f.FireAt}
	item, err := attributevalue.MarshalMap(compress(it))
	if err != nil {
		return fmt.Errorf("agent: encode inbox item: %w", err)
	}
	for k, v := range key(agentID, inboxPrefix+it.ID) {
		item[k] = v
	}
	size := int64(len(it.Text))
	maxItems, maxBytes := int64(MaxInboxItems+WakeReserve), int64(MaxInboxBytes+MaxTextBytes)
	table := aws.String(s.c.store.table)
	items := append(append([]types.TransactWriteItem{}, f.Claim...),
		types.TransactWriteItem{Put: &types.Put{TableName: table, Item: item, ConditionExpression: aws.String("attribute_not_exists(sk)")}},
		types.TransactWriteItem{Update: &types.Update{TableName: table, Key: key(agentID, skState),
			UpdateExpression: aws.String("ADD #items :one, #bytes :size, #pending :one"),
			ConditionExpression: aws.String("(attribute_not_exists(#items) OR #items < :maxItems) AND " +
				"(attribute_not_exists(#bytes) OR #bytes <= :room)"),
			ExpressionAttributeNames:  map[string]string{"#items": attrInboxItems, "#bytes": attrInboxBytes, "#pending": attrPending},
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1), ":size": n(size), ":maxItems": n(maxItems), ":room": n(maxBytes - size)},
		}})
	for attempt := 0; ; attempt++ {
		_, err = s.c.store.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if !dynamoerr.TxConflict(err) || attempt >= 8 {
			break
		}
		// Another fire (a duplicate delivery) or a frame met it on an item: once that
		// one is done, this one's conditions decide.
		if err := sleep(ctx, time.Duration(5<<attempt)*time.Millisecond); err != nil {
			return err
		}
	}
	for i := range f.Claim {
		if dynamoerr.TxCondFailed(err, i) {
			return fmt.Errorf("%w: %s at %s", schedule.ErrDuplicate, f.ScheduleID, f.FireAt)
		}
	}
	if dynamoerr.TxCondFailed(err, len(items)-1) {
		return fmt.Errorf("%w: the agent's inbox is full", schedule.ErrRefused)
	}
	if dynamoerr.TxCondFailed(err, len(items)-2) {
		return errors.New("agent: fire's inbox id taken") // a random id met another
	}
	if err != nil {
		return fmt.Errorf("agent: queue fire of %s for %s: %w", f.ScheduleID, agentID, err)
	}
	s.c.pause(PauseQueued, agentID)
	return s.c.invoke(ctx, agentID)
}
