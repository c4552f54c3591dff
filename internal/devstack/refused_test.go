package devstack_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	hangbound "github.com/terret/terret-ws/internal/hang"
)

// TestRefusedConnectionWritesItsDeparture: a connection with a wrong token, or none,
// costs one write, its departure record at $disconnect. The connect handler records
// nothing of it (a frame it sends before the drop finds no record and is refused as
// unauthorized all the same); $disconnect, finding no record, writes "gone#<id>", which
// stops a deliver invocation still posting the unauthorized frame to a client that has
// left. The connections table's stream, which holds every write, shows exactly one
// insert of a departure record per refused connection, and no change to a connection
// or ownership item.
func TestRefusedConnectionWritesItsDeparture(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	e.token(t, "a1")
	refused := []string{"", "tt_wrong"}
	for _, tok := range refused {
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
	// writes reads the stream from its start: every write to the table, as
	// "EVENT pk", the token item's excepted.
	writes := func() ([]string, error) {
		sd, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: desc.Table.LatestStreamArn})
		if err != nil {
			return nil, err
		}
		var keys []string
		for _, sh := range sd.StreamDescription.Shards {
			it, err := streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
				StreamArn: desc.Table.LatestStreamArn, ShardId: sh.ShardId, ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon,
			})
			if err != nil {
				return nil, err
			}
			for iter := it.ShardIterator; iter != nil; {
				out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
				if err != nil {
					return nil, err
				}
				for _, r := range out.Records {
					if pk, ok := r.Dynamodb.Keys["pk"].(*streamtypes.AttributeValueMemberS); ok && !strings.HasPrefix(pk.Value, "tokens#") {
						keys = append(keys, string(r.EventName)+" "+pk.Value)
					}
				}
				if len(out.Records) == 0 {
					break // an open shard's iterator never ends; nothing more was written
				}
				iter = out.NextShardIterator
			}
		}
		return keys, nil
	}
	// $disconnect runs after the close the client saw: wait for its writes.
	var keys []string
	hangbound.UntilNil(t, "a departure record for each refused connection", func() error {
		var err error
		if keys, err = writes(); err != nil {
			return err
		}
		if len(keys) < len(refused) {
			return fmt.Errorf("writes so far %v", keys)
		}
		return nil
	})
	seen := map[string]bool{}
	for _, k := range keys {
		if !strings.HasPrefix(k, "INSERT gone#") || seen[k] {
			t.Errorf("refused connections wrote %s; want one insert of a departure record per connection and nothing else (all: %v)", k, keys)
		}
		seen[k] = true
	}
	if len(keys) != len(refused) {
		t.Errorf("%d writes %v; want %d departure records", len(keys), keys, len(refused))
	}
}
