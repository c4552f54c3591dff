package dynamoerr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/dynamotest"
)

func reasons(codes ...string) *types.TransactionCanceledException {
	tce := &types.TransactionCanceledException{Message: aws.String("cancelled")}
	for _, c := range codes {
		tce.CancellationReasons = append(tce.CancellationReasons, types.CancellationReason{Code: aws.String(c)})
	}
	return tce
}

// TestPredicates runs each predicate over the errors DynamoDB returns, bare and wrapped.
func TestPredicates(t *testing.T) {
	t.Parallel()
	item := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}}
	ccf := &types.ConditionalCheckFailedException{Message: aws.String("failed"), Item: item}
	cases := []struct {
		name       string
		err        error
		condFailed bool
		hasItem    bool
		txCanceled bool
		txCond     []bool // TxCondFailed(err, i) for i = 0, 1, 2
	}{
		{"nil", nil, false, false, false, []bool{false, false, false}},
		{"other error", errors.New("throttled"), false, false, false, []bool{false, false, false}},
		{"condition failed", ccf, true, true, false, []bool{false, false, false}},
		{"condition failed, wrapped", fmt.Errorf("op k: %w", ccf), true, true, false, []bool{false, false, false}},
		{"condition failed, no item", &types.ConditionalCheckFailedException{}, true, false, false, []bool{false, false, false}},
		{"tx: second item's condition", reasons("None", "ConditionalCheckFailed"), false, false, true, []bool{false, true, false}},
		{"tx: wrapped", fmt.Errorf("claim: %w", reasons("ConditionalCheckFailed", "None")), false, false, true, []bool{true, false, false}},
		{"tx: conflict", reasons("TransactionConflict", "None"), false, false, true, []bool{false, false, false}},
	}
	for _, c := range cases {
		if got := dynamoerr.CondFailed(c.err); got != c.condFailed {
			t.Errorf("%s: CondFailed = %v, want %v", c.name, got, c.condFailed)
		}
		old, failed := dynamoerr.CondFailedItem(c.err)
		if failed != c.condFailed || (old != nil) != c.hasItem {
			t.Errorf("%s: CondFailedItem = %v, %v; want item %v, %v", c.name, old, failed, c.hasItem, c.condFailed)
		}
		if got := dynamoerr.TxCanceled(c.err); got != c.txCanceled {
			t.Errorf("%s: TxCanceled = %v, want %v", c.name, got, c.txCanceled)
		}
		for i, want := range c.txCond {
			if got := dynamoerr.TxCondFailed(c.err, i); got != want {
				t.Errorf("%s: TxCondFailed(%d) = %v, want %v", c.name, i, got, want)
			}
		}
		if dynamoerr.TxCondFailed(c.err, -1) {
			t.Errorf("%s: TxCondFailed(-1) = true", c.name)
		}
	}
}

// TestDynamoDBLocal checks the predicates against the errors DynamoDB Local itself
// returns: a refused conditional put (with and without the old item) and a transaction
// cancelled by its second item's condition.
func TestDynamoDBLocal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dynamotest.Client(t)
	table := dynamotest.UniqueName("dynamoerr-")
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	key := func(k string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: k}}
	}
	put := func(k string, ret types.ReturnValuesOnConditionCheckFailure) error {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(table), Item: key(k),
			ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
			ReturnValuesOnConditionCheckFailure: ret,
		})
		return err
	}
	if err := put("a", ""); err != nil || dynamoerr.CondFailed(err) {
		t.Fatalf("first put: %v", err)
	}
	err = put("a", "")
	if old, failed := dynamoerr.CondFailedItem(err); !failed || old != nil || dynamoerr.TxCanceled(err) {
		t.Errorf("second put: CondFailedItem = %v, %v (err %v); want nil, true", old, failed, err)
	}
	err = put("a", types.ReturnValuesOnConditionCheckFailureAllOld)
	if old, failed := dynamoerr.CondFailedItem(err); !failed || old["pk"].(*types.AttributeValueMemberS).Value != "a" {
		t.Errorf("put asking for the old item: CondFailedItem = %v, %v (err %v)", old, failed, err)
	}
	_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(table), Item: key("b"), ConditionExpression: aws.String("attribute_not_exists(pk)")}},
		{Put: &types.Put{TableName: aws.String(table), Item: key("a"), ConditionExpression: aws.String("attribute_not_exists(pk)")}},
	}})
	if !dynamoerr.TxCanceled(err) || dynamoerr.TxCondFailed(err, 0) || !dynamoerr.TxCondFailed(err, 1) || dynamoerr.CondFailed(err) {
		t.Errorf("transaction: TxCanceled %v, TxCondFailed(0) %v, TxCondFailed(1) %v, CondFailed %v (err %v); want true, false, true, false",
			dynamoerr.TxCanceled(err), dynamoerr.TxCondFailed(err, 0), dynamoerr.TxCondFailed(err, 1), dynamoerr.CondFailed(err), err)
	}
}
