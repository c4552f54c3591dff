package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/service"
)

// badDynamoDB is a DynamoDB endpoint that never serves a request: it stalls (accepts
// and never answers until the client gives up), or throttles (answers every request
// with DynamoDB's 400 ThrottlingException, which the SDK retries). It counts requests.
type badDynamoDB struct {
	srv      *httptest.Server
	requests atomic.Int64
}

func startBadDynamoDB(t *testing.T, stall bool) *badDynamoDB {
	t.Helper()
	b := &badDynamoDB{}
	done := make(chan struct{})
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.requests.Add(1)
		if stall {
			select {
			case <-r.Context().Done(): // the client hung up
			case <-done: // the test is over
			}
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}`))
	}))
	t.Cleanup(b.srv.Close)
	t.Cleanup(func() { close(done) }) // runs first: no handler holds Close up
	return b
}

// deployed is a Config as a deployed function loads it, but for the DynamoDB endpoint,
// which LoadFrom takes for a local stack (no budget): the budget is set as deployed.
func deployed(t *testing.T, function, endpoint, peer string) config.Config {
	t.Helper()
	env := map[string]string{
		"LOG_TABLE": "log", "CONNECTIONS_TABLE": "connections", "AGENTS_TABLE": "agents",
		"WS_MANAGEMENT_ENDPOINT": peer, "DELIVER_FUNCTION": "deliver", "RUNNER_FUNCTION": "runner",
	}
	cfg, err := config.LoadFrom(function, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CallBudget != config.CallBudgets[function] {
		t.Fatalf("deployed %s: CallBudget %s", function, cfg.CallBudget)
	}
	cfg.DynamoDBEndpoint, cfg.LambdaEndpoint = endpoint, peer
	return cfg
}

// TestRouteAnswersBeforeItsDeadline: a message handler whose DynamoDB endpoint stalls
// answers while its Lambda invocation still has time left: its context ends
// config.RouteMargin before the invocation's, the stalled call gives up on that, and
// the handler's error path runs (the internal error frame, handed to deliver). Ordered:
// the endpoint got the request, the error logged is the route context's deadline, and
// the invocation's own context had not ended when the handler returned.
func TestRouteAnswersBeforeItsDeadline(t *testing.T) {
	t.Parallel()
	db := startBadDynamoDB(t, true)
	p := startPeer(t)
	cfg := deployed(t, "message", db.srv.URL, p.srv.URL)
	cfg.CallBudget = time.Hour // only the route context bounds the call here
	var logs bytes.Buffer
	logger := service.Logger(&syncWriter{w: &logs}, "info")
	d := service.Deliverer(cfg, dynamolocal.Config(), logger, service.Tuning{})
	h := service.Socket(cfg, dynamolocal.Config(), d, nil, logger)
	invocation, cancel := context.WithTimeout(context.Background(), config.RouteMargin+2*time.Second)
	defer cancel()
	req := events.APIGatewayWebsocketProxyRequest{Body: `{"type":"subscribe","from_seq":0}`}
	req.RequestContext.ConnectionID = "conn-stalled"
	resp, err := service.Route(h.Message)(invocation, req)
	if invocation.Err() != nil {
		t.Fatalf("the handler returned after its invocation's deadline (%v)", invocation.Err())
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("handler answered %d, %v; want 200 (the error goes to the client as a frame)", resp.StatusCode, err)
	}
	if db.requests.Load() < 1 {
		t.Fatal("the handler never reached DynamoDB")
	}
	if line := logLine(t, logs.String(), "look up connection"); !strings.Contains(line, context.DeadlineExceeded.Error()) {
		t.Errorf("logged %s, want the lookup failed on the route context's deadline", line)
	}
	// The error path ran: the internal error was handed to deliver (an Event invoke).
	kicked := false
	for _, r := range p.requests() {
		kicked = kicked || (r.InvocationType == "Event" && strings.Contains(string(r.Body), "conn-stalled"))
	}
	if !kicked {
		t.Errorf("no deliver invocation to answer the client: %+v", p.requests())
	}
}

// TestCallBudgetEndsRetries: a DynamoDB operation that is throttled on every attempt
// ends within its function's budget — the SDK's retries stop at the budget, not at
// DynamoDBMaxAttempts — and the caller gets context.DeadlineExceeded, with no deadline
// of its own. The runner's budget is the shortest (inside a third of its lease).
func TestCallBudgetEndsRetries(t *testing.T) {
	t.Parallel()
	db := startBadDynamoDB(t, false)
	cfg := deployed(t, "runner", db.srv.URL, startPeer(t).srv.URL)
	cfg.CallBudget = 300 * time.Millisecond // far below 8 attempts' backoff of up to 2 s each
	c := cfg.DynamoDB(dynamolocal.Config())
	_, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String("agents"),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "agent#a"}, "sk": &types.AttributeValueMemberS{Value: "state"}},
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetItem = %v, want context.DeadlineExceeded (the budget)", err)
	}
	if n := db.requests.Load(); n < 1 || n >= config.DynamoDBMaxAttempts {
		t.Errorf("%d attempts, want between 1 and %d: the budget, not the attempt limit, ended them", n, config.DynamoDBMaxAttempts-1)
	}
	// Without a budget the attempts stop at DynamoDBMaxAttempts, whatever the AWS
	// configuration asks (dynamolocal.Config asks for 10).
	db.requests.Store(0)
	cfg.CallBudget = 0
	_, err = cfg.DynamoDB(dynamolocal.Config()).GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String("agents"),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "agent#a"}, "sk": &types.AttributeValueMemberS{Value: "state"}},
	})
	if n := db.requests.Load(); err == nil || n != config.DynamoDBMaxAttempts {
		t.Errorf("unbudgeted: %d attempts (%v), want exactly %d", n, err, config.DynamoDBMaxAttempts)
	}
}

// syncWriter serialises writes to w (the handlers log from more than one goroutine).
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// logLine returns the JSON log line whose msg is msg.
func logLine(t *testing.T, logs, msg string) string {
	t.Helper()
	for _, l := range strings.Split(logs, "\n") {
		var m struct{ Msg string }
		if json.Unmarshal([]byte(l), &m) == nil && m.Msg == msg {
			return l
		}
	}
	t.Fatalf("no %q line in the logs:\n%s", msg, logs)
	return ""
}

// throttlingDynamoDB answers its first n requests with DynamoDB's 400 throttling errors
// (ProvisionedThroughputExceededException and ThrottlingException in turn, as the
// service sends them) and every later one with an empty GetItem result. It counts
// requests.
type throttlingDynamoDB struct {
	srv      *httptest.Server
	requests atomic.Int64
}

func startThrottlingDynamoDB(t *testing.T, n int64) *throttlingDynamoDB {
	t.Helper()
	b := &throttlingDynamoDB{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := b.requests.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		switch {
		case i > n:
			w.Write([]byte(`{}`))
		case i%2 == 1:
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded."}`))
		default:
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}`))
		}
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// TestNoClientRetryQuota: sustained throttling is retried in full, however long it
// lasts. One client meets 200 throttled answers in a row: every operation makes all
// config.DynamoDBMaxAttempts attempts before it fails with the throttling error itself,
// never with the SDK's retry quota (ratelimit.QuotaExceededError, which the standard
// retryer's token bucket returns after about 100 retries, at once and without a
// request), and the first operation after the 200th answer succeeds. The waits between
// attempts are shortened to 1 ms for the test; the attempts and the quota are the
// client's as config builds it.
func TestNoClientRetryQuota(t *testing.T) {
	t.Parallel()
	const throttled = 200
	db := startThrottlingDynamoDB(t, throttled)
	cfg := deployed(t, "message", db.srv.URL, startPeer(t).srv.URL)
	cfg.CallBudget = 0 // the budget bounds time, not attempts; it is not under test
	c := cfg.DynamoDB(aws.Config{Region: dynamolocal.Region, Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	fast := func(o *dynamodb.Options) { o.Retryer = retry.AddWithMaxBackoffDelay(o.Retryer, time.Millisecond) }
	in := &dynamodb.GetItemInput{
		TableName: aws.String("connections"),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "conn#c"}},
	}
	wantFailed := (throttled + config.DynamoDBMaxAttempts - 1) / config.DynamoDBMaxAttempts
	for op := 1; ; op++ {
		before := db.requests.Load()
		_, err := c.GetItem(context.Background(), in, fast)
		attempts := db.requests.Load() - before
		if err == nil {
			if op != wantFailed+1 {
				t.Errorf("operation %d succeeded; want the first %d to fail, throttled on every attempt", op, wantFailed)
			}
			break
		}
		var quota ratelimit.QuotaExceededError
		if errors.As(err, &quota) {
			t.Fatalf("operation %d failed on the client's retry quota after %d requests in all: %v", op, db.requests.Load(), err)
		}
		var pte *types.ProvisionedThroughputExceededException
		var api smithy.APIError
		if !errors.As(err, &pte) && !(errors.As(err, &api) && api.ErrorCode() == "ThrottlingException") {
			t.Fatalf("operation %d: %v; want the throttling error itself", op, err)
		}
		if want := int64(min(config.DynamoDBMaxAttempts, throttled-int(before))); attempts != want {
			t.Fatalf("operation %d: %d attempts; want %d", op, attempts, want)
		}
		if op > wantFailed {
			t.Fatalf("operation %d still failed after %d requests", op, db.requests.Load())
		}
	}
	if got := db.requests.Load(); got != throttled+1 {
		t.Errorf("%d requests in all; want %d throttled and one served", got, throttled+1)
	}
}
