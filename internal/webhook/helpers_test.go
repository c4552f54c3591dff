package webhook_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/terret/terret-ws/internal/localqueue"
	"github.com/terret/terret-ws/internal/sessionlog"
	"github.com/terret/terret-ws/internal/webhook"
	"github.com/terret/terret-ws/internal/webhook/sqsqueue"
)

// testSecret is a Standard Webhooks secret for the tests' receivers.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// verify checks a request's signature as a receiver would, with its own HMAC code
// (not the package's): the key is the base64-decoded part after whsec_, the signed
// content "<webhook-id>.<webhook-timestamp>.<body>", the header a space-separated
// list of "v1,<base64>".
func verify(secret string, h http.Header, body []byte) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	if id == "" || ts == "" {
		return fmt.Errorf("missing webhook-id or webhook-timestamp")
	}
	if _, err := strconv.ParseInt(ts, 10, 64); err != nil {
		return fmt.Errorf("webhook-timestamp %q is not Unix seconds", ts)
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", id, ts, body)
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		v, s, ok := strings.Cut(sig, ",")
		if ok && v == "v1" && hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return fmt.Errorf("no valid v1 signature in %q", h.Get("webhook-signature"))
}

// delivery is one request a receiver got.
type delivery struct {
	header   http.Header
	body     []byte
	verified error
	status   int
}

// receiver is a real HTTP server on loopback that verifies every request's signature
// and answers with the status answer gives for the n-th request (0-based).
type receiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  []delivery
	seen chan int // the count after each request, as it arrives
}

func startReceiver(t *testing.T, answer func(n int, r *http.Request) int) *receiver {
	t.Helper()
	rv := &receiver{seen: make(chan int, 100)}
	rv.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rv.mu.Lock()
		n := len(rv.got)
		rv.got = append(rv.got, delivery{header: r.Header.Clone(), body: body, verified: verify(testSecret, r.Header, body)})
		rv.mu.Unlock()
		rv.seen <- n + 1
		status := answer(n, r)
		rv.mu.Lock()
		rv.got[n].status = status
		rv.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rv.Close)
	return rv
}

func (rv *receiver) deliveries() []delivery {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return append([]delivery(nil), rv.got...)
}

// waitCount waits for the receiver's n-th request.
func (rv *receiver) waitCount(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case c := <-rv.seen:
			if c >= n {
				return
			}
		case <-deadline:
			t.Fatalf("receiver %s: waited 60 s for request %d, got %d", rv.URL, n, len(rv.deliveries()))
		}
	}
}

// fixedHooks is each agent's webhooks, as a profile would give them.
type fixedHooks map[string][]webhook.Hook

func (f fixedHooks) Hooks(_ context.Context, agentID string, secrets bool) ([]webhook.Hook, error) {
	out := append([]webhook.Hook(nil), f[agentID]...)
	if !secrets {
		for i := range out {
			out[i].Secret = nil
		}
	}
	return out, nil
}

type fixedEpochs string

func (e fixedEpochs) Epoch(context.Context, string) (string, error) { return string(e), nil }

func hook(t *testing.T, url string, globs ...string) webhook.Hook {
	t.Helper()
	key, err := webhook.ParseSecret(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return webhook.Hook{URL: url, Events: globs, Secret: key}
}

// rig is a consumer behind a local queue (SQS's API over loopback, the real SDK
// client), as terret dev runs it.
type rig struct {
	c    *webhook.Consumer
	q    *localqueue.Queue
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startRig(t *testing.T, hooks webhook.Hooks, o webhook.Options) *rig {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	var c *webhook.Consumer
	handler := lambda.NewHandler(func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		return c.HandleQueue(ctx, ev), nil
	})
	if o.MaxAttempts == 0 {
		o.MaxAttempts = webhook.DefaultMaxAttempts
	}
	q, err := localqueue.Start(handler, localqueue.Options{MaxReceives: o.MaxAttempts, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(q.Endpoint()),
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", "")})
	o.Addresses.Loopback = true
	c = webhook.New(hooks, fixedEpochs("epoch-1"), sqsqueue.New(client, q.URL()), logger, o)
	return &rig{c: c, q: q, logs: logs}
}

// streamBatch is the log stream's batch of evs, as Lambda hands it over.
func streamBatch(evs ...sessionlog.Event) events.DynamoDBEvent {
	var out events.DynamoDBEvent
	for i, ev := range evs {
		img := map[string]events.DynamoDBAttributeValue{
			"session_id": events.NewStringAttribute(ev.SessionID),
			"seq":        events.NewNumberAttribute(strconv.FormatInt(ev.Seq, 10)),
			"id":         events.NewStringAttribute(ev.ID),
			"at":         events.NewStringAttribute(ev.At),
			"type":       events.NewStringAttribute(ev.Type),
			"payload":    events.NewStringAttribute(string(ev.Payload)),
		}
		out.Records = append(out.Records, events.DynamoDBEventRecord{
			EventName:   "INSERT",
			EventSource: "aws:dynamodb",
			Change:      events.DynamoDBStreamRecord{NewImage: img, SequenceNumber: strconv.Itoa(100 + i)},
		})
	}
	return out
}

func event(agentID string, seq int64, typ, payload string) sessionlog.Event {
	return sessionlog.Event{ID: fmt.Sprintf("ev-%s-%d", agentID, seq), SessionID: agentID, Seq: seq,
		At: "2026-08-18T04:10:11.123456Z", Type: typ, Payload: []byte(payload)}
}

// waitFor polls cond until it holds, failing with what after 60 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 60 s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
