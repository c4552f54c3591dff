package sessiondata

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// batchSize is DynamoDB's bound on the requests of one BatchWriteItem.
const batchSize = 25

// maxUnprocessedRounds bounds the retries of one batch's unprocessed items.
const maxUnprocessedRounds = 12

// eraser deletes keys of one table in batches of 25, at most Options.Rate items a
// second, retrying unprocessed items with jittered exponential backoff (what DynamoDB
// asks of a BatchWriteItem caller:
// https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchWriteItem.html).
type eraser struct {
	st     *Store
	erased int
	start  time.Time
}

func (st *Store) newEraser() *eraser { return &eraser{st: st, start: st.now()} }

// erase deletes keys from table. Cost: 1 write unit per item of 1 KB or less (a
// delete is billed by the size of the item it removes).
func (e *eraser) erase(ctx context.Context, table string, keys []map[string]types.AttributeValue) error {
	for len(keys) > 0 {
		n := min(batchSize, len(keys))
		reqs := make([]types.WriteRequest, 0, n)
		for _, k := range keys[:n] {
			reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: k}})
		}
		keys = keys[n:]
		if err := e.pace(ctx, n); err != nil {
			return err
		}
		if err := e.batch(ctx, table, reqs); err != nil {
			return err
		}
		e.erased += n
		if e.st.o.AfterBatch != nil {
			if err := e.st.o.AfterBatch(e.erased); err != nil {
				return err
			}
		}
	}
	return nil
}

// pace holds the next n deletes back until they keep the erase at Options.Rate items
// a second since it started.
func (e *eraser) pace(ctx context.Context, n int) error {
	return sleep(ctx, e.wait(n))
}

// wait is how long the next n deletes must wait: none while the erase is behind its
// rate, else until (erased+n)/Rate seconds after it started.
func (e *eraser) wait(n int) time.Duration {
	due := e.start.Add(time.Duration(float64(e.erased+n) / float64(e.st.o.Rate) * float64(time.Second)))
	return max(0, due.Sub(e.st.now()))
}

func (e *eraser) batch(ctx context.Context, table string, reqs []types.WriteRequest) error {
	pending := map[string][]types.WriteRequest{table: reqs}
	for round := 0; ; round++ {
		out, err := e.st.api.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
		if err != nil {
			return fmt.Errorf("sessiondata: delete from %s: %w", table, err)
		}
		if len(out.UnprocessedItems[table]) == 0 {
			return nil
		}
		if round == maxUnprocessedRounds {
			return fmt.Errorf("%w: %d from %s", ErrUnprocessed, len(out.UnprocessedItems[table]), table)
		}
		pending = out.UnprocessedItems
		ceiling := min(50*time.Millisecond<<round, 5*time.Second)
		if err := sleep(ctx, ceiling/2+rand.N(ceiling/2+1)); err != nil {
			return err
		}
	}
}

// eraseLog deletes every event of agentID's log, newest first, a page of keys at a
// time (bounded memory at any length); it reads again until none is left, so events
// appended meanwhile go too. seq 0 goes last, so a connect that finds the log during
// the erase finds session/created. Cost: per page of up to 1,000 events one strongly
// consistent Query (1 read unit per 4 KB) and 1 write unit per event.
func (st *Store) eraseLog(ctx context.Context, e *eraser, agentID string) error {
	for {
		out, err := st.api.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(st.t.Log),
			KeyConditionExpression:    aws.String("session_id = :s"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: agentID}},
			ProjectionExpression:      aws.String("session_id, seq"),
			ScanIndexForward:          aws.Bool(false),
			ConsistentRead:            aws.Bool(true),
			Limit:                     aws.Int32(1000),
		})
		if err != nil {
			return fmt.Errorf("sessiondata: list log of %s: %w", agentID, err)
		}
		if len(out.Items) == 0 {
			return nil
		}
		if err := e.erase(ctx, st.t.Log, out.Items); err != nil {
			return err
		}
		st.progress("erased %d items of %s", e.erased, agentID)
	}
}
