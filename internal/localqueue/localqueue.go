// Package localqueue is a local stand-in for an SQS queue with a Lambda event source
// mapping and a redrive policy, for `terret dev`'s webhook retries: it serves the two
// SQS operations the webhook function calls (SendMessageBatch, ChangeMessageVisibility,
// over SQS's JSON protocol on a loopback port), and invokes a lambda.Handler with
// SQSEvent batches of the messages that are visible, as Lambda does: a message the
// handler reports failed (ReportBatchItemFailures) or that an invocation error fails
// becomes visible again after its visibility timeout (or what ChangeMessageVisibility
// set), and after MaxReceives receives it is moved to the dead-letter list instead.
//
// Batches are invoked concurrently, so a handler that hangs on one batch holds up
// none of the others.
package localqueue

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
)

// Options configure a Queue.
type Options struct {
	Name        string        // the queue's name (default "webhook")
	MaxReceives int           // the redrive policy's maxReceiveCount (required)
	Visibility  time.Duration // the queue's visibility timeout (default 90 s)
	BatchSize   int           // messages per invocation (default 10)
	Logger      *slog.Logger
}

// Queue is a running local queue.
type Queue struct {
	o       Options
	handler lambda.Handler
	ln      net.Listener
	srv     *http.Server
	logger  *slog.Logger

	mu     sync.Mutex
	msgs   map[string]*message // by message id
	dead   []string            // bodies of dead-lettered messages
	next   int
	wake   chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup
	cancel context.CancelFunc
}

type message struct {
	id, body  string
	receives  int
	receipt   string
	visibleAt time.Time
	sent      time.Time
}

// Start listens on a loopback port and starts invoking handler. Close stops it.
func Start(handler lambda.Handler, o Options) (*Queue, error) {
	if o.MaxReceives <= 0 {
		return nil, errors.New("localqueue: MaxReceives is required")
	}
	if o.Name == "" {
		o.Name = "webhook"
	}
	if o.Visibility <= 0 {
		o.Visibility = 90 * time.Second
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 10
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("localqueue: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	q := &Queue{o: o, handler: handler, ln: ln, logger: o.Logger, msgs: map[string]*message{},
		wake: make(chan struct{}, 1), done: make(chan struct{}), cancel: cancel}
	q.srv = &http.Server{Handler: http.HandlerFunc(q.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	q.wg.Add(2)
	go func() { defer q.wg.Done(); q.srv.Serve(ln) }()
	go func() { defer q.wg.Done(); q.run(ctx) }()
	return q, nil
}

// URL is the queue's URL; its origin is the endpoint the SQS client is given.
func (q *Queue) URL() string {
	return "http://" + q.ln.Addr().String() + "/000000000000/" + q.o.Name
}

// Endpoint is the SQS endpoint to give the client (BaseEndpoint).
func (q *Queue) Endpoint() string { return "http://" + q.ln.Addr().String() }

// DeadLetters returns the bodies of the messages moved to the dead-letter list.
func (q *Queue) DeadLetters() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.dead...)
}

// Len is the number of messages in the queue (in flight included).
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs)
}

// Close stops the server and the invocations' loop, and waits for the invocations
// under way.
func (q *Queue) Close() error {
	q.cancel()
	err := q.srv.Close()
	q.wg.Wait()
	return err
}

func (q *Queue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Send enqueues bodies as SendMessageBatch does (for tests and in-process callers).
func (q *Queue) Send(bodies ...string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	ids := make([]string, len(bodies))
	for i, b := range bodies {
		q.next++
		id := fmt.Sprintf("m%08d", q.next)
		q.msgs[id] = &message{id: id, body: b, visibleAt: now, sent: now}
		ids[i] = id
	}
	q.poke()
	return ids
}

// changeVisibility sets the message whose current receipt is receipt visible after d.
func (q *Queue) changeVisibility(receipt string, d time.Duration) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	id, _, _ := strings.Cut(receipt, "#")
	m, ok := q.msgs[id]
	if !ok || m.receipt != receipt {
		return false
	}
	m.visibleAt = time.Now().Add(d)
	q.poke()
	return true
}

// run receives visible messages in batches and invokes the handler with each.
func (q *Queue) run(ctx context.Context) {
	for {
		batch, wait := q.receive()
		if len(batch.Records) > 0 {
			q.wg.Add(1)
			go func() { defer q.wg.Done(); q.invoke(ctx, batch) }()
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-q.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// receive takes up to BatchSize visible messages (oldest visible first), or says how
// long until the next one is visible.
func (q *Queue) receive() (events.SQSEvent, time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	var visible []*message
	wait := time.Hour
	for _, m := range q.msgs {
		if !m.visibleAt.After(now) {
			visible = append(visible, m)
		} else {
			wait = min(wait, m.visibleAt.Sub(now))
		}
	}
	sort.Slice(visible, func(i, j int) bool {
		if !visible[i].visibleAt.Equal(visible[j].visibleAt) {
			return visible[i].visibleAt.Before(visible[j].visibleAt)
		}
		return visible[i].id < visible[j].id
	})
	var ev events.SQSEvent
	for _, m := range visible {
		if len(ev.Records) == q.o.BatchSize {
			break
		}
		if m.receives >= q.o.MaxReceives { // the redrive policy
			delete(q.msgs, m.id)
			q.dead = append(q.dead, m.body)
			q.logger.Error("webhook queue: moved to the dead-letter queue", "message_id", m.id, "receives", m.receives)
			continue
		}
		m.receives++
		m.receipt = m.id + "#" + strconv.Itoa(m.receives)
		m.visibleAt = now.Add(q.o.Visibility)
		ev.Records = append(ev.Records, events.SQSMessage{
			MessageId:     m.id,
			ReceiptHandle: m.receipt,
			Body:          m.body,
			Attributes: map[string]string{
				"ApproximateReceiveCount":          strconv.Itoa(m.receives),
				"SentTimestamp":                    strconv.FormatInt(m.sent.UnixMilli(), 10),
				"ApproximateFirstReceiveTimestamp": strconv.FormatInt(now.UnixMilli(), 10),
			},
			EventSource:    "aws:sqs",
			EventSourceARN: "arn:aws:sqs:us-east-1:000000000000:" + q.o.Name,
			AWSRegion:      "us-east-1",
		})
	}
	return ev, wait
}

// invoke runs the handler on batch and deletes the messages it did not report failed.
func (q *Queue) invoke(ctx context.Context, batch events.SQSEvent) {
	payload, _ := json.Marshal(batch)
	out, err := q.handler.Invoke(ctx, payload)
	failed := map[string]bool{}
	if err != nil {
		q.logger.Warn("webhook queue: invocation failed: the batch is retried after the visibility timeout", "messages", len(batch.Records), "error", err.Error())
		return
	}
	var resp events.SQSEventResponse
	if len(out) > 0 && string(out) != "null" {
		if err := json.Unmarshal(out, &resp); err != nil {
			q.logger.Warn("webhook queue: undecodable response: the batch is retried", "error", err.Error())
			return
		}
	}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, r := range batch.Records {
		if m, ok := q.msgs[r.MessageId]; ok && !failed[r.MessageId] && m.receipt == r.ReceiptHandle {
			delete(q.msgs, r.MessageId)
		}
	}
}

// serveHTTP answers SQS's JSON protocol for SendMessageBatch and
// ChangeMessageVisibility.
func (q *Queue) serveHTTP(w http.ResponseWriter, r *http.Request) {
	target := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	var in struct {
		QueueUrl          string
		Entries           []struct{ Id, MessageBody string }
		ReceiptHandle     string
		VisibilityTimeout int
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<20)).Decode(&in); err != nil {
		sqsError(w, "InvalidParameterValue", "request is not JSON")
		return
	}
	if in.QueueUrl != q.URL() {
		sqsError(w, "AWS.SimpleQueueService.NonExistentQueue", "no such queue")
		return
	}
	switch target {
	case "SendMessageBatch":
		bodies := make([]string, len(in.Entries))
		for i, e := range in.Entries {
			bodies[i] = e.MessageBody
		}
		ids := q.Send(bodies...)
		type ok struct{ Id, MessageId, MD5OfMessageBody string }
		out := struct {
			Successful []ok
			Failed     []struct{}
		}{Failed: []struct{}{}}
		for i, e := range in.Entries {
			sum := md5.Sum([]byte(e.MessageBody))
			out.Successful = append(out.Successful, ok{e.Id, ids[i], hex.EncodeToString(sum[:])})
		}
		reply(w, out)
	case "ChangeMessageVisibility":
		if !q.changeVisibility(in.ReceiptHandle, time.Duration(in.VisibilityTimeout)*time.Second) {
			sqsError(w, "ReceiptHandleIsInvalid", "receipt handle is not current")
			return
		}
		reply(w, struct{}{})
	default:
		sqsError(w, "UnsupportedOperation", "not served locally: "+target)
	}
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	json.NewEncoder(w).Encode(v)
}

func sqsError(w http.ResponseWriter, code, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + code, "message": msg})
}
