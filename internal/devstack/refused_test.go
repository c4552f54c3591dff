package devstack_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
)

// TestRefusedConnectionWritesNothing: a connection with a wrong token costs no write.
// The connect handler records nothing of it (a frame it sends before the drop finds no
// record and is refused as unauthorized all the same), so $disconnect deletes nothing
// either. The connections table's stream, which holds every write, shows no change to a
// connection or ownership item.
func TestRefusedConnectionWritesNothing(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	e.token(t, "a1")
	for _, tok := range []string{"", "tt_wrong"} {
		c := e.dial(t, "a1", tok)
		c.expectError("unauthorized")
		c.expectClosed()
	}
	ctx := context.Background()
	db := dynamolocal.Client(e.stack.DynamoDBEndpoint)
	desc, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(e.stack.Tables["ConnectionsTable"])})
	if err != nil {
		t.Fatal(err)
	}
	streams := dynamolocal.StreamsClient(e.stack.DynamoDBEndpoint)
	sd, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: desc.Table.LatestStreamArn})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, sh := range sd.StreamDescription.Shards {
		it, err := streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
			StreamArn: desc.Table.LatestStreamArn, ShardId: sh.ShardId, ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon,
		})
		if err != nil {
			t.Fatal(err)
		}
		for iter := it.ShardIterator; iter != nil; {
			out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range out.Records {
				if pk, ok := r.Dynamodb.Keys["pk"].(*streamtypes.AttributeValueMemberS); ok {
					keys = append(keys, string(r.EventName)+" "+pk.Value)
				}
			}
			if len(out.Records) == 0 {
				break // an open shard's iterator never ends; nothing more was written
			}
			iter = out.NextShardIterator
		}
	}
	for _, k := range keys {
		if !strings.Contains(k, " tokens#") {
			t.Errorf("refused connections wrote %s; want no write but the token item's creation (all: %v)", k, keys)
		}
	}
}
