package devstack_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/sessiondata"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// sessionOps is the operator's view of the stack's tables (terret session).
func (e env) sessionOps() *sessiondata.Store {
	return sessiondata.New(dynamolocal.Client(e.stack.DynamoDBEndpoint), sessiondata.Tables{
		Log: e.stack.Tables["LogTable"], Connections: e.stack.Tables["ConnectionsTable"], Agents: e.stack.Tables["AgentsTable"],
	}, sessiondata.Options{})
}

// epochOf reads hello's epoch (the frame struct predates it).
func epochOf(t *testing.T, hello frame) string {
	t.Helper()
	var h struct {
		Epoch string `json:"epoch"`
	}
	if err := json.Unmarshal(hello.raw, &h); err != nil || h.Epoch == "" {
		t.Fatalf("hello %s has no epoch (%v)", hello, err)
	}
	return h.Epoch
}

// TestSessionExportEqualsReplay: on a 20,000-event log (2,000 with -short), `terret
// session export` prints exactly the frames a subscriber from seq 0 receives, byte for
// byte, in seq order.
func TestSessionExportEqualsReplay(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{ReplayLimit: 30000})
	// 20,000 events under make soak; make test replays 1,000 (EXPORT_EVENTS overrides).
	n := soakRounds(t, "EXPORT_EVENTS", 1000, 20000)
	tok := e.token(t, "a1")
	seedParallel(t, e, "a1", n-1) // seq 0 and n-1 more
	c := e.dial(t, "a1", tok)
	if h := c.hello("a1"); h.Last != int64(n)-1 {
		t.Fatalf("hello last_seq %d, want %d", h.Last, n-1)
	}
	c.send(`{"type":"subscribe","from_seq":0}`)
	replay := c.events(0, int64(n)-1)
	var out bytes.Buffer
	got, err := e.sessionOps().Export(context.Background(), "a1", 0, -1, &out)
	if err != nil || got != int64(n) {
		t.Fatalf("export: %d events, %v", got, err)
	}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	i := 0
	for ; sc.Scan(); i++ {
		if i >= len(replay) || !bytes.Equal(sc.Bytes(), replay[i].raw) {
			t.Fatalf("export line %d\n  %s\nreplay frame\n  %s", i, sc.Bytes(), replay[i].raw)
		}
	}
	if i != n {
		t.Fatalf("export has %d lines, replay %d frames", i, n)
	}
}

// seedParallel writes session/created and events 1..n of session with BatchWriteItem,
// four batches of 25 at a time: a long log in a fraction of the sequential seed's time.
func seedParallel(t *testing.T, e env, session string, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.log.Create(ctx, session); err != nil {
		t.Fatal(err)
	}
	db := dynamolocal.Client(e.stack.DynamoDBEndpoint)
	table := e.stack.Tables["LogTable"]
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	var failed atomic.Value
	for start := 1; start <= n; start += 25 {
		var reqs []types.WriteRequest
		for seq := start; seq < start+25 && seq <= n; seq++ {
			ev := sessionlog.Event{ID: fmt.Sprintf("%032x", seq), SessionID: session, Seq: int64(seq), At: "2026-12-01T00:00:00.000000Z",
				Type: "test/event", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d,"s":"<&>"}`, seq))}
			reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: ev.Item()}})
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			pending := map[string][]types.WriteRequest{table: reqs}
			for len(pending) > 0 {
				out, err := db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
				if err != nil {
					failed.Store(err)
					return
				}
				pending = out.UnprocessedItems
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("seed: %v", err)
	}
}

// longTurn starts a turn that sits in a sleep tool for minutes and waits until its
// tool/call is logged: the runner holds its lease, in the middle of a turn.
func longTurn(t *testing.T, c *client) {
	t.Helper()
	c.send(map[string]any{"type": "inject", "wake": true,
		"text": `{"script":[{"call":[{"tool":"sleep","args":{"ms":300000}}]},{"say":"done"}]}`})
	for {
		f := c.must(hang())
		if f.Type == "tool/call" {
			return
		}
		if f.Type == "error" || f.Type == "turn/end" {
			t.Fatalf("turn did not reach its tool: %s", f)
		}
	}
}

// closingError reads frames until an error frame, which must have code: the frame
// that closes c once the stream record of the token item has reached the deliver
// function (a stream poll and an invocation: on a loaded machine, tens of seconds).
func closingError(t *testing.T, c *client, code string) frame {
	t.Helper()
	for {
		f := c.must(hang())
		if f.Type == "error" {
			if f.Code != code {
				t.Fatalf("error frame %s, want code %s", f, code)
			}
			return f
		}
	}
}

// stateItem reads the agent's state item in the agents table.
func (e env) stateItem(t *testing.T, agent string) map[string]types.AttributeValue {
	t.Helper()
	out, err := dynamolocal.Client(e.stack.DynamoDBEndpoint).GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(e.stack.Tables["AgentsTable"]), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "agent#" + agent}, "sk": &types.AttributeValueMemberS{Value: "state"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// checkTurn runs a short turn on c (subscribed) from seq `from` and checks the whole log
// is gapless from 0 with exactly one turn/start: nothing of the stopped turn came back.
func (e env) checkFreshTurn(t *testing.T, c *client, agent string) {
	t.Helper()
	c.send(`{"type":"inject","text":"hello","wake":true}`)
	for {
		f := c.must(hang())
		if f.Type == "turn/end" {
			if !strings.Contains(string(f.Pay), `"completed"`) {
				t.Fatalf("fresh turn ended %s", f)
			}
			break
		}
	}
	evs, err := e.log.Read(context.Background(), agent, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	for i, ev := range evs {
		if ev.Seq != int64(i) {
			t.Fatalf("log after the reset: event %d has seq %d", i, ev.Seq)
		}
		if ev.Type == "turn/start" {
			starts++
		}
		if ev.Type == "tool/call" || ev.Type == "tool/result" {
			t.Fatalf("the stopped turn's %s reached the new log: %+v", ev.Type, ev)
		}
	}
	if starts != 1 || evs[0].Type != sessionlog.TypeSessionCreated {
		t.Fatalf("log after the reset: %d turn/start, first %s; want one turn from a fresh session/created", starts, evs[0].Type)
	}
}

// TestSessionResetDuringLiveTurn: a reset while a turn works in a tool closes the live
// connection with error{internal}, stops the turn (its runner loses its lease), and
// leaves a log of session/created alone under a new epoch; the reconnecting client
// starts over from 0 with its token, and a new turn runs on the fresh log.
func TestSessionResetDuringLiveTurn(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	c := e.dial(t, "a1", tok)
	old := epochOf(t, c.hello("a1"))
	c.send(`{"type":"subscribe","from_seq":0}`)
	longTurn(t, c)

	epoch, err := e.sessionOps().Reset(context.Background(), "a1")
	if err != nil {
		t.Fatal(err)
	}
	if epoch == old {
		t.Fatalf("epoch %q unchanged by the reset", epoch)
	}
	if f := closingError(t, c, "internal"); !strings.Contains(f.Msg, "reset") {
		t.Fatalf("reset error frame %s, want a message naming the reset", f)
	}
	c.expectClosed()
	if st := e.stateItem(t, "a1"); st["owner"] != nil || st["turn_id"] != nil {
		t.Fatalf("state item after reset keeps a runner or a turn: %v", st)
	}

	c2 := e.dial(t, "a1", tok)
	h := c2.hello("a1")
	if h.Last != 0 || epochOf(t, h) != epoch {
		t.Fatalf("hello after reset %s, want last_seq 0 and epoch %s", h, epoch)
	}
	c2.send(`{"type":"subscribe","from_seq":0}`)
	if f := c2.events(0, 0); !strings.Contains(f[0].String(), `"session/created"`) {
		t.Fatalf("seq 0 after reset %s", f[0])
	}
	e.checkFreshTurn(t, c2, "a1")
}

// TestSessionDeleteDuringLiveTurn: a delete while a turn works and a client is
// connected drops the client with unauthorized and stops the turn; nothing is left but
// the counters; a connect with a new token creates a fresh session with a new epoch.
func TestSessionDeleteDuringLiveTurn(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	c := e.dial(t, "a1", tok)
	old := epochOf(t, c.hello("a1"))
	c.send(`{"type":"subscribe","from_seq":0}`)
	longTurn(t, c)

	if _, err := e.sessionOps().Delete(context.Background(), "a1"); err != nil {
		t.Fatal(err)
	}
	closingError(t, c, "unauthorized")
	c.expectClosed()
	if _, err := e.log.Tip(context.Background(), "a1"); err == nil {
		t.Fatal("the log survived the delete")
	}
	for name := range e.stateItem(t, "a1") {
		if name != "pk" && name != "sk" && !strings.HasPrefix(name, "usage_") && !strings.HasPrefix(name, "quota_") {
			t.Fatalf("state item keeps %q after the delete", name)
		}
	}
	if _, err := e.tokens.Check(context.Background(), "a1", tok); err == nil {
		t.Fatal("the old token still opens the agent")
	}
	bad := e.dial(t, "a1", tok)
	bad.expectError("unauthorized")

	c2 := e.dial(t, "a1", e.token(t, "a1"))
	h := c2.hello("a1")
	if h.Last != 0 || epochOf(t, h) == old {
		t.Fatalf("hello after delete %s: want last_seq 0 and an epoch other than %s", h, old)
	}
	c2.send(`{"type":"subscribe","from_seq":0}`)
	c2.events(0, 0)
	e.checkFreshTurn(t, c2, "a1")
}

// TestEpochStableAcrossReconnects: every connect of one log gets the same epoch.
func TestEpochStableAcrossReconnects(t *testing.T) {
	t.Parallel()
	e := startStack(t, devstack.Options{})
	tok := e.token(t, "a1")
	var first string
	for i := range 3 {
		c := e.dial(t, "a1", tok)
		ep := epochOf(t, c.hello("a1"))
		if i == 0 {
			first = ep
		} else if ep != first {
			t.Fatalf("connect %d: epoch %s, first %s", i, ep, first)
		}
		appendN(t, e.log, "a1", 2)
		c.c.CloseNow()
	}
	if got, err := e.log.Epoch(context.Background(), "a1"); err != nil || got != first {
		t.Fatalf("log epoch %q (%v), hello said %q", got, err, first)
	}
}
