// Package timer fires approval requests' expiries (agent.Timer) where no scheduling
// service exists: in `terret dev`. Each armed moment is a durable record in the agents
// table, and an in-process timer; when it fires, the runner function is invoked with
// {"agent_id", "expire"} and the record is deleted. Start arms again every record left
// by an earlier process (a restart of terret dev, a crash), so an expiry still comes;
// one whose moment passed meanwhile fires at once. Nothing polls.
package timer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/invoke"
)

// DB is the part of DynamoDB the records need.
type DB interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// Invoker starts the runner function (the Lambda Invoke API, served locally by terret dev).
type Invoker interface {
	Invoke(ctx context.Context, in *invoke.Input) (*invoke.Output, error)
}

// recordsKey is the partition of the timer records in the agents table; sk is
// "<agent_id>#<call_id>".
const recordsKey = "timer#approval"

// retryAfter is how long a fire whose invoke failed waits before it tries again.
const retryAfter = time.Second

// Local is the local agent.Timer. Its zero value is not usable: see New.
type Local struct {
	db       DB
	table    string
	invoker  Invoker
	function string
	logger   *slog.Logger
	now      func() time.Time

	mu      sync.Mutex
	pending map[string]*time.Timer
	stopped bool
	wg      sync.WaitGroup
}

// New returns a Local timer keeping its records in the agents table and invoking
// function through invoker. now nil: time.Now.
func New(db DB, agentsTable string, invoker Invoker, function string, logger *slog.Logger, now func() time.Time) *Local {
	if now == nil {
		now = time.Now
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Local{db: db, table: agentsTable, invoker: invoker, function: function, logger: logger, now: now, pending: map[string]*time.Timer{}}
}

// Arm records the moment and arms it (agent.Timer). Cost: 1 write unit.
func (l *Local) Arm(ctx context.Context, agentID, callID string, at time.Time) error {
	_, err := l.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(l.table),
		Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: recordsKey}, "sk": &types.AttributeValueMemberS{Value: agentID + "#" + callID},
			"agent_id": &types.AttributeValueMemberS{Value: agentID}, "call_id": &types.AttributeValueMemberS{Value: callID},
			"at": &types.AttributeValueMemberN{Value: strconv.FormatInt(at.UnixMilli(), 10)},
		},
	})
	if err != nil {
		return fmt.Errorf("timer: record %s of %s: %w", callID, agentID, err)
	}
	l.schedule(agentID, callID, at, at)
	return nil
}

// Start arms every record an earlier process left. Cost: one Query of the records.
func (l *Local) Start(ctx context.Context) error {
	var start map[string]types.AttributeValue
	for {
		out, err := l.db.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(l.table),
			KeyConditionExpression:    aws.String("pk = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: recordsKey}},
			ConsistentRead:            aws.Bool(true),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return fmt.Errorf("timer: read records: %w", err)
		}
		for _, it := range out.Items {
			agentID, callID, ms := str(it["agent_id"]), str(it["call_id"]), str(it["at"])
			at, err := strconv.ParseInt(ms, 10, 64)
			if agentID == "" || callID == "" || err != nil {
				continue
			}
			l.schedule(agentID, callID, time.UnixMilli(at), time.UnixMilli(at))
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		start = out.LastEvaluatedKey
	}
}

func str(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	}
	return ""
}

// Stop disarms every in-process timer (the records stay, for the next Start) and
// waits for fires under way.
func (l *Local) Stop() {
	l.mu.Lock()
	l.stopped = true
	for k, t := range l.pending {
		t.Stop()
		delete(l.pending, k)
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// schedule fires the record of agentID and callID, armed for at, at when.
func (l *Local) schedule(agentID, callID string, at, when time.Time) {
	key := agentID + "#" + callID
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	if t, ok := l.pending[key]; ok {
		t.Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(max(when.Sub(l.now()), 0), func() {
		l.mu.Lock()
		if l.stopped || l.pending[key] != t {
			l.mu.Unlock()
			return
		}
		delete(l.pending, key)
		l.wg.Add(1)
		l.mu.Unlock()
		defer l.wg.Done()
		l.fire(agentID, callID, at)
	})
	l.pending[key] = t
}

// fire invokes the runner for the expiry and deletes the record (conditional on its
// moment: one armed again meanwhile stays); a failed invoke is tried again.
func (l *Local) fire(agentID, callID string, at time.Time) {
	ctx := context.Background()
	payload, _ := json.Marshal(map[string]string{"agent_id": agentID, "expire": callID})
	_, err := l.invoker.Invoke(ctx, &invoke.Input{FunctionName: l.function, InvocationType: invoke.Event, Payload: payload})
	if err != nil {
		l.logger.Warn("approval expiry: invoke runner, trying again", "agent_id", agentID, "call_id", callID, "error", err.Error())
		l.mu.Lock()
		stopped := l.stopped
		l.mu.Unlock()
		if !stopped {
			l.schedule(agentID, callID, at, l.now().Add(retryAfter))
		}
		return
	}
	_, err = l.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(l.table),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: recordsKey}, "sk": &types.AttributeValueMemberS{Value: agentID + "#" + callID},
		},
		ConditionExpression:       aws.String("#at = :at"),
		ExpressionAttributeNames:  map[string]string{"#at": "at"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":at": &types.AttributeValueMemberN{Value: strconv.FormatInt(at.UnixMilli(), 10)}},
	})
	var cf *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &cf) {
		l.logger.Warn("approval expiry: delete record", "agent_id", agentID, "call_id", callID, "error", err.Error())
	}
}
