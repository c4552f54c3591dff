package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/coder/websocket"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// laggedResult is the outbound-queue bound (lagged) at work: a reader that stops
// reading in the live tail, and one that keeps up, on a stack of their own with a
// small outbound_queue.
type laggedResult struct {
	Queue      int // outbound_queue
	EventBytes int // each event's padding
	// The paused reader: events appended to its agent until it was dropped, those it
	// received before lagged (the frames the kernel buffers held when it paused), and
	// how far behind it was when dropped: the log's tip minus the last event it got.
	Appended  int
	Paced     int // of Appended, those appended each once the one before was posted
	Received  int
	Behind    int64
	GotLagged bool
	// The reader that keeps up: events appended in bursts of outbound_queue, those it
	// got, and whether it was sent lagged.
	KeepUpEvents int
	KeepUpGot    int
	KeepUpLagged bool
}

// runLagged starts a stack with outbound_queue -lagged-queue (and pings every 10
// minutes: a browser answers pings whatever its page reads, the bench's client only
// while it reads). A client subscribes to the live tail and reads nothing more; events
// of 16 KiB are appended one at a time until its connection record says lagged — each
// once the one before was posted until a post waits for the reader (its buffers are
// full), then as fast as they can be appended. It
// then reads what it was sent: events in order, lagged, the close. A second client
// keeps up: events are appended in bursts of outbound_queue, each once it has read the
// one before (a quarter of -lagged-events in all), so it is never more than
// outbound_queue events behind and must never be sent lagged.
func (b *bench) runLagged(ctx context.Context) error {
	q := b.o.laggedQueue
	st, err := devstack.Start(ctx, devstack.Options{
		Addr: "127.0.0.1:0", DynamoDBEndpoint: b.st.endpoint, PollInterval: b.st.poll,
		TablePrefix:   fmt.Sprintf("benchlag%d-", time.Now().UnixNano()%1e9),
		OutboundQueue: q, PingInterval: 10 * time.Minute, Logger: b.st.logger, Latency: b.o.latency,
	})
	if err != nil {
		return err
	}
	db := dynamolocal.Client(b.st.endpoint)
	defer func() {
		_ = st.Close()
		for _, name := range st.Tables {
			_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
		}
	}()
	tokens := auth.New(db, st.Tables["ConnectionsTable"])
	owners := connections.New(db, st.Tables["ConnectionsTable"])
	log := sessionlog.New(db, st.Tables["LogTable"])
	pad := strings.Repeat("x", 16<<10)
	res := laggedResult{Queue: q, EventBytes: len(pad)}

	// The paused reader.
	const paused = "lagged-paused"
	ws, err := liveTail(ctx, st, tokens, paused)
	if err != nil {
		return err
	}
	defer ws.CloseNow()
	o, err := owners.Owner(ctx, paused)
	if err != nil {
		return fmt.Errorf("owner of %s: %w", paused, err)
	}
	paced := true
	for {
		c, err := owners.Conn(ctx, o.ConnID)
		if errors.Is(err, connections.ErrNotFound) || (err == nil && c.State == connections.StateLagged) {
			break
		}
		if err != nil {
			return err
		}
		if res.Appended == b.o.laggedEvents {
			return fmt.Errorf("%d events appended to a client that reads nothing, and it was never dropped", res.Appended)
		}
		if paced {
			// Until the reader's buffers are full, each event goes once the one before
			// was posted (the ownership record's cursor past it), so that how long the
			// stack takes to wake a sender — 250 ms stream polls under the AWS latency
			// profile, seconds on a loaded machine — is not counted as the reader
			// falling behind. Once the gateway holds a frame for the reader unwritten,
			// a post waits for it: from then on events come as fast as they can be
			// appended.
			if postedOrWaiting(ctx, owners, st, paused, o.ConnID, int64(2+res.Appended)) {
				res.Paced++
			} else {
				paced = false
			}
		}
		if _, err := log.Append(ctx, paused, "bench/event", map[string]string{"pad": pad}); err != nil {
			return err
		}
		res.Appended++
	}
	last := int64(1)
	for {
		f, err := readFrame(ctx, ws)
		if err != nil {
			return fmt.Errorf("paused reader after seq %d: %w (want lagged first)", last, err)
		}
		if f.Type == "error" {
			res.GotLagged = f.Code == "lagged"
			break
		}
		if f.Seq == nil || *f.Seq != last+1 {
			return fmt.Errorf("paused reader: frame %s after seq %d, want the next event", f.Type, last)
		}
		last = *f.Seq
	}
	res.Received = int(last - 1)
	res.Behind = int64(1+res.Appended) - last

	// The reader that keeps up.
	const keeping = "lagged-keeping-up"
	kw, err := liveTail(ctx, st, tokens, keeping)
	if err != nil {
		return err
	}
	defer kw.CloseNow()
	bursts := max(b.o.laggedEvents/4/q, 1)
	res.KeepUpEvents = bursts * q
	next := int64(2)
	for range bursts {
		for range q {
			if _, err := log.Append(ctx, keeping, "bench/event", map[string]string{"pad": pad}); err != nil {
				return err
			}
		}
		for range q {
			f, err := readFrame(ctx, kw)
			switch {
			case err != nil:
				return fmt.Errorf("keeping-up reader after %d events: %w", res.KeepUpGot, err)
			case f.Type == "error":
				res.KeepUpLagged = f.Code == "lagged"
				b.res.lagged = res
				return fmt.Errorf("keeping-up reader: error frame %s after %d events", f.Code, res.KeepUpGot)
			case f.Seq == nil || *f.Seq != next:
				return fmt.Errorf("keeping-up reader: frame %s, want seq %d", f.Type, next)
			}
			next++
			res.KeepUpGot++
		}
	}
	b.res.lagged = res
	return nil
}

// postedOrWaiting waits (polling every 20 ms) until agent's ownership record shows its
// cursor at or past next — true — or the gateway holds a frame posted to conn unwritten,
// a post waiting for a reader whose buffers are full — false. A record that cannot be
// read counts as past: the caller looks at the connection next. After a minute it gives
// up pacing (false).
func postedOrWaiting(ctx context.Context, owners *connections.Store, st *devstack.Stack, agent, conn string, next int64) bool {
	deadline := time.Now().Add(time.Minute)
	for {
		o, err := owners.Owner(ctx, agent)
		if err != nil || o.Next >= next {
			return true
		}
		if st.Queued(conn) > 0 || time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// liveTail connects a client to agent on st and puts it in the live tail: subscribe
// from seq 1, then a set_policy whose event (seq 1) shows the subscription in force.
func liveTail(ctx context.Context, st *devstack.Stack, tokens *auth.Store, agent string) (*websocket.Conn, error) {
	token, err := tokens.Create(ctx, agent)
	if err != nil {
		return nil, fmt.Errorf("token for %s: %w", agent, err)
	}
	ws, _, err := websocket.Dial(ctx, st.WebSocketURL()+"/agents/"+agent+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + token}},
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", agent, err)
	}
	ws.SetReadLimit(1 << 20)
	if f, err := readFrame(ctx, ws); err != nil || f.Type != "hello" {
		ws.CloseNow()
		return nil, fmt.Errorf("%s: first frame %s (%v), want hello", agent, f.Type, err)
	}
	for _, m := range []string{`{"type":"subscribe","from_seq":1,"order":1}`, `{"type":"set_policy","patterns":["p"],"order":2}`} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			ws.CloseNow()
			return nil, err
		}
	}
	if f, err := readFrame(ctx, ws); err != nil || f.Type != "policy/updated" {
		ws.CloseNow()
		return nil, fmt.Errorf("%s: after subscribe %s (%v), want policy/updated", agent, f.Type, err)
	}
	return ws, nil
}

func readFrame(ctx context.Context, ws *websocket.Conn) (frame, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, b, err := ws.Read(rctx)
	if err != nil {
		return frame{}, err
	}
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		return frame{}, fmt.Errorf("frame %.80q: %w", b, err)
	}
	return f, nil
}
