package dynamotest

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/terret/terret-ws/internal/connections"
)

// SlotReads counts, on the wire, the replay-slot keys ("slot#<i>") of every
// BatchGetItem sent by the clients it meters: the tests of connections.Slots and of
// delivery's slot waits use it to show that a poll reads one group only.
type SlotReads struct {
	mu     sync.Mutex
	calls  int // BatchGetItem calls with slot keys
	most   int // most slot keys in one call
	spread int // calls whose keys span more than one slot group
}

// Meter returns cfg with the counting middleware added to its API options.
func (r *SlotReads) Meter(cfg aws.Config) aws.Config {
	cfg.APIOptions = append(append([]func(*middleware.Stack) error(nil), cfg.APIOptions...), r.middleware)
	return cfg
}

// Client returns a DynamoDB Local client whose requests r counts.
func (r *SlotReads) Client(t testing.TB) *dynamodb.Client {
	t.Helper()
	return metered(t, r.middleware)
}

func (r *SlotReads) middleware(st *middleware.Stack) error {
	return st.Initialize.Add(middleware.InitializeMiddlewareFunc("CountSlotReads",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if req, ok := in.Parameters.(*dynamodb.BatchGetItemInput); ok {
				r.count(req)
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.After)
}

func (r *SlotReads) count(req *dynamodb.BatchGetItemInput) {
	groups := map[int]bool{}
	keys := 0
	for _, ka := range req.RequestItems {
		for _, k := range ka.Keys {
			pk, ok := k["pk"].(*types.AttributeValueMemberS)
			if !ok || !strings.HasPrefix(pk.Value, "slot#") {
				continue
			}
			i, _ := strconv.Atoi(strings.TrimPrefix(pk.Value, "slot#"))
			groups[i/connections.SlotGroupSize] = true
			keys++
		}
	}
	if keys == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	r.most = max(r.most, keys)
	if len(groups) > 1 {
		r.spread++
	}
}

// Stats returns the BatchGetItem calls with slot keys, the most slot keys in one call,
// and how many calls spanned more than one slot group.
func (r *SlotReads) Stats() (calls, most, spread int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, r.most, r.spread
}
