package devstack_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/history"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// parkedFrames is how many numbered frames a round parks in the order turnstile: all
// that one connection may (socket.MaxWaitingFrames).
const parkedFrames = 16

// parkedText is the text of parked frame k of a round: nothing of it may ever be
// queued or logged once the connection's access has ended.
func parkedText(agent string, k int) string { return fmt.Sprintf("parked-%s-%d", agent, k) }

// parkedBodies are the frames a round sends: injects numbered 100–115, with 1–99 never
// sent, so each waits in the turnstile for a predecessor that never comes.
func parkedBodies(agent string, wake bool) []string {
	out := make([]string, parkedFrames)
	for k := range out {
		out[k] = fmt.Sprintf(`{"type":"inject","text":%q,"wake":%t,"order":%d}`, parkedText(agent, k), wake, 100+k)
	}
	return out
}

// startParkedStack is a runtime stack whose numbered frames wait for their predecessor
// orderWait (socket.OrderWait is 3 s). The delete test's 20 s keep a parked frame
// parked until its connection's access ends even when the delete's stream records take
// seconds to reach the deliver function, and still give up before the handler's own
// deadline (the message route's 29 s less config.RouteMargin). The revoke test's wait
// is longer than that deadline: a parked frame cannot stop waiting before the
// revocation marks its connection, whatever the machine's load (it would end with its
// handler's context, applying nothing).
//
// gaveUp counts, by agent, the frames that stopped waiting at the order wait's end
// while their connection was still authorized (the stack's log line): such a frame
// takes effect before the access ends, as it may.
func startParkedStack(t *testing.T, orderWait time.Duration) (env, *gaveUp) {
	t.Helper()
	if emulated() {
		t.Skip("parks frames with devstack.Options.OrderWait: in-process only")
	}
	g := &gaveUp{n: map[string]int{}}
	hook := logHook{on: func(msg string, vals map[string]slog.Value) {
		if msg == "frame order gap: served without its predecessor" {
			g.mu.Lock()
			g.n[vals["agent_id"].String()]++
			g.mu.Unlock()
		}
	}}
	logs := service.Logger(testLogOut(), testLogLevel()).Handler()
	e := startRuntimeStack(t, devstack.Options{OrderWait: orderWait, Logger: slog.New(slog.NewMultiHandler(hook, logs))})
	return e, g
}

// gaveUp counts frames that stopped waiting for their predecessor, by agent.
type gaveUp struct {
	mu sync.Mutex
	n  map[string]int
}

func (g *gaveUp) of(agent string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n[agent]
}

// parkFrames connects agent with tok, sends the round's numbered frames and waits until
// all of them wait in the turnstile (the connection record's waiting count).
func (e env) parkFrames(t *testing.T, agent, tok string, wake bool) (*client, []string) {
	t.Helper()
	c := e.dial(t, agent, tok)
	c.hello(agent)
	conn := e.ownerConn(t, agent)
	bodies := parkedBodies(agent, wake)
	for _, b := range bodies {
		c.send(b)
	}
	e.awaitItem(t, "conn#"+conn, fmt.Sprintf("%d frames of %s waiting in the turnstile", parkedFrames, conn), func(item map[string]types.AttributeValue) bool {
		n, _ := item["waiting"].(*types.AttributeValueMemberN)
		return n != nil && n.Value == strconv.Itoa(parkedFrames)
	})
	return c, bodies
}

// ownerConn is the connection agent's ownership record names.
func (e env) ownerConn(t *testing.T, agent string) string {
	t.Helper()
	var conn string
	e.awaitItem(t, "agent#"+agent, "the ownership record of "+agent, func(item map[string]types.AttributeValue) bool {
		c, _ := item["conn"].(*types.AttributeValueMemberS)
		if c != nil {
			conn = c.Value
		}
		return conn != ""
	})
	return conn
}

// awaitItem reads the connections table's item pk until ok holds, bounded by hang().
func (e env) awaitItem(t *testing.T, pk, what string, ok func(map[string]types.AttributeValue) bool) {
	t.Helper()
	db := dynamolocal.Client(e.stack.DynamoDBEndpoint)
	deadline := time.Now().Add(hang())
	for {
		out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{
			TableName: aws.String(e.stack.Tables["ConnectionsTable"]), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if out.Item != nil && ok(out.Item) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached; last item: %v", what, out.Item)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// framesHandled waits until the message handler has returned for each of bodies sent
// by agent's connections: whatever those frames do, they have done.
func (e env) framesHandled(t *testing.T, agent string, bodies []string) {
	t.Helper()
	iv := e.calls
	deadline := time.NewTimer(hang())
	defer deadline.Stop()
	for {
		iv.mu.Lock()
		left, changed := 0, iv.changed
		for _, b := range bodies {
			if iv.frames[frameKey(agent, b)] < 1 {
				left++
			}
		}
		iv.mu.Unlock()
		if left == 0 {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%d of the %d parked frames of %s never handled", left, len(bodies), agent)
		}
	}
}

// agentItems lists every item of agent in the agents table, by sort key.
func (e env) agentItems(t *testing.T, agent string) map[string]map[string]types.AttributeValue {
	t.Helper()
	out, err := dynamolocal.Client(e.stack.DynamoDBEndpoint).Query(context.Background(), &dynamodb.QueryInput{
		TableName:                 aws.String(e.stack.Tables["AgentsTable"]),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "agent#" + agent}},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	items := map[string]map[string]types.AttributeValue{}
	for _, it := range out.Items {
		items[it["sk"].(*types.AttributeValueMemberS).Value] = it
	}
	return items
}

// noParkedText fails if any item of agent in the agents table holds a parked frame's
// text: queued in the inbox (on the state item or as an item of its own) or anywhere.
func (e env) noParkedText(t *testing.T, agent string) {
	t.Helper()
	for sk, it := range e.agentItems(t, agent) {
		if s := fmt.Sprint(it); strings.Contains(s, "parked-") || strings.HasPrefix(sk, "inbox#") {
			t.Fatalf("%s: a parked frame took effect after its connection's access ended: item %s = %s", agent, sk, s)
		}
	}
}

// TestParkedFramesAfterRevoke: a client parks 16 numbered frames behind a gap in its
// numbering, then its token is revoked. The connection is closed with unauthorized,
// and none of the 16 takes effect — not after the revocation, not after the close.
//
// The ordering the test needs — every frame still waiting when the revocation marks
// the connection — is forced: the order wait outlasts the handler's deadline, so a
// frame stops waiting only once the mark is there (or with its handler's context,
// applying nothing), and the test checks that no frame of the round was handled when
// it marked and none ended with its handler's context. A round where one did (parking
// took longer than the handler's deadline) is run again, up to twice as many rounds in
// all; every round counts on any machine where parking 16 frames and marking take less
// than that deadline, and a run where none counted fails.
func TestParkedFramesAfterRevoke(t *testing.T) {
	t.Parallel()
	e, g := startParkedStack(t, time.Hour)
	rounds := soakRounds(t, "PARKED_ROUNDS", 3, 20)
	proved := 0
	for r := 0; proved < rounds && r < 2*rounds; r++ {
		agent := fmt.Sprintf("rv%d", r)
		c, bodies := e.parkFrames(t, agent, e.token(t, agent), false)
		if err := e.tokens.Revoke(context.Background(), agent); err != nil {
			t.Fatal(err)
		}
		// The deliver function's first step once the token item's stream record
		// reaches it (marking the connection), done here at once: the round then does
		// not depend on how long the stream takes on a loaded machine. The deliver
		// function still closes the socket when the record reaches it.
		conn := e.ownerConn(t, agent)
		early := e.handledOf(agent, bodies)
		conns := connections.New(dynamolocal.Client(e.stack.DynamoDBEndpoint), e.stack.Tables["ConnectionsTable"])
		if err := conns.SetState(context.Background(), conn, connections.StateUnauthorized); err != nil {
			t.Fatal(err)
		}
		closing := closingFrame(t, c)
		c.expectClosed()
		e.framesHandled(t, agent, bodies)
		if n := g.of(agent); n > 0 {
			t.Fatalf("round %d: %d frames stopped waiting at the order wait's end, which outlasts their handlers (closed with %s)", r, n, closing)
		}
		if n := e.expiredOf(agent); early > 0 || n > 0 {
			// Parking took the handlers' deadline: a frame ended with its handler's
			// context (applying nothing, the socket closed internal) rather than with
			// the revocation's mark.
			e.noParkedText(t, agent)
			t.Logf("round %d: %d frames handled before the mark, %d ended by their handler's deadline (closed with %s); not counted", r, early, n, closing)
			continue
		}
		if closing.Code != "unauthorized" {
			t.Fatalf("round %d: closed with %s, want unauthorized", r, closing)
		}
		e.noParkedText(t, agent)
		proved++
	}
	if proved == 0 {
		t.Fatalf("no round's frames were all still waiting when the revocation marked the connection: parking 16 frames outlasted their handlers' deadline")
	}
}

// expiredOf counts agent's frames whose handler's context had ended when it returned.
func (e env) expiredOf(agent string) int {
	e.calls.mu.Lock()
	defer e.calls.mu.Unlock()
	return e.calls.expired[agent]
}

// handledOf counts the frames among bodies of agent whose message handler has returned.
func (e env) handledOf(agent string, bodies []string) int {
	iv := e.calls
	iv.mu.Lock()
	defer iv.mu.Unlock()
	n := 0
	for _, b := range bodies {
		if iv.frames[frameKey(agent, b)] > 0 {
			n++
		}
	}
	return n
}

// TestParkedFramesAfterDelete: a client parks 16 waking injects behind a gap, then the
// session is deleted (`terret session delete`). After the delete, a client with a new
// token finds a fresh session: hello's last_seq is 0, its subscriber from seq 0
// receives a gapless log from 0 (no replay_truncated), and nothing of the deleted
// client's frames is queued or logged, nor did a turn run on them.
func TestParkedFramesAfterDelete(t *testing.T) {
	t.Parallel()
	e, _ := startParkedStack(t, 20*time.Second)
	rounds := soakRounds(t, "PARKED_ROUNDS", 3, 20)
	for r := range rounds {
		agent := fmt.Sprintf("dl%d", r)
		c, bodies := e.parkFrames(t, agent, e.token(t, agent), true)
		if _, err := e.sessionOps().Delete(context.Background(), agent); err != nil {
			t.Fatal(err)
		}
		// unauthorized (the token's removal), or internal: a frame that stopped
		// waiting after the delete's fence finds the agent no longer names its
		// connection, and closes it so.
		if f := closingFrame(t, c); f.Code != "unauthorized" && f.Code != "internal" {
			t.Fatalf("round %d: closed with %s", r, f)
		}
		c.expectClosed()
		e.framesHandled(t, agent, bodies)
		e.noParkedText(t, agent)

		c2 := e.dial(t, agent, e.token(t, agent))
		if h := c2.hello(agent); h.Last != 0 {
			t.Fatalf("round %d: hello of the session after the delete %s: want last_seq 0", r, h)
		}
		h := history.New()
		sub := h.Subscribe("next", 0)
		c2.send(`{"type":"subscribe","from_seq":0}`)
		c2.send(`{"type":"inject","text":"hello","wake":true}`)
		for done := false; !done; {
			f := c2.must(30 * time.Second)
			switch {
			case f.Type == "replay_truncated":
				sub.Truncated(f.From)
				t.Errorf("round %d: the next session's subscriber from 0 got %s", r, f)
			case f.Type == "error":
				t.Fatalf("round %d: %s", r, f)
			case f.Seq != nil:
				sub.Receive(*f.Seq)
				if strings.Contains(string(f.raw), "parked-") {
					t.Fatalf("round %d: the deleted client's frame reached the next session: %s", r, f)
				}
				done = f.Type == "turn/end"
			}
		}
		// Whatever the turn logs after turn/end (a title) reaches the subscriber too.
		evs, err := e.log.Read(context.Background(), agent, 0, 10000)
		for ; err == nil && gapless(evs) && !sub.Reached(int64(len(evs))-1); evs, err = e.log.Read(context.Background(), agent, 0, 10000) {
			if f := c2.must(30 * time.Second); f.Seq != nil {
				sub.Receive(*f.Seq)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		h.CheckLog(t, evs)
		starts := 0
		for _, ev := range evs {
			if strings.Contains(string(ev.Payload), "parked-") {
				t.Fatalf("round %d: the next session's log holds the deleted client's text: %+v", r, ev)
			}
			if ev.Type == "turn/start" {
				starts++
			}
		}
		if starts != 1 {
			t.Fatalf("round %d: the next session ran %d turns, want the one its own client asked for", r, starts)
		}
		e.noParkedText(t, agent)
		c2.c.CloseNow()
	}
}

// gapless reports whether evs, a log read from seq 0, runs 0, 1, 2, … with no gap.
func gapless(evs []sessionlog.Event) bool {
	for i, ev := range evs {
		if ev.Seq != int64(i) {
			return false
		}
	}
	return true
}

// closingFrame reads frames until an error frame (the one that closes c) and returns
// it, within the bound closingError allows.
func closingFrame(t *testing.T, c *client) frame {
	t.Helper()
	for {
		if f := c.must(2 * time.Minute); f.Type == "error" {
			return f
		}
	}
}
