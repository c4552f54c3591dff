package dynamotest

import (
	"context"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// ReadUnits meters the read units of the reads (GetItem, Query) sent by the clients it
// is installed in, as DynamoDB reports them (it asks for ReturnConsumedCapacity TOTAL),
// per table. Tests of how much an operation reads use it.
type ReadUnits struct {
	mu    sync.Mutex
	units map[string]float64
}

// Client returns a DynamoDB Local client whose reads r meters.
func (r *ReadUnits) Client(t testing.TB) *dynamodb.Client {
	t.Helper()
	return metered(t, r.middleware)
}

func (r *ReadUnits) middleware(st *middleware.Stack) error {
	return st.Initialize.Add(middleware.InitializeMiddlewareFunc("MeterReadUnits",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			switch p := in.Parameters.(type) {
			case *dynamodb.GetItemInput:
				cp := *p
				cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
				in.Parameters = &cp
			case *dynamodb.QueryInput:
				cp := *p
				cp.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
				in.Parameters = &cp
			default:
				return next.HandleInitialize(ctx, in)
			}
			out, md, err := next.HandleInitialize(ctx, in)
			var c *types.ConsumedCapacity
			switch o := out.Result.(type) {
			case *dynamodb.GetItemOutput:
				c = o.ConsumedCapacity
			case *dynamodb.QueryOutput:
				c = o.ConsumedCapacity
			}
			if err == nil && c != nil {
				r.mu.Lock()
				if r.units == nil {
					r.units = map[string]float64{}
				}
				r.units[aws.ToString(c.TableName)] += aws.ToFloat64(c.CapacityUnits)
				r.mu.Unlock()
			}
			return out, md, err
		}), middleware.After)
}

// Units returns the read units metered so far on table ("" : all tables).
func (r *ReadUnits) Units(table string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sum float64
	for t, u := range r.units {
		if table == "" || t == table {
			sum += u
		}
	}
	return sum
}

// Reset sets the meter back to zero.
func (r *ReadUnits) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.units = nil
}
