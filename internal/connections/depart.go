package connections

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DepartTTL is how long a departure record ("gone#<connection_id>", Depart) is kept. It
// must outlive every deliver invocation that may still post a first frame to the
// connection: an asynchronous invocation starts at most 300 s after it was asked for
// (the DeliverFunction's MaximumEventAgeInSeconds in template.yaml) and posts for at
// most the hello grace (30 s) after that. DynamoDB deletes an expired item within a
// few days, never before its expiry; a reader does not look at the expiry, since a
// connection id is never reused.
const DepartTTL = 10 * time.Minute

// Depart records that connID, a socket with no conn# record (one refused at connect),
// has left: $disconnect writes it, since only $disconnect learns that the client is
// gone. A deliver invocation still retrying the socket's first frame on Gone reads it
// (Departed) and stops, where without it it would retry until the hello grace ran
// out — a GoneException does not tell a connection that has left from one whose
// $connect has not completed yet. Cost: 1 write unit (an item of under 1 KB).
func (st *Store) Depart(ctx context.Context, connID string) error {
	_, err := st.api.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(st.table),
		Item: map[string]types.AttributeValue{
			attrPK:        s(departPrefix + connID),
			attrExpiresAt: n(st.now().Add(DepartTTL).Unix()),
		},
	})
	if err != nil {
		return fmt.Errorf("connections: record departure of %s: %w", connID, err)
	}
	return nil
}

// Departed reports whether connID's departure was recorded (Depart), read strongly
// consistent. Cost: 1 read unit.
func (st *Store) Departed(ctx context.Context, connID string) (bool, error) {
	out, err := st.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.table), Key: map[string]types.AttributeValue{attrPK: s(departPrefix + connID)},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return false, fmt.Errorf("connections: get departure of %s: %w", connID, err)
	}
	return out.Item != nil, nil
}
