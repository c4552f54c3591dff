package lease_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/lease"
)

// cases: a lease's last millisecond against the time it is looked at. One table for
// both implementations of the rule.
var cases = []struct {
	name  string
	until int64 // unix ms
	now   time.Time
	live  bool
}{
	{"a second before its end", 1_000_000, time.UnixMilli(999_000), true},
	{"the millisecond before its end", 1_000_000, time.UnixMilli(999_999), true},
	{"at its last millisecond", 1_000_000, time.UnixMilli(1_000_000), true},
	{"late within its last millisecond", 1_000_000, time.UnixMilli(1_000_000).Add(999 * time.Microsecond), true},
	{"the millisecond after its end", 1_000_000, time.UnixMilli(1_000_001), false},
	{"a second after its end", 1_000_000, time.UnixMilli(1_001_000), false},
}

func TestPredicate(t *testing.T) {
	t.Parallel()
	for _, c := range cases {
		if got := lease.Live(time.UnixMilli(c.until), c.now); got != c.live {
			t.Errorf("%s: Live = %v, want %v", c.name, got, c.live)
		}
		if got := lease.LiveMs(c.until, c.now.UnixMilli()); got != c.live {
			t.Errorf("%s: LiveMs = %v, want %v", c.name, got, c.live)
		}
	}
	if lease.Live(time.Time{}, time.UnixMilli(0)) {
		t.Error("Live(zero time) = true, want false")
	}
}

// TestCondition runs the same cases as conditional writes on DynamoDB Local, as the
// stores write them: the unix-ms end in a number attribute, now as a value.
func TestCondition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dynamotest.Client(t)
	table := dynamotest.UniqueName("lease-")
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
	num := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	holds := func(key string, cond string, now int64) bool {
		t.Helper()
		_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(table),
			Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}},
			UpdateExpression:          aws.String("SET #seen = :now"),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  map[string]string{"#until": "lease_until", "#seen": "seen"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": num(now)},
		})
		if err != nil && !dynamoerr.CondFailed(err) {
			t.Fatalf("%s: %v", key, err)
		}
		return err == nil
	}
	for i, c := range cases {
		key := fmt.Sprintf("case%d", i)
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: key}, "lease_until": num(c.until),
		}})
		if err != nil {
			t.Fatal(err)
		}
		if got := holds(key, lease.LiveCond("#until", ":now"), c.now.UnixMilli()); got != c.live {
			t.Errorf("%s: LiveCond holds = %v, want %v", c.name, got, c.live)
		}
		if got := holds(key, lease.ExpiredCond("#until", ":now"), c.now.UnixMilli()); got != !c.live {
			t.Errorf("%s: ExpiredCond holds = %v, want %v", c.name, got, !c.live)
		}
	}
}
