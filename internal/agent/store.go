package agent

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
)

// DB is the part of the DynamoDB client the runtime uses on AgentsTable.
type DB interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	// TransactWriteItems: a client frame's inbox write with its ownership check (InjectFrom).
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var _ DB = (*dynamodb.Client)(nil)

// AgentsTable layout (see docs/lifecycle.md): every item of an agent has
// pk "agent#<id>"; the state item has sk "state", inbox items sk "inbox#<inbox id>".
const (
	skState     = "state"
	inboxPrefix = "inbox#"
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

// update writes the agent's state item. The runner's writes ask for the item back
// (ReturnValues ALL_NEW, and ALL_OLD when a condition fails) and adopt it: "There is no
// additional cost associated with requesting a return value aside from the small network
// and processing overhead of receiving a larger response. No read capacity units are
// consumed." (https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html)
func (st *store) update(ctx context.Context, agentID string, in *dynamodb.UpdateItemInput) (*dynamodb.UpdateItemOutput, error) {
	in.TableName = aws.String(st.table)
	in.Key = key(agentID, skState)
	return st.db.UpdateItem(ctx, in)
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
	if dynamoerr.CondFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("agent: set %s of %s: %w", attr, agentID, err)
	}
	return true, nil
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
