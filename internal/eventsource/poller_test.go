package eventsource_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/eventsource"
	"github.com/terret/terret-ws/internal/hang"
)

func TestDeliversEveryRecordInStreamOrder(t *testing.T) {
	tb := newTable(t)
	var pks []string
	for i := range 30 {
		pks = append(pks, fmt.Sprintf("item-%03d", i))
		tb.put(t, pks[i], nil)
	}
	c := newCollector(nil)
	tb.start(t, eventsource.Mapping{Handler: c.handler(), BatchSize: 7}, eventsource.Options{})
	for i := 30; i < 50; i++ { // written while the poller runs
		pks = append(pks, fmt.Sprintf("item-%03d", i))
		tb.put(t, pks[i], nil)
	}
	ds := c.waitUntil(t, "all 50 records", seen(pks...))

	var order []string
	last := ""
	for _, b := range ds {
		if len(b) > 7 {
			t.Errorf("batch of %d records, BatchSize is 7", len(b))
		}
		for _, d := range b {
			if last != "" && !seqLess(last, d.seq) {
				t.Errorf("sequence number %s delivered after %s", d.seq, last)
			}
			last = d.seq
			order = append(order, d.pk)
		}
	}
	if !slices.Equal(order, pks) {
		t.Fatalf("delivery order %v, want the write order %v", order, pks)
	}
}

func TestRecordShape(t *testing.T) {
	tb := newTable(t)
	var raw atomic.Value // first event payload, as JSON
	var lcOK atomic.Bool
	var mu sync.Mutex
	var recs []events.DynamoDBEventRecord
	h := lambda.NewHandler(func(ctx context.Context, ev json.RawMessage) error {
		lc, ok := lambdacontext.FromContext(ctx)
		_, hasDeadline := ctx.Deadline()
		if ok && hasDeadline && len(lc.AwsRequestID) == 36 && lc.InvokedFunctionArn == "arn:aws:lambda:us-east-1:000000000000:function:shape" {
			lcOK.Store(true)
		}
		raw.CompareAndSwap(nil, string(ev))
		var de events.DynamoDBEvent
		if err := json.Unmarshal(ev, &de); err != nil {
			return err
		}
		mu.Lock()
		recs = append(recs, de.Records...)
		mu.Unlock()
		return nil
	})
	all := map[string]types.AttributeValue{
		"s":    &types.AttributeValueMemberS{Value: "text"},
		"n":    &types.AttributeValueMemberN{Value: "42.5"},
		"b":    &types.AttributeValueMemberB{Value: []byte{0, 1, 2, 255}},
		"ss":   &types.AttributeValueMemberSS{Value: []string{"a", "b"}},
		"ns":   &types.AttributeValueMemberNS{Value: []string{"1", "2"}},
		"bs":   &types.AttributeValueMemberBS{Value: [][]byte{{1}, {2, 3}}},
		"m":    &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"inner": &types.AttributeValueMemberS{Value: "x"}}},
		"l":    &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberN{Value: "1"}, &types.AttributeValueMemberBOOL{Value: true}}},
		"null": &types.AttributeValueMemberNULL{Value: true},
		"bool": &types.AttributeValueMemberBOOL{Value: false},
	}
	before := time.Now().Add(-time.Minute)
	tb.put(t, "k1", all)
	tb.put(t, "k1", map[string]types.AttributeValue{"s": &types.AttributeValueMemberS{Value: "changed"}})
	if _, err := tb.db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(tb.name), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k1"}}}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	tb.start(t, eventsource.Mapping{Function: "shape", Handler: h}, eventsource.Options{})

	hang.Until(t, "three records", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(recs) >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	ins, mod, rem := recs[0], recs[1], recs[2]
	for i, r := range recs {
		if r.EventSource != "aws:dynamodb" || r.EventVersion != "1.1" || r.AWSRegion != region || r.EventSourceArn != tb.streamARN || r.EventID == "" {
			t.Errorf("record %d envelope %+v", i, r)
		}
		c := r.Change
		if c.StreamViewType != "NEW_AND_OLD_IMAGES" || c.SequenceNumber == "" || c.SizeBytes <= 0 || c.Keys["pk"].String() != "k1" {
			t.Errorf("record %d change %+v", i, c)
		}
		if c.ApproximateCreationDateTime.Before(before) || c.ApproximateCreationDateTime.After(time.Now().Add(time.Minute)) {
			t.Errorf("record %d ApproximateCreationDateTime %v", i, c.ApproximateCreationDateTime)
		}
	}
	if got := []string{ins.EventName, mod.EventName, rem.EventName}; !slices.Equal(got, []string{"INSERT", "MODIFY", "REMOVE"}) {
		t.Fatalf("event names %v", got)
	}
	img := ins.Change.NewImage
	checks := []struct {
		attr string
		ok   bool
	}{
		{"s", img["s"].String() == "text"},
		{"n", img["n"].Number() == "42.5"},
		{"b", string(img["b"].Binary()) == "\x00\x01\x02\xff"},
		{"ss", slices.Equal(sorted(img["ss"].StringSet()), []string{"a", "b"})},
		{"ns", slices.Equal(sorted(img["ns"].NumberSet()), []string{"1", "2"})},
		{"bs", len(img["bs"].BinarySet()) == 2},
		{"m", img["m"].Map()["inner"].String() == "x"},
		{"l", len(img["l"].List()) == 2 && img["l"].List()[0].Number() == "1" && img["l"].List()[1].Boolean()},
		{"null", img["null"].IsNull()},
		{"bool", img["bool"].DataType() == events.DataTypeBoolean && !img["bool"].Boolean()},
	}
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("NewImage attribute %q did not round-trip: %s", ck.attr, mustJSON(img[ck.attr]))
		}
	}
	if ins.Change.OldImage != nil || mod.Change.OldImage["s"].String() != "text" || mod.Change.NewImage["s"].String() != "changed" || rem.Change.NewImage != nil || rem.Change.OldImage["s"].String() != "changed" {
		t.Errorf("images: insert old=%v, modify old=%v new=%v, remove new=%v old=%v", ins.Change.OldImage != nil, mustJSON(mod.Change.OldImage["s"]), mustJSON(mod.Change.NewImage["s"]), rem.Change.NewImage != nil, mustJSON(rem.Change.OldImage["s"]))
	}
	r, _ := raw.Load().(string)
	for _, want := range []string{`"eventSourceARN":`, `"B":"AAEC/w=="`, `"NULL":true`, `"ApproximateCreationDateTime":`} {
		if !strings.Contains(strings.ReplaceAll(r, " ", ""), want) {
			t.Errorf("event JSON lacks %s: %s", want, r)
		}
	}
	if !lcOK.Load() {
		t.Error("handler context lacked a LambdaContext with request id, function ARN and deadline")
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestFailedBatchIsRedelivered(t *testing.T) {
	fail := func(ids ...string) events.DynamoDBEventResponse {
		var r events.DynamoDBEventResponse
		for _, id := range ids {
			r.BatchItemFailures = append(r.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: id})
		}
		return r
	}
	seqOf := func(b []delivered, pk string) string {
		for _, d := range b {
			if d.pk == pk {
				return d.seq
			}
		}
		return "not-in-batch"
	}
	tests := []struct {
		name string
		// respond answers the first invocations; later ones succeed.
		respond    func(n int, b []delivered) (events.DynamoDBEventResponse, error)
		deliveries int      // deliveries of the 10 records before the sentinel
		redelivery []string // pks of the second delivery
	}{
		{
			name: "item failures redeliver from the lowest failed record",
			respond: func(n int, b []delivered) (events.DynamoDBEventResponse, error) {
				if n == 0 {
					return fail(seqOf(b, "item-007"), seqOf(b, "item-005")), nil
				}
				return fail(), nil
			},
			deliveries: 2,
			redelivery: []string{"item-005", "item-006", "item-007", "item-008", "item-009"},
		},
		{
			name: "an unknown itemIdentifier fails the whole batch",
			respond: func(n int, b []delivered) (events.DynamoDBEventResponse, error) {
				if n == 0 {
					return fail("12345"), nil
				}
				return fail(), nil
			},
			deliveries: 2,
			redelivery: tenItems(),
		},
		{
			name: "an empty itemIdentifier fails the whole batch",
			respond: func(n int, b []delivered) (events.DynamoDBEventResponse, error) {
				if n == 0 {
					return fail(""), nil
				}
				return fail(), nil
			},
			deliveries: 2,
			redelivery: tenItems(),
		},
		{
			name: "a handler error retries the whole batch",
			respond: func(n int, b []delivered) (events.DynamoDBEventResponse, error) {
				if n < 2 {
					return fail(), errors.New("transient")
				}
				return fail(), nil
			},
			deliveries: 3,
			redelivery: tenItems(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := newTable(t)
			tb.putN(t, 10)
			c := newCollector(func(n int, b []delivered) (events.DynamoDBEventResponse, error) {
				if slices.Contains(pksOf(b), "sentinel") {
					return events.DynamoDBEventResponse{}, nil
				}
				return tt.respond(n, b)
			})
			tb.start(t, eventsource.Mapping{Handler: c.handler(), BatchSize: 10}, eventsource.Options{})
			c.waitUntil(t, "the redeliveries", func(ds [][]delivered) bool { return len(ds) >= tt.deliveries })
			// The sentinel comes after every record in the shard: once it is delivered,
			// any further redelivery of the ten would already have happened.
			tb.put(t, "sentinel", nil)
			ds := c.waitUntil(t, "the sentinel", seen("sentinel"))

			if got := pksOf(ds[0]); !slices.Equal(got, tenItems()) {
				t.Fatalf("first delivery %v, want the 10 items", got)
			}
			if got := pksOf(ds[1]); !slices.Equal(got, tt.redelivery) {
				t.Fatalf("second delivery %v, want %v", got, tt.redelivery)
			}
			for i := 2; i < tt.deliveries; i++ {
				if got := pksOf(ds[i]); !slices.Equal(got, tt.redelivery) {
					t.Fatalf("delivery %d: %v, want %v", i, got, tt.redelivery)
				}
			}
			if got := pksOf(ds[tt.deliveries]); !slices.Equal(got, []string{"sentinel"}) {
				t.Fatalf("delivery after the retries %v, want only the sentinel", got)
			}
			if len(ds) != tt.deliveries+1 {
				t.Fatalf("%d deliveries, want %d", len(ds), tt.deliveries+1)
			}
		})
	}
}

func tenItems() []string {
	out := make([]string, 10)
	for i := range out {
		out[i] = fmt.Sprintf("item-%03d", i)
	}
	return out
}

func TestDiscardAfterMaxRetries(t *testing.T) {
	tests := []struct {
		name          string
		bisect        bool
		wantDiscarded []string
		wantProcessed []string
	}{
		{"without bisection the whole batch is discarded", false,
			[]string{"item-000", "item-001", "item-002", "item-003", "item-004"}, nil},
		{"bisection isolates the poison record", true,
			[]string{"item-002"}, []string{"item-000", "item-001", "item-003", "item-004"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := newTable(t)
			tb.putN(t, 5)
			var mu sync.Mutex
			var discarded []eventsource.Discarded
			var processed []string
			c := newCollector(func(n int, b []delivered) (events.DynamoDBEventResponse, error) {
				if slices.Contains(pksOf(b), "item-002") {
					return events.DynamoDBEventResponse{}, errors.New("poison")
				}
				mu.Lock()
				processed = append(processed, pksOf(b)...)
				mu.Unlock()
				return events.DynamoDBEventResponse{}, nil
			})
			tb.start(t, eventsource.Mapping{Handler: c.handler(), BatchSize: 5, MaxRetries: 1, BisectOnError: tt.bisect}, eventsource.Options{
				OnDiscard: func(d eventsource.Discarded) {
					mu.Lock()
					discarded = append(discarded, d)
					mu.Unlock()
				},
			})
			tb.put(t, "sentinel", nil)
			c.waitUntil(t, "the sentinel", seen("sentinel"))

			mu.Lock()
			defer mu.Unlock()
			if len(discarded) != 1 {
				t.Fatalf("%d discarded batches, want 1", len(discarded))
			}
			d := discarded[0]
			var got []string
			for _, r := range d.Records {
				got = append(got, r.Change.Keys["pk"].String())
			}
			if !slices.Equal(got, tt.wantDiscarded) || d.Attempts != 2 || d.Err == nil || d.TableName != tb.name {
				t.Fatalf("discarded %v after %d attempts (%v), want %v after 2", got, d.Attempts, d.Err, tt.wantDiscarded)
			}
			if want := append(slices.Clone(tt.wantProcessed), "sentinel"); !slices.Equal(processed, want) {
				t.Fatalf("processed %v, want %v", processed, want)
			}
		})
	}
}

func TestFaultsHappen(t *testing.T) {
	const items, batch = 40, 10
	isReordered := func(b []delivered) bool {
		for i := 1; i < len(b); i++ {
			if seqLess(b[i].seq, b[i-1].seq) {
				return true
			}
		}
		return false
	}
	tests := []struct {
		name     string
		faults   eventsource.Faults
		observed func(ds [][]delivered) bool
	}{
		{"redeliver", eventsource.Faults{Seed: 7, Redeliver: 0.5}, func(ds [][]delivered) bool {
			for _, n := range countPKs(ds) {
				if n > 1 {
					return true
				}
			}
			return false
		}},
		{"split", eventsource.Faults{Seed: 7, Split: 0.5}, func(ds [][]delivered) bool {
			// Every record is in the stream before Start, so unsplit batches are full.
			for _, b := range ds {
				if len(b) < batch && !slices.Contains(pksOf(b), fmt.Sprintf("item-%03d", items-1)) {
					return true
				}
			}
			return false
		}},
		{"reorder", eventsource.Faults{Seed: 7, Reorder: 0.5}, func(ds [][]delivered) bool {
			return slices.ContainsFunc(ds, isReordered)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := newTable(t)
			pks := tb.putN(t, items)
			c := newCollector(nil)
			tb.start(t, eventsource.Mapping{Handler: c.handler(), BatchSize: batch}, eventsource.Options{Faults: tt.faults})
			ds := c.waitUntil(t, "every record", seen(pks...))
			if !tt.observed(ds) {
				t.Fatalf("fault %s never observed in %d deliveries: %v", tt.name, len(ds), ds)
			}
			if tt.name != "reorder" && slices.ContainsFunc(ds, isReordered) {
				t.Fatalf("records reordered without the Reorder fault: %v", ds)
			}
		})
	}
}

func TestFiltersSelectRecords(t *testing.T) {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	tests := []struct {
		name     string
		patterns []string
		write    func(t *testing.T, tb *table)
		sentinel string // matches the filters; written last
		want     []string
	}{
		{
			name:     "eventName",
			patterns: []string{`{"eventName":["INSERT"]}`},
			write: func(t *testing.T, tb *table) {
				tb.put(t, "a", nil)
				tb.put(t, "a", map[string]types.AttributeValue{"v": s("2")}) // MODIFY
				tb.put(t, "b", nil)
				if _, err := tb.db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(tb.name), Key: map[string]types.AttributeValue{"pk": s("b")}}); err != nil {
					t.Fatal(err)
				}
			},
			sentinel: "z",
			want:     []string{"INSERT a", "INSERT b", "INSERT z"},
		},
		{
			name:     "key prefix",
			patterns: []string{`{"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"tokens#"}]}}}}`},
			write: func(t *testing.T, tb *table) {
				for _, pk := range []string{"tokens#1", "sessions#1", "tokens#2", "token#3"} {
					tb.put(t, pk, nil)
				}
			},
			sentinel: "tokens#zz",
			want:     []string{"INSERT tokens#1", "INSERT tokens#2", "INSERT tokens#zz"},
		},
		{
			name: "filters are ORed; leaves of one filter are ANDed",
			patterns: []string{
				`{"eventName":["INSERT"],"dynamodb":{"NewImage":{"type":{"S":["x"]}}}}`,
				`{"eventName":["REMOVE"]}`,
			},
			write: func(t *testing.T, tb *table) {
				tb.put(t, "a", map[string]types.AttributeValue{"type": s("x")})
				tb.put(t, "b", map[string]types.AttributeValue{"type": s("y")})
				tb.put(t, "a", map[string]types.AttributeValue{"type": s("x"), "v": s("2")}) // MODIFY of type x
				if _, err := tb.db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(tb.name), Key: map[string]types.AttributeValue{"pk": s("b")}}); err != nil {
					t.Fatal(err)
				}
			},
			sentinel: "z",
			want:     []string{"INSERT a", "REMOVE b", "INSERT z"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var filters []eventsource.Filter
			for _, p := range tt.patterns {
				f, err := eventsource.ParseFilter(p)
				if err != nil {
					t.Fatalf("ParseFilter(%s): %v", p, err)
				}
				filters = append(filters, f)
			}
			tb := newTable(t)
			tt.write(t, tb)
			c := newCollector(nil)
			tb.start(t, eventsource.Mapping{Handler: c.handler(), Filters: filters, BatchSize: 2}, eventsource.Options{})
			tb.put(t, tt.sentinel, map[string]types.AttributeValue{"type": s("x")})
			ds := c.waitUntil(t, "the sentinel", seen(tt.sentinel))
			var got []string
			for _, b := range ds {
				for _, d := range b {
					got = append(got, d.eventName+" "+d.pk)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("delivered %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLatestSkipsEarlierRecords(t *testing.T) {
	tb := newTable(t)
	tb.put(t, "before", nil)
	c := newCollector(nil)
	tb.start(t, eventsource.Mapping{Handler: c.handler(), StartingPosition: eventsource.Latest}, eventsource.Options{})
	tb.put(t, "after", nil)
	ds := c.waitUntil(t, "the record written after Start", seen("after"))
	if n := countPKs(ds)["before"]; n != 0 {
		t.Fatalf("LATEST delivered a record written before Start (%d times)", n)
	}
}

// TestCloseStopsPolling: Close returns once every poller goroutine has ended, so from
// then on the poller makes no stream call and delivers nothing — checked on the calls
// themselves (a counting client), not by waiting for a poll that should not come.
func TestCloseStopsPolling(t *testing.T) {
	tb := newTable(t)
	c := newCollector(nil)
	streams := &countingStreams{StreamsAPI: dynamotest.StreamsClient(t)}
	opts := eventsource.Options{PollInterval: 10 * time.Millisecond, RetryBackoff: 5 * time.Millisecond, DescribeInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))}
	p, err := eventsource.Start(context.Background(), tb.db, streams, region, []eventsource.Mapping{{Function: "consumer", TableName: tb.name, Handler: c.handler()}}, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	tb.put(t, "first", nil)
	c.waitUntil(t, "the first record", seen("first"))
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v", d)
	}
	atClose := streams.calls.Load()
	tb.put(t, "second", nil)
	if n := len(c.snapshot()); n != 1 {
		t.Fatalf("%d deliveries, want only the one before Close", n)
	}
	if n := streams.calls.Load() - atClose; n != 0 {
		t.Fatalf("%d stream calls after Close returned, want 0", n)
	}
}

// countingStreams counts the stream calls a poller makes.
type countingStreams struct {
	eventsource.StreamsAPI
	calls atomic.Int64
}

func (s *countingStreams) DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	s.calls.Add(1)
	return s.StreamsAPI.DescribeStream(ctx, in, optFns...)
}

func (s *countingStreams) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	s.calls.Add(1)
	return s.StreamsAPI.GetShardIterator(ctx, in, optFns...)
}

func (s *countingStreams) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	s.calls.Add(1)
	return s.StreamsAPI.GetRecords(ctx, in, optFns...)
}

func TestStartErrors(t *testing.T) {
	noStream := dynamotest.UniqueName("nostream-")
	db := dynamotest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(noStream),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}); err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(noStream)})
	})
	h := newCollector(nil).handler()

	tests := []struct {
		name    string
		mapping eventsource.Mapping
		wantIs  error
	}{
		{"table without a stream", eventsource.Mapping{Handler: h, TableName: noStream}, eventsource.ErrNoStream},
		{"missing handler", eventsource.Mapping{TableName: noStream}, eventsource.ErrInvalidMapping},
		{"bad starting position", eventsource.Mapping{Handler: h, TableName: noStream, StartingPosition: "AT_TIMESTAMP"}, eventsource.ErrInvalidMapping},
		{"missing table", eventsource.Mapping{Handler: h, TableName: dynamotest.UniqueName("missing-")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := eventsource.Start(ctx, db, dynamotest.StreamsClient(t), region, []eventsource.Mapping{tt.mapping}, eventsource.Options{})
			if err == nil {
				p.Close()
				t.Fatal("Start succeeded")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Fatalf("error %v, want %v", err, tt.wantIs)
			}
		})
	}
}
