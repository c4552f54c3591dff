package dynamotest

import (
	"context"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/terret/terret-ws/internal/dynamoerr"
)

// WriteUnits meters the write units of the single-item writes (PutItem, UpdateItem,
// DeleteItem) sent by the clients it is installed in, the way cmd/bench prices them:
// the capacity DynamoDB reports (it asks for ReturnConsumedCapacity TOTAL), and 1 write
// unit for a write refused by its condition, which DynamoDB bills but reports with an
// error instead of a capacity. Tests of how many writes an operation costs use it.
type WriteUnits struct {
	mu     sync.Mutex
	units  float64
	failed int // writes refused by their condition
}

// Client returns a DynamoDB Local client whose writes w meters.
func (w *WriteUnits) Client(t testing.TB) *dynamodb.Client {
	t.Helper()
	return metered(t, w.middleware)
}

// metered returns a DynamoDB Local client with mw added to its middleware stack: the
// one way the meters of this package attach to a client.
func metered(t testing.TB, mw func(*middleware.Stack) error) *dynamodb.Client {
	t.Helper()
	return dynamodb.New(Client(t).Options(), func(o *dynamodb.Options) {
		o.APIOptions = append(append([]func(*middleware.Stack) error(nil), o.APIOptions...), mw)
	})
}

func (w *WriteUnits) middleware(st *middleware.Stack) error {
	return st.Initialize.Add(middleware.InitializeMiddlewareFunc("MeterWriteUnits",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			switch p := in.Parameters.(type) {
			case *dynamodb.PutItemInput:
				cp := *p
				cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
				in.Parameters = &cp
			case *dynamodb.UpdateItemInput:
				cp := *p
				cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
				in.Parameters = &cp
			case *dynamodb.DeleteItemInput:
				cp := *p
				cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
				in.Parameters = &cp
			default:
				return next.HandleInitialize(ctx, in)
			}
			out, md, err := next.HandleInitialize(ctx, in)
			w.record(out.Result, err)
			return out, md, err
		}), middleware.After)
}

func (w *WriteUnits) record(result any, err error) {
	var c *types.ConsumedCapacity
	switch r := result.(type) {
	case *dynamodb.PutItemOutput:
		c = r.ConsumedCapacity
	case *dynamodb.UpdateItemOutput:
		c = r.ConsumedCapacity
	case *dynamodb.DeleteItemOutput:
		c = r.ConsumedCapacity
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case dynamoerr.CondFailed(err):
		w.units++
		w.failed++
	case err == nil && c != nil:
		w.units += aws.ToFloat64(c.CapacityUnits)
	}
}

// Units returns the write units metered so far and how many of the writes were refused
// by their condition.
func (w *WriteUnits) Units() (units float64, failed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.units, w.failed
}
