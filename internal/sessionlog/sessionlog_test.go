package sessionlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/sessionlog"
)

func newLog(t *testing.T) (*sessionlog.Log, string) {
	t.Helper()
	names := dynamotest.CreateTables(t)
	return sessionlog.New(dynamotest.Client(t), names["LogTable"]), names["LogTable"]
}

func mustCreate(t *testing.T, l *sessionlog.Log, session string) {
	t.Helper()
	if _, err := l.Create(context.Background(), session); err != nil {
		t.Fatalf("create %s: %v", session, err)
	}
}

// readAll reads the whole session and checks seq runs 0..n-1 with no gap or duplicate.
func readAll(t *testing.T, l *sessionlog.Log, session string) []sessionlog.Event {
	t.Helper()
	evs, err := l.Read(context.Background(), session, 0, 1<<30)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i) {
			t.Fatalf("event %d has seq %d: gap or duplicate", i, ev.Seq)
		}
	}
	return evs
}

func TestCreateExactlyOnceUnderRace(t *testing.T) {
	t.Parallel()
	_, table := newLog(t)
	client := dynamotest.Client(t)
	session := dynamotest.UniqueName("s")
	const racers = 10
	var created sync.WaitGroup
	results := make(chan bool, racers)
	for range racers {
		created.Add(1)
		go func() {
			defer created.Done()
			l := sessionlog.New(client, table) // separate instances: separate caches
			ok, err := l.Create(context.Background(), session)
			if err != nil {
				t.Errorf("create: %v", err)
			}
			results <- ok
		}()
	}
	created.Wait()
	close(results)
	n := 0
	for ok := range results {
		if ok {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d creators reported created, want exactly 1", n)
	}
	evs := readAll(t, sessionlog.New(client, table), session)
	if len(evs) != 1 || evs[0].Type != sessionlog.TypeSessionCreated {
		t.Fatalf("log = %+v, want one session/created", evs)
	}
}

func TestAppendRequiresSession(t *testing.T) {
	t.Parallel()
	l, _ := newLog(t)
	_, err := l.Append(context.Background(), "nope", "user/message", map[string]string{"text": "x"})
	if !errors.Is(err, sessionlog.ErrNotFound) {
		t.Fatalf("append to missing session: err = %v, want ErrNotFound", err)
	}
	if _, err := l.Tip(context.Background(), "nope"); !errors.Is(err, sessionlog.ErrNotFound) {
		t.Fatalf("tip of missing session: err = %v, want ErrNotFound", err)
	}
}

func TestEnvelope(t *testing.T) {
	t.Parallel()
	l, _ := newLog(t)
	ctx := context.Background()
	mustCreate(t, l, "s1")
	ev, err := l.Append(ctx, "s1", "assistant/chunk", json.RawMessage(`{ "text" : "22C" }`))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Seq != 1 {
		t.Fatalf("seq = %d, want 1", ev.Seq)
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^\{"id":"[0-9a-f]{32}","session_id":"s1","seq":1,"at":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z","type":"assistant/chunk","payload":\{"text":"22C"\}\}$`)
	if !re.Match(b) {
		t.Fatalf("envelope %s does not match the spec's shape", b)
	}
	at, err := time.Parse(time.RFC3339Nano, ev.At)
	if err != nil || time.Since(at) > time.Minute || time.Since(at) < -time.Minute {
		t.Fatalf("at %q is not the current UTC time (%v)", ev.At, err)
	}
	// What is read back is byte for byte what was appended.
	got := readAll(t, l, "s1")
	b2, _ := json.Marshal(got[1])
	if string(b2) != string(b) {
		t.Fatalf("read back %s, appended %s", b2, b)
	}
	created, _ := json.Marshal(got[0])
	if !strings.Contains(string(created), `"seq":0,`) || !strings.Contains(string(created), `"payload":{}`) {
		t.Fatalf("session/created envelope %s", created)
	}
}

func TestPayloadValidation(t *testing.T) {
	t.Parallel()
	l, _ := newLog(t)
	mustCreate(t, l, "s")
	for _, p := range []any{json.RawMessage(`[1]`), json.RawMessage(`"x"`), json.RawMessage(`{`), 42, []string{"a"}} {
		if _, err := l.Append(context.Background(), "s", "x/y", p); !errors.Is(err, sessionlog.ErrInvalid) {
			t.Errorf("payload %v: err = %v, want ErrInvalid", p, err)
		}
	}
	if _, err := l.Append(context.Background(), "s", "", nil); !errors.Is(err, sessionlog.ErrInvalid) {
		t.Errorf("empty type: err = %v, want ErrInvalid", err)
	}
	if _, err := l.AppendAt(context.Background(), "s", 0, "x/y", nil); !errors.Is(err, sessionlog.ErrInvalid) {
		t.Errorf("AppendAt 0: err = %v, want ErrInvalid", err)
	}
	if tip, _ := l.Tip(context.Background(), "s"); tip != 0 {
		t.Fatalf("rejected appends changed the log: tip %d", tip)
	}
}

func TestSizeBound(t *testing.T) {
	t.Parallel()
	l, _ := newLog(t)
	ctx := context.Background()
	mustCreate(t, l, "s")
	probe, err := l.Append(ctx, "s", "tool/result", map[string]string{"result": ""})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(probe)
	overhead := len(b) - len(`""`) + len(`""`) // envelope size with an empty string
	fill := sessionlog.MaxEnvelopeBytes - overhead
	// Seq grows from 1 to 2 digits? No: seq 2 and 3 keep the envelope the same size.
	ok, err := l.Append(ctx, "s", "tool/result", map[string]string{"result": strings.Repeat("a", fill)})
	if err != nil {
		t.Fatalf("envelope of exactly %d bytes refused: %v", sessionlog.MaxEnvelopeBytes, err)
	}
	if b, _ := json.Marshal(ok); len(b) != sessionlog.MaxEnvelopeBytes {
		t.Fatalf("test arithmetic: envelope is %d bytes", len(b))
	}
	_, err = l.Append(ctx, "s", "tool/result", map[string]string{"result": strings.Repeat("a", fill+1)})
	if !errors.Is(err, sessionlog.ErrTooLarge) {
		t.Fatalf("envelope over the bound: err = %v, want ErrTooLarge", err)
	}
	if tip, _ := l.Tip(ctx, "s"); tip != 2 {
		t.Fatalf("tip = %d after a refused append, want 2", tip)
	}
}

func TestReadPagesAndRanges(t *testing.T) {
	t.Parallel()
	_, table := newLog(t)
	queries := &queryMeter{API: dynamotest.Client(t)}
	l := sessionlog.New(queries, table)
	ctx := context.Background()
	mustCreate(t, l, "s")
	// 100 events of ~12 KB: more than one 1 MB DynamoDB query page. Written as the
	// items Append writes, 25 to a BatchWriteItem: appending is what the writer tests
	// cover, and DynamoDB Local's cost is per item, so few large ones make it quick.
	const n = 100
	seed(t, table, "s", n, strings.Repeat("x", 12000))
	if evs := readAll(t, l, "s"); len(evs) != n+1 {
		t.Fatalf("read %d events, want %d", len(evs), n+1)
	}
	if got := queries.n.Load(); got < 2 {
		t.Fatalf("reading 1.2 MB took %d queries, want at least 2 (more than one page)", got)
	}
	tests := []struct {
		from      int64
		limit     int
		wantFirst int64
		wantLen   int
	}{
		{0, 10, 0, 10},
		{30, 1200, 30, 71},
		{1, 99, 1, 99},
		{100, 5, 100, 1},
		{101, 5, 0, 0},
		{3, 0, 0, 0},
	}
	for _, tc := range tests {
		evs, err := l.Read(ctx, "s", tc.from, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != tc.wantLen {
			t.Errorf("Read(from %d, limit %d) = %d events, want %d", tc.from, tc.limit, len(evs), tc.wantLen)
			continue
		}
		for i, ev := range evs {
			if ev.Seq != tc.wantFirst+int64(i) {
				t.Errorf("Read(from %d): event %d has seq %d", tc.from, i, ev.Seq)
				break
			}
		}
	}
	if tip, err := l.Tip(ctx, "s"); err != nil || tip != n {
		t.Fatalf("tip = %d, %v; want %d", tip, err, n)
	}
}

// queryMeter counts the queries sent through the real client.
type queryMeter struct {
	sessionlog.API
	n atomic.Int64
}

func (m *queryMeter) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	m.n.Add(1)
	return m.API.Query(ctx, in, opts...)
}

// seed writes events 1..n of session, each with payload {"text": text}, straight into
// table, 25 to a BatchWriteItem.
func seed(t *testing.T, table, session string, n int, text string) {
	t.Helper()
	ctx := context.Background()
	db := dynamotest.Client(t)
	payload, _ := json.Marshal(map[string]string{"text": text})
	for start := 1; start <= n; start += 25 {
		var reqs []types.WriteRequest
		for seq := start; seq < start+25 && seq <= n; seq++ {
			ev := sessionlog.Event{ID: fmt.Sprintf("%032x", seq), SessionID: session, Seq: int64(seq),
				At: time.Now().UTC().Format(sessionlog.TimeFormat), Type: "assistant/chunk", Payload: payload}
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: ev.Item()}})
		}
		in := &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}}
		for {
			out, err := db.BatchWriteItem(ctx, in)
			if err != nil {
				t.Fatalf("seed %s: %v", session, err)
			}
			if len(out.UnprocessedItems) == 0 {
				break
			}
			in.RequestItems = out.UnprocessedItems
		}
	}
}

func TestAppendAtConflict(t *testing.T) {
	t.Parallel()
	l, _ := newLog(t)
	ctx := context.Background()
	mustCreate(t, l, "s")
	if _, err := l.AppendAt(ctx, "s", 1, "a/b", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendAt(ctx, "s", 1, "a/b", nil); !errors.Is(err, sessionlog.ErrConflict) {
		t.Fatalf("second AppendAt(1): err = %v, want ErrConflict", err)
	}
	ev, err := l.Append(ctx, "s", "a/b", nil)
	if err != nil || ev.Seq != 2 {
		t.Fatalf("append after AppendAt = seq %d, %v; want 2", ev.Seq, err)
	}
}

// Every successful append through a Notifying log is handed to its listener once, in
// order, with the appender's context (delivery's fast path reads the invocation there);
// a failed one is not.
func TestNotifyOnAppend(t *testing.T) {
	t.Parallel()
	l, _ := newLog(t)
	type invocationKey struct{}
	ctx := context.WithValue(context.Background(), invocationKey{}, "appender's")
	mustCreate(t, l, "s")
	var got []int64
	n := sessionlog.Notify(l, func(nctx context.Context, ev sessionlog.Event) {
		got = append(got, ev.Seq)
		if v := nctx.Value(invocationKey{}); v != "appender's" {
			t.Errorf("seq %d notified with context value %v, want the appender's", ev.Seq, v)
		}
	})
	if _, err := n.Append(ctx, "s", "a/b", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n.AppendAt(ctx, "s", 2, "a/b", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n.AppendAt(ctx, "s", 2, "a/b", nil); !errors.Is(err, sessionlog.ErrConflict) {
		t.Fatalf("AppendAt(2) again: err = %v, want ErrConflict", err)
	}
	ev, err := n.AppendStamped(ctx, "s", "a/b", nil, "0000000000001-0000000002")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := l.Read(ctx, "s", ev.Seq, 1)
	if err != nil || len(evs) != 1 || evs[0].Stamp != ev.Stamp {
		t.Fatalf("read back %+v (%v), want the stamp %q", evs, err, ev.Stamp)
	}
	if b, _ := json.Marshal(evs[0]); strings.Contains(string(b), "stamp") || strings.Contains(string(b), ev.Stamp) {
		t.Errorf("envelope %s carries the stamp, want it kept off the wire", b)
	}
	if want := []int64{1, 2, 3}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("notified seqs %v, want %v", got, want)
	}
}

// TestStartedOverLogAppendsAtItsTip: a Log that appended to a session remembers its
// tip; once the log is erased and created again (a session reset, elsewhere), a read
// that reaches the new log's end lowers it, so the next append is seq 1 — not a seq
// past a gap.
func TestStartedOverLogAppendsAtItsTip(t *testing.T) {
	t.Parallel()
	l, table := newLog(t)
	ctx := context.Background()
	session := dynamotest.UniqueName("s")
	mustCreate(t, l, session)
	for range 5 {
		if _, err := l.Append(ctx, session, "note", nil); err != nil {
			t.Fatal(err)
		}
	}
	db := dynamotest.Client(t)
	for seq := range 6 {
		if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: map[string]types.AttributeValue{
			"session_id": &types.AttributeValueMemberS{Value: session}, "seq": &types.AttributeValueMemberN{Value: fmt.Sprint(seq)},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if created, err := sessionlog.New(db, table).Create(ctx, session); err != nil || !created {
		t.Fatalf("create again: %v, %v", created, err)
	}
	if evs, err := l.Read(ctx, session, 0, 100); err != nil || len(evs) != 1 {
		t.Fatalf("read of the new log: %d events, %v", len(evs), err)
	}
	ev, err := l.Append(ctx, session, "note", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Seq != 1 {
		t.Fatalf("append after the log started over went to seq %d, want 1", ev.Seq)
	}
	readAll(t, l, session)
}
