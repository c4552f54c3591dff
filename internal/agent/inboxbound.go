package agent

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/dynamoerr"
)

// The inbox's bound (docs/security.md, "The inbox is bounded"). Injects queued on the
// state item are bounded already (MaxInline of at most InlineTextBytes); those queued
// as items of their own are counted on the state item (inbox_items, inbox_bytes), and
// an inject that would take them past MaxInboxItems or MaxInboxBytes is refused with
// an *InboxFullError and not queued. A waking inject may go past them by WakeReserve
// injects and MaxTextBytes, so steers sent without wake to an idle agent cannot keep
// out the wake that drains them (and an inbox full of wakes drains by itself: each
// starts or steers a turn). So one agent's inbox holds at most
// MaxInline+MaxInboxItems+WakeReserve injects and about MaxInboxBytes+MaxTextBytes of
// text, however many steers a client sends while a turn works; a turn drains it all
// into its next step.
const (
	MaxInboxItems = control.MaxInboxItems
	MaxInboxBytes = control.MaxInboxBytes
	// WakeReserve is how many waking injects may wait past MaxInboxItems.
	WakeReserve = 4
)

// The state item's counters of the injects queued as items of their own.
const (
	attrInboxItems = "inbox_items"
	attrInboxBytes = "inbox_bytes"
)

// ErrInboxFull: the agent's inbox is at its bound (see InboxFullError).
var ErrInboxFull = control.ErrInboxFull

// InboxFullError is an inject refused because the agent's inbox is at its bound
// (control.InboxFullError).
type InboxFullError = control.InboxFullError

// reserveInbox counts an inject of size bytes (waking or not) about to be queued as an
// item of its own, or returns an *InboxFullError, counting nothing, when that would pass the
// bound. Cost: 1 write unit.
func (st *store) reserveInbox(ctx context.Context, agentID string, size int64, wake bool) error {
	maxItems, maxBytes := int64(MaxInboxItems), int64(MaxInboxBytes)
	if wake {
		maxItems, maxBytes = maxItems+WakeReserve, maxBytes+MaxTextBytes
	}
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression: aws.String("ADD #items :one, #bytes :size"),
		ConditionExpression: aws.String("(attribute_not_exists(#items) OR #items < :maxItems) AND " +
			"(attribute_not_exists(#bytes) OR #bytes <= :room)"),
		ExpressionAttributeNames: map[string]string{"#items": attrInboxItems, "#bytes": attrInboxBytes},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":one": n(1), ":size": n(size), ":maxItems": n(maxItems), ":room": n(maxBytes - size),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if old, failed := dynamoerr.CondFailedItem(err); failed {
		return &InboxFullError{Items: numberAttr(old, attrInboxItems), Bytes: numberAttr(old, attrInboxBytes)}
	}
	if err != nil {
		return fmt.Errorf("agent: count inject for %s: %w", agentID, err)
	}
	return nil
}

// releaseInbox takes items injects of size bytes in all off the counters: injects
// drained, or one whose queueing failed after reserveInbox. Cost: 1 write unit.
func (st *store) releaseInbox(ctx context.Context, agentID string, items, size int64) error {
	if items == 0 {
		return nil
	}
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("ADD #items :items, #bytes :size"),
		ExpressionAttributeNames:  map[string]string{"#items": attrInboxItems, "#bytes": attrInboxBytes},
		ExpressionAttributeValues: map[string]types.AttributeValue{":items": n(-items), ":size": n(-size)},
	})
	if err != nil {
		return fmt.Errorf("agent: uncount drained injects of %s: %w", agentID, err)
	}
	return nil
}

func numberAttr(item map[string]types.AttributeValue, name string) int64 {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		x, _ := strconv.ParseInt(v.Value, 10, 64)
		return x
	}
	return 0
}

// The agent's cancels waiting out InFlightBound: how many (cancel_waiting), and the
// deadline of the newest (cancel_wait_until, Unix ms). A count whose newest deadline
// has passed is stale — every wait it counts is over, or its handler died — and the
// next cancel to wait starts it again.
const (
	attrCancelWaiting   = "cancel_waiting"
	attrCancelWaitUntil = "cancel_wait_until"
)

// enterCancelWait takes one of the agent's MaxWaitingCancels waits, until deadline,
// reporting false, writing nothing, when all are taken. Cost: 1 write unit (2 when the
// count was stale).
func (st *store) enterCancelWait(ctx context.Context, agentID string, now, deadline time.Time) (bool, error) {
	attrs := map[string]string{"#w": attrCancelWaiting, "#until": attrCancelWaitUntil}
	_, err := st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:         aws.String("ADD #w :one SET #until = :dl"),
		ConditionExpression:      aws.String("attribute_not_exists(#w) OR attribute_not_exists(#until) OR (#w < :max AND #until >= :now)"),
		ExpressionAttributeNames: attrs,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":one": n(1), ":max": n(MaxWaitingCancels), ":now": n(now.UnixMilli()), ":dl": n(deadline.UnixMilli()),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	old, failed := dynamoerr.CondFailedItem(err)
	if err != nil && !failed {
		return false, fmt.Errorf("agent: enter cancel wait of %s: %w", agentID, err)
	}
	if !failed {
		return true, nil
	}
	until := numberAttr(old, attrCancelWaitUntil)
	if until >= now.UnixMilli() {
		return false, nil // all taken
	}
	// Stale: start the count again, unless another cancel did first.
	_, err = st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #w = :one, #until = :dl"),
		ConditionExpression:       aws.String("#until = :old"),
		ExpressionAttributeNames:  attrs,
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1), ":dl": n(deadline.UnixMilli()), ":old": n(until)},
	})
	if dynamoerr.CondFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("agent: enter cancel wait of %s: %w", agentID, err)
	}
	return true, nil
}

// leaveCancelWait gives the wait back. Cost: 1 write unit.
func (st *store) leaveCancelWait(ctx context.Context, agentID string) {
	_, _ = st.update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("ADD #w :minus"),
		ExpressionAttributeNames:  map[string]string{"#w": attrCancelWaiting},
		ExpressionAttributeValues: map[string]types.AttributeValue{":minus": n(-1)},
	})
}
