package sessionlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
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
	l, _ := newLog(t)
	ctx := context.Background()
	mustCreate(t, l, "s")
	// 400 events of ~3 KB: more than one 1 MB DynamoDB query page.
	pad := strings.Repeat("x", 3000)
	const n = 400
	for range n {
		if _, err := l.Append(ctx, "s", "assistant/chunk", map[string]string{"text": pad}); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	if evs := readAll(t, l, "s"); len(evs) != n+1 {
		t.Fatalf("read %d events, want %d", len(evs), n+1)
	}
	tests := []struct {
		from      int64
		limit     int
		wantFirst int64
		wantLen   int
	}{
		{0, 10, 0, 10},
		{100, 1200, 100, 301},
		{1, 399, 1, 399},
		{400, 5, 400, 1},
		{401, 5, 0, 0},
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

type mark struct {
	Writer string `json:"writer"`
	N      int    `json:"n"`
}

// checkWriters asserts that the log holds every writer's every event exactly once.
func checkWriters(t *testing.T, evs []sessionlog.Event, writers map[string]int) {
	t.Helper()
	seen := map[mark]int{}
	for _, ev := range evs[1:] {
		var m mark
		if err := json.Unmarshal(ev.Payload, &m); err != nil {
			t.Fatalf("seq %d payload %s: %v", ev.Seq, ev.Payload, err)
		}
		seen[m]++
	}
	total := 0
	for w, n := range writers {
		for i := range n {
			if c := seen[mark{w, i}]; c != 1 {
				t.Errorf("writer %s event %d present %d times", w, i, c)
			}
		}
		total += n
	}
	if len(evs)-1 != total {
		t.Errorf("log holds %d appended events, writers appended %d", len(evs)-1, total)
	}
}

func appendMarks(ctx context.Context, l *sessionlog.Log, session, writer string, n int) error {
	for i := range n {
		if _, err := l.Append(ctx, session, "test/mark", mark{writer, i}); err != nil {
			return fmt.Errorf("writer %s event %d: %w", writer, i, err)
		}
	}
	return nil
}

// TestConcurrentWritersGapless: goroutine writers, each with its own Log (its own tip
// cache, as separate Lambda instances have), append to one session at once. The
// acceptance-sized run (8 writers, 1,000 events, OS processes too) is
// TestMultiProcessWritersGapless.
func TestConcurrentWritersGapless(t *testing.T) {
	t.Parallel()
	_, table := newLog(t)
	client := dynamotest.Client(t)
	session := dynamotest.UniqueName("s")
	mustCreate(t, sessionlog.New(client, table), session)
	const writers, each = 8, 40
	var wg sync.WaitGroup
	want := map[string]int{}
	for w := range writers {
		name := fmt.Sprintf("g%d", w)
		want[name] = each
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := appendMarks(context.Background(), sessionlog.New(client, table), session, name, each); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	checkWriters(t, readAll(t, sessionlog.New(client, table), session), want)
}

// TestMultiProcessWritersGapless: 8 writers — 3 OS processes and 5 goroutines — append
// 1,000 events to one session at once.
func TestMultiProcessWritersGapless(t *testing.T) {
	t.Parallel()
	_, table := newLog(t)
	client := dynamotest.Client(t)
	session := dynamotest.UniqueName("s")
	mustCreate(t, sessionlog.New(client, table), session)
	const procs, goroutines, each = 3, 5, 125
	want := map[string]int{}
	var wg sync.WaitGroup
	for p := range procs {
		name := fmt.Sprintf("p%d", p)
		want[name] = each
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAppendProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			"SESSIONLOG_HELPER=1",
			dynamotest.EnvEndpoint+"="+dynamotest.Endpoint(t),
			"SESSIONLOG_TABLE="+table, "SESSIONLOG_SESSION="+session,
			"SESSIONLOG_WRITER="+name, "SESSIONLOG_N="+strconv.Itoa(each))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("writer process %s: %v\n%s", name, err, out)
			}
		}()
	}
	for g := range goroutines {
		name := fmt.Sprintf("g%d", g)
		want[name] = each
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := appendMarks(context.Background(), sessionlog.New(client, table), session, name, each); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	checkWriters(t, readAll(t, sessionlog.New(client, table), session), want)
}

// TestHelperAppendProcess is the body of a writer process of the multi-process test.
func TestHelperAppendProcess(t *testing.T) {
	if os.Getenv("SESSIONLOG_HELPER") != "1" {
		t.Skip("helper process for TestMultiProcessWritersGapless")
	}
	n, _ := strconv.Atoi(os.Getenv("SESSIONLOG_N"))
	l := sessionlog.New(dynamotest.Client(t), os.Getenv("SESSIONLOG_TABLE"))
	if err := appendMarks(context.Background(), l, os.Getenv("SESSIONLOG_SESSION"), os.Getenv("SESSIONLOG_WRITER"), n); err != nil {
		t.Fatal(err)
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
	l, table := newLog(t)
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
	sessionKey := map[string]types.AttributeValue{
		"session_id": &types.AttributeValueMemberS{Value: "s"}, "seq": &types.AttributeValueMemberN{Value: "0"},
	}
	check := func(cond string) types.TransactWriteItem {
		return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: aws.String(table), Key: sessionKey, ConditionExpression: aws.String(cond)}}
	}
	if _, err := n.AppendWith(ctx, "s", "a/b", nil, check("attribute_exists(seq)")); err != nil {
		t.Fatal(err)
	}
	if _, err := n.AppendWith(ctx, "s", "a/b", nil, check("attribute_not_exists(seq)")); !errors.Is(err, sessionlog.ErrRefused) {
		t.Fatalf("AppendWith with a failing companion: err = %v, want ErrRefused", err)
	}
	if want := []int64{1, 2, 3}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("notified seqs %v, want %v", got, want)
	}
}
