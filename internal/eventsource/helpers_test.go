package eventsource_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/eventsource"
)

// waitTimeout bounds every wait in these tests.
const waitTimeout = 10 * time.Second

const region = "us-east-1"

// table is a fresh DynamoDB Local table with a NEW_AND_OLD_IMAGES stream.
type table struct {
	db        *dynamodb.Client
	name      string
	streamARN string
}

func newTable(t *testing.T) *table {
	t.Helper()
	db := dynamotest.Client(t)
	name := dynamotest.UniqueName("eventsource-")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	out, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
		StreamSpecification:  &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	})
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return &table{db: db, name: name, streamARN: aws.ToString(out.TableDescription.LatestStreamArn)}
}

// put writes an item with key pk and the extra attributes.
func (tb *table) put(t *testing.T, pk string, attrs map[string]types.AttributeValue) {
	t.Helper()
	item := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}
	for k, v := range attrs {
		item[k] = v
	}
	if _, err := tb.db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(tb.name), Item: item}); err != nil {
		t.Fatalf("put %s: %v", pk, err)
	}
}

func (tb *table) putN(t *testing.T, n int) []string {
	t.Helper()
	pks := make([]string, n)
	for i := range n {
		pks[i] = fmt.Sprintf("item-%03d", i)
		tb.put(t, pks[i], nil)
	}
	return pks
}

// start runs one mapping on the table with fast test timings; it is closed at test end.
func (tb *table) start(t *testing.T, m eventsource.Mapping, opts eventsource.Options) *eventsource.Poller {
	t.Helper()
	m.TableName = tb.name
	if m.Function == "" {
		m.Function = "consumer"
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 10 * time.Millisecond
	}
	if opts.RetryBackoff == 0 {
		opts.RetryBackoff = 5 * time.Millisecond
	}
	if opts.DescribeInterval == 0 {
		opts.DescribeInterval = 200 * time.Millisecond
	}
	opts.Logger = slog.New(slog.NewJSONHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	// Start's ctx bounds the poller's life, not just the start-up calls.
	p, err := eventsource.Start(context.Background(), tb.db, dynamotest.StreamsClient(t), region, []eventsource.Mapping{m}, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// delivered is one record as a handler saw it.
type delivered struct {
	seq, pk, eventName string
}

// collector is a stream consumer that records every invocation; respond (optional)
// decides the answer to invocation number n (0-based).
type collector struct {
	mu         sync.Mutex
	deliveries [][]delivered
	raw        []events.DynamoDBEvent
	notify     chan struct{}
	respond    func(n int, batch []delivered) (events.DynamoDBEventResponse, error)
}

func newCollector(respond func(int, []delivered) (events.DynamoDBEventResponse, error)) *collector {
	return &collector{notify: make(chan struct{}, 1), respond: respond}
}

func (c *collector) handler() lambda.Handler {
	return lambda.NewHandler(func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		batch := make([]delivered, len(ev.Records))
		for i, r := range ev.Records {
			batch[i] = delivered{seq: r.Change.SequenceNumber, pk: r.Change.Keys["pk"].String(), eventName: r.EventName}
		}
		c.mu.Lock()
		n := len(c.deliveries)
		c.deliveries = append(c.deliveries, batch)
		c.raw = append(c.raw, ev)
		c.mu.Unlock()
		defer func() {
			select {
			case c.notify <- struct{}{}:
			default:
			}
		}()
		if c.respond != nil {
			return c.respond(n, batch)
		}
		return events.DynamoDBEventResponse{}, nil
	})
}

func (c *collector) snapshot() [][]delivered {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]delivered(nil), c.deliveries...)
}

// waitUntil waits until cond holds for the deliveries so far and returns them.
func (c *collector) waitUntil(t *testing.T, what string, cond func([][]delivered) bool) [][]delivered {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		if ds := c.snapshot(); cond(ds) {
			return ds
		}
		select {
		case <-c.notify:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s; deliveries: %v", what, c.snapshot())
		}
	}
}

// seen reports whether every pk was delivered at least once.
func seen(pks ...string) func([][]delivered) bool {
	return func(ds [][]delivered) bool {
		got := map[string]bool{}
		for _, b := range ds {
			for _, d := range b {
				got[d.pk] = true
			}
		}
		for _, pk := range pks {
			if !got[pk] {
				return false
			}
		}
		return true
	}
}

// seqLess orders DynamoDB Streams sequence numbers (decimal strings of any length).
func seqLess(a, b string) bool {
	x, okx := new(big.Int).SetString(a, 10)
	y, oky := new(big.Int).SetString(b, 10)
	if !okx || !oky {
		return a < b
	}
	return x.Cmp(y) < 0
}

func pksOf(b []delivered) []string {
	out := make([]string, len(b))
	for i, d := range b {
		out[i] = d.pk
	}
	return out
}

func countPKs(ds [][]delivered) map[string]int {
	n := map[string]int{}
	for _, b := range ds {
		for _, d := range b {
			n[d.pk]++
		}
	}
	return n
}
