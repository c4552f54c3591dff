package sessiondata_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/sessiondata"
	"github.com/terret/terret-ws/internal/sessionlog"
)

func lines(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// TestExport: the export is the envelopes in seq order, one line each, exactly as
// encoded for the wire ("<" and "&" unescaped), over an inclusive range, with a
// progress line every ProgressEvery events.
func TestExport(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const total = 1050
	r.seed(t, "a1", total)
	var progress bytes.Buffer
	ops := sessiondata.New(r.db, r.tables, sessiondata.Options{Progress: &progress, ProgressEvery: 1000})
	ctx := context.Background()

	cases := []struct {
		name     string
		from, to int64
		first    int64
		n        int
	}{
		{"whole log", 0, -1, 0, total},
		{"range", 10, 1009, 10, 1000},
		{"to past the tip", 1000, 99999, 1000, 50},
		{"from past the tip", 2000, -1, 0, 0},
	}
	for _, c := range cases {
		var out bytes.Buffer
		got, err := ops.Export(ctx, "a1", c.from, c.to, &out)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ls := lines(t, out.Bytes())
		if got != int64(c.n) || len(ls) != c.n {
			t.Fatalf("%s: %d events, %d lines, want %d", c.name, got, len(ls), c.n)
		}
		for i, l := range ls {
			want := fmt.Sprintf(`{"id":"%032x","session_id":"a1","seq":%d,"at":"2026-12-01T00:00:00.000000Z","type":"note","payload":{"i":%d,"text":"<event & %d>"}}`,
				c.first+int64(i)+1, c.first+int64(i), c.first+int64(i), c.first+int64(i))
			if c.first+int64(i) == 0 {
				want = fmt.Sprintf(`{"id":"%032x","session_id":"a1","seq":0,"at":"2026-12-01T00:00:00.000000Z","type":"session/created","payload":{}}`, 1)
			}
			if l != want {
				t.Fatalf("%s: line %d\n got %s\nwant %s", c.name, i, l, want)
			}
		}
	}
	if p := lines(t, progress.Bytes()); len(p) != 2 || p[0] != "exported 1000 of 1050 events (through seq 999)" || p[1] != "exported 1000 of 1000 events (through seq 1009)" {
		t.Fatalf("progress %q, want one line per 1,000 events of the two long exports", p)
	}
	if _, err := ops.Export(ctx, "nobody", 0, -1, &bytes.Buffer{}); !errors.Is(err, sessionlog.ErrNotFound) {
		t.Fatalf("export of a missing session: %v, want ErrNotFound", err)
	}
	if _, err := ops.Export(ctx, "a1", -1, -1, &bytes.Buffer{}); !errors.Is(err, sessiondata.ErrInvalid) {
		t.Fatalf("export from -1: %v, want ErrInvalid", err)
	}
}

// TestReset: a new log holding only session/created with a new epoch, the runtime
// state gone (by attribute, whatever its name), the profile, counters and tokens kept,
// and the reset marker on the token item for the deliver function.
func TestReset(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	r.seed(t, "a1", 600)
	r.seed(t, "other", 30)
	r.runtimeState(t, "a1")
	tokens := auth.New(r.db, r.tables.Connections)
	tok, err := tokens.Create(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	old, err := r.log.Epoch(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	ops := sessiondata.New(r.db, r.tables, sessiondata.Options{})
	epoch, err := ops.Reset(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if epoch == old || epoch == "" {
		t.Fatalf("epoch after reset %q, before %q: want a new one", epoch, old)
	}
	if got, _ := r.log.Epoch(ctx, "a1"); got != epoch {
		t.Fatalf("log epoch %q, reset returned %q", got, epoch)
	}
	evs, err := r.log.Read(ctx, "a1", 0, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Seq != 0 || evs[0].Type != sessionlog.TypeSessionCreated {
		t.Fatalf("log after reset: %d events, first %+v; want session/created alone", len(evs), evs[0])
	}
	if n := count(t, r.db, r.tables.Log, "session_id", "other"); n != 30 {
		t.Fatalf("another session has %d events after the reset, want 30", n)
	}
	state := getItem(t, r.db, r.tables.Agents, map[string]types.AttributeValue{"pk": s("agent#a1"), "sk": s("state")})
	want := []string{"pk", "profile", "quota_month", "quota_tokens", "sk", "usage_input_tokens", "usage_turns"}
	if got := slices.Sorted(maps.Keys(attrNames(state))); !slices.Equal(got, want) {
		t.Fatalf("state item attributes after reset %v, want %v", got, want)
	}
	if n := count(t, r.db, r.tables.Agents, "pk", "agent#a1"); n != 1 {
		t.Fatalf("agent partition holds %d items after reset, want the state item alone", n)
	}
	if it := getItem(t, r.db, r.tables.Agents, map[string]types.AttributeValue{"pk": s("quota#deferred"), "sk": s("a1")}); it != nil {
		t.Fatalf("deferred wake left: %v", it)
	}
	if _, err := tokens.Check(ctx, "a1", tok); err != nil {
		t.Fatalf("token after reset: %v", err)
	}
	ti := getItem(t, r.db, r.tables.Connections, map[string]types.AttributeValue{"pk": s(auth.Key("a1"))})
	if m, ok := ti[sessiondata.ResetAttr].(*types.AttributeValueMemberS); !ok || m.Value != epoch {
		t.Fatalf("token item reset marker %v, want %q", ti[sessiondata.ResetAttr], epoch)
	}
	// Nobody owned the agent: the marker says so, and a connection made later stays open.
	if c, ok := ti[sessiondata.ResetConnAttr].(*types.AttributeValueMemberS); !ok || c.Value != "" {
		t.Fatalf("token item reset_conn %v, want \"\" (nobody connected)", ti[sessiondata.ResetConnAttr])
	}
	// Again, with c7 owning the agent: another epoch, another marker (the deliver
	// function closes on a change), naming c7, the one connection it may close.
	if _, err := r.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &r.tables.Connections,
		Item: map[string]types.AttributeValue{"pk": s("agent#a1"), "conn": s("c7")}}); err != nil {
		t.Fatal(err)
	}
	again, err := ops.Reset(ctx, "a1")
	if err != nil || again == epoch {
		t.Fatalf("second reset: epoch %q (first %q), %v", again, epoch, err)
	}
	ti = getItem(t, r.db, r.tables.Connections, map[string]types.AttributeValue{"pk": s(auth.Key("a1"))})
	if c, ok := ti[sessiondata.ResetConnAttr].(*types.AttributeValueMemberS); !ok || c.Value != "c7" {
		t.Fatalf("token item reset_conn %v after a reset with c7 connected, want c7", ti[sessiondata.ResetConnAttr])
	}
}

// TestDelete: nothing of the agent is left but its usage and quota counters; other
// agents are untouched; a delete of a deleted agent is a no-op.
func TestDelete(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	r.seed(t, "a1", 1000)
	r.seed(t, "other", 30)
	r.runtimeState(t, "a1")
	tokens := auth.New(r.db, r.tables.Connections)
	tok, err := tokens.Create(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tokens.Used(ctx, "a1", auth.Hash(tok)); err != nil {
		t.Fatal(err)
	}
	// An ownership record whose connection the deliver function never closes (no
	// stream consumer here): the delete removes it itself after OwnerWait.
	put(t, r.db, r.tables.Connections, map[string]types.AttributeValue{"pk": s("agent#a1"), "conn": s("c1"), "next": n(12)})
	ops := sessiondata.New(r.db, r.tables, sessiondata.Options{OwnerWait: 1})
	erased, err := ops.Delete(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if erased != 1000+30+2 {
		t.Fatalf("erased %d items in batches, want 1,032 (log, inbox and fold items)", erased)
	}
	checkDeleted(t, r, "a1")
	if n := count(t, r.db, r.tables.Log, "session_id", "other"); n != 30 {
		t.Fatalf("another session has %d events after the delete, want 30", n)
	}
	if again, err := ops.Delete(ctx, "a1"); err != nil || again != 0 {
		t.Fatalf("delete again: %d erased, %v; want a no-op", again, err)
	}
	checkDeleted(t, r, "a1")
}

func checkDeleted(t *testing.T, r rig, agent string) {
	t.Helper()
	if n := count(t, r.db, r.tables.Log, "session_id", agent); n != 0 {
		t.Fatalf("%d log events left", n)
	}
	state := getItem(t, r.db, r.tables.Agents, map[string]types.AttributeValue{"pk": s("agent#" + agent), "sk": s("state")})
	want := []string{"pk", "quota_month", "quota_tokens", "sk", "usage_input_tokens", "usage_turns"}
	if got := slices.Sorted(maps.Keys(attrNames(state))); !slices.Equal(got, want) {
		t.Fatalf("state item attributes after delete %v, want %v (the counters only)", got, want)
	}
	if n := count(t, r.db, r.tables.Agents, "pk", "agent#"+agent); n != 1 {
		t.Fatalf("agent partition holds %d items, want the counters' state item alone", n)
	}
	for _, pk := range []string{auth.Key(agent), "tokuse#" + agent, "agent#" + agent} {
		if it := getItem(t, r.db, r.tables.Connections, map[string]types.AttributeValue{"pk": s(pk)}); it != nil {
			t.Fatalf("%s left: %v", pk, it)
		}
	}
	if it := getItem(t, r.db, r.tables.Agents, map[string]types.AttributeValue{"pk": s("quota#deferred"), "sk": s(agent)}); it != nil {
		t.Fatalf("deferred wake left: %v", it)
	}
}

var errInterrupted = errors.New("interrupted")

// TestDeleteInterruptedResumes: a delete stopped part-way (here after 20 batches)
// leaves a shorter log that still starts at seq 0; running it again finishes.
func TestDeleteInterruptedResumes(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	r.seed(t, "a1", 1000)
	r.runtimeState(t, "a1")
	stop := sessiondata.New(r.db, r.tables, sessiondata.Options{OwnerWait: 1, AfterBatch: func(erased int) error {
		if erased >= 500 {
			return errInterrupted
		}
		return nil
	}})
	if _, err := stop.Delete(ctx, "a1"); !errors.Is(err, errInterrupted) {
		t.Fatalf("interrupted delete: %v", err)
	}
	if n := count(t, r.db, r.tables.Log, "session_id", "a1"); n != 500 {
		t.Fatalf("%d events left after the interrupted delete, want 500", n)
	}
	if evs, err := r.log.Read(ctx, "a1", 0, 1); err != nil || len(evs) != 1 || evs[0].Seq != 0 {
		t.Fatalf("interrupted delete: log head %v, %v; want seq 0 still there (newest go first)", evs, err)
	}
	if _, err := sessiondata.New(r.db, r.tables, sessiondata.Options{OwnerWait: 1}).Delete(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	checkDeleted(t, r, "a1")
}

// throttled passes every request to DynamoDB Local but sends only the first half of
// each batch write, answering the rest as unprocessed, as a throttled table does.
type throttled struct {
	*dynamodb.Client
	calls, partial atomic.Int64
}

func (c *throttled) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	c.calls.Add(1)
	send := map[string][]types.WriteRequest{}
	left := map[string][]types.WriteRequest{}
	for table, reqs := range in.RequestItems {
		h := (len(reqs) + 1) / 2
		send[table] = reqs[:h]
		if len(reqs[h:]) > 0 {
			left[table] = reqs[h:]
			c.partial.Add(1)
		}
	}
	out, err := c.Client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: send}, opts...)
	if err != nil {
		return nil, err
	}
	for table, reqs := range out.UnprocessedItems {
		left[table] = append(left[table], reqs...)
	}
	out.UnprocessedItems = left
	return out, nil
}

// TestDeleteRetriesUnprocessed: items a batch write leaves unprocessed are sent again
// until none is left; nothing is skipped.
func TestDeleteRetriesUnprocessed(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	r.seed(t, "a1", 200)
	api := &throttled{Client: r.db}
	if _, err := sessiondata.New(api, r.tables, sessiondata.Options{OwnerWait: 1}).Delete(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, r.db, r.tables.Log, "session_id", "a1"); n != 0 {
		t.Fatalf("%d events left", n)
	}
	if api.partial.Load() == 0 || api.calls.Load() <= 12 {
		t.Fatalf("%d batch calls, %d partial: the retries were not exercised", api.calls.Load(), api.partial.Load())
	}
}

// TestExportRetention: an export starts where the retained log does, as a subscribe's
// replay does, and leaves out events expired but not yet deleted. DynamoDB Local does
// not expire items, so the test does what TTL does: of the expired seqs 1–8 it deletes
// 1–4 and leaves 5–8 present; seq 9 expires tomorrow; seq 15, expired and present,
// stands for an event whose TTL passed during the export.
func TestExportRetention(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	r.seed(t, "a1", 20)
	past, future := time.Now().Add(-time.Hour).Unix(), time.Now().Add(24*time.Hour).Unix()
	for _, seq := range []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 15} {
		at := past
		if seq == 9 {
			at = future
		}
		if err := r.log.Expire(ctx, "a1", seq, at); err != nil {
			t.Fatal(err)
		}
	}
	for seq := 1; seq <= 4; seq++ {
		if _, err := r.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &r.tables.Log,
			Key: map[string]types.AttributeValue{"session_id": s("a1"), "seq": n(seq)}}); err != nil {
			t.Fatal(err)
		}
	}
	ops := sessiondata.New(r.db, r.tables, sessiondata.Options{})
	for _, c := range []struct {
		from, to int64
		want     []int64
	}{
		{0, -1, []int64{9, 10, 11, 12, 13, 14, 16, 17, 18, 19}},
		{6, 10, []int64{9, 10}},
		{14, 16, []int64{14, 16}},
	} {
		var out bytes.Buffer
		got, err := ops.Export(ctx, "a1", c.from, c.to, &out)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, l := range lines(t, out.Bytes()) {
			var ev struct{ Seq int64 }
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, ev.Seq)
		}
		if got != int64(len(c.want)) || !slices.Equal(seqs, c.want) {
			t.Errorf("export %d…%d: %d events, seqs %v; want %v", c.from, c.to, got, seqs, c.want)
		}
	}
}
