package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/terret/terret-ws/internal/sessionlog"
)

// Hooks finds an agent's webhooks (its profile's, merged over the default); with
// secrets, their secrets resolved (else Secret is nil). An agent without webhooks has
// none and no error. An error wrapping ErrProfile is a profile that cannot be served
// (retrying will not help); any other error is worth a retry.
type Hooks interface {
	Hooks(ctx context.Context, agentID string, secrets bool) ([]Hook, error)
}

// ErrProfile is an agent profile whose webhooks cannot be served as it stands.
var ErrProfile = errors.New("webhook: the agent's profile")

// Epochs reads the epoch of an agent's log (sessionlog.Log.Epoch).
type Epochs interface {
	Epoch(ctx context.Context, agentID string) (string, error)
}

// Queue carries Jobs between attempts: package sqsqueue (SQS on AWS, MemQueue's endpoint
// locally).
type Queue interface {
	// Send enqueues jobs, visible at once.
	Send(ctx context.Context, jobs []Job) error
	// Delay makes the received message receipt visible again after d.
	Delay(ctx context.Context, receipt string, d time.Duration) error
}

// Options tune a Consumer; zero values take the defaults.
type Options struct {
	AttemptTimeout time.Duration // DefaultAttemptTimeout
	FirstRetry     time.Duration // DefaultFirstRetry
	MaxBackoff     time.Duration // DefaultMaxBackoff
	MaxAttempts    int           // DefaultMaxAttempts: the queue's maxReceiveCount
	// Addresses is what receivers may be: the zero value is AWS's (https, public
	// addresses only).
	Addresses Addresses
	// Client sends the attempts (default Addresses.Client(AttemptTimeout)); tests only.
	Client *http.Client
	Now    func() time.Time
}

// Consumer serves the webhook function: the log's stream and the queue.
type Consumer struct {
	hooks  Hooks
	epochs Epochs
	queue  Queue
	logger *slog.Logger
	o      Options
}

// New returns a Consumer.
func New(hooks Hooks, epochs Epochs, queue Queue, logger *slog.Logger, o Options) *Consumer {
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	if o.FirstRetry <= 0 {
		o.FirstRetry = DefaultFirstRetry
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.Client == nil {
		o.Client = o.Addresses.Client(o.AttemptTimeout)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Consumer{hooks: hooks, epochs: epochs, queue: queue, logger: logger, o: o}
}

// Handle serves every invocation of the webhook function: a batch of the log's
// stream or of the queue, told apart by the records' eventSource.
func (c *Consumer) Handle(ctx context.Context, raw json.RawMessage) (any, error) {
	var probe struct {
		Records []struct {
			EventSource string `json:"eventSource"`
		} `json:"Records"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("webhook: decode event: %w", err)
	}
	if len(probe.Records) > 0 && probe.Records[0].EventSource == "aws:sqs" {
		var ev events.SQSEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return nil, fmt.Errorf("webhook: decode queue batch: %w", err)
		}
		return c.HandleQueue(ctx, ev), nil
	}
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, fmt.Errorf("webhook: decode stream batch: %w", err)
	}
	return c.HandleStream(ctx, ev), nil
}

// maxParallel bounds the agents (stream) or attempts (queue) one batch serves at once.
const maxParallel = 16

// HandleStream enqueues a Job for each new event of the batch and each of its agent's
// webhooks that matches the event's type. It sends nothing to a receiver. Records of
// an agent whose webhooks or epoch cannot be read, or whose Jobs cannot be enqueued,
// are reported failed (retried by the event source: at least once); one agent's
// failure never fails another's records.
func (c *Consumer) HandleStream(ctx context.Context, batch events.DynamoDBEvent) events.DynamoDBEventResponse {
	type rec struct {
		ev  sessionlog.Event
		seq string // the stream record's sequence number
	}
	byAgent := map[string][]rec{}
	var order []string
	for _, r := range batch.Records {
		if r.EventName != string(events.DynamoDBOperationTypeInsert) {
			continue // the log is append-only; a MODIFY is retention's expires_at
		}
		ev, err := sessionlog.FromImage(r.Change.NewImage)
		if err != nil {
			c.logger.ErrorContext(ctx, "webhook: undecodable log record", "sequence_number", r.Change.SequenceNumber, "error", err.Error())
			continue // can never succeed; the log still has the event
		}
		if _, ok := byAgent[ev.SessionID]; !ok {
			order = append(order, ev.SessionID)
		}
		byAgent[ev.SessionID] = append(byAgent[ev.SessionID], rec{ev, r.Change.SequenceNumber})
	}
	var mu sync.Mutex
	var failures []events.DynamoDBBatchItemFailure
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxParallel)
	for _, agentID := range order {
		recs := byAgent[agentID]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			evs := make([]sessionlog.Event, len(recs))
			for i, r := range recs {
				evs[i] = r.ev
			}
			if err := c.enqueue(ctx, agentID, evs); err != nil {
				c.logger.ErrorContext(ctx, "webhook: enqueue", "agent_id", agentID, "error", err.Error())
				mu.Lock()
				for _, r := range recs {
					failures = append(failures, events.DynamoDBBatchItemFailure{ItemIdentifier: r.seq})
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return events.DynamoDBEventResponse{BatchItemFailures: failures}
}

// enqueue sends the Jobs of agentID's events evs.
func (c *Consumer) enqueue(ctx context.Context, agentID string, evs []sessionlog.Event) error {
	hooks, err := c.hooks.Hooks(ctx, agentID, false)
	if errors.Is(err, ErrProfile) {
		// A stored profile that no longer passes: retrying the shard would not help.
		c.logger.ErrorContext(ctx, "webhook: events not delivered", "agent_id", agentID, "events", len(evs), "error", err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	type match struct {
		ev   sessionlog.Event
		hook Hook
	}
	var matches []match
	epoch := ""
	for _, ev := range evs {
		if ev.Seq == 0 {
			epoch = ev.ID // the log's epoch is its seq 0's id
		}
		for _, h := range hooks {
			if h.Matches(ev.Type) {
				matches = append(matches, match{ev, h})
			}
		}
	}
	if len(matches) == 0 {
		return nil
	}
	if epoch == "" {
		if epoch, err = c.epochs.Epoch(ctx, agentID); err != nil {
			return err
		}
	}
	jobs := make([]Job, 0, len(matches))
	for _, m := range matches {
		body, err := BodyOf(agentID, epoch, m.ev)
		if err != nil {
			return err
		}
		jobs = append(jobs, Job{AgentID: agentID, URL: m.hook.URL, ID: m.ev.ID, Body: body})
	}
	return c.queue.Send(ctx, jobs)
}

// BodyOf is the body a receiver gets for ev of agentID's log in epoch: Body, with
// the envelope byte for byte as a socket gets it.
func BodyOf(agentID, epoch string, ev sessionlog.Event) ([]byte, error) {
	env, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("webhook: envelope of %s seq %d: %w", agentID, ev.Seq, err)
	}
	var b bytes.Buffer
	b.WriteString(`{"type":`)
	writeJSON(&b, ev.Type)
	b.WriteString(`,"agent_id":`)
	writeJSON(&b, agentID)
	b.WriteString(`,"epoch":`)
	writeJSON(&b, epoch)
	b.WriteString(`,"event":`)
	b.Write(env)
	b.WriteString("}")
	return b.Bytes(), nil
}

func writeJSON(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // a string always encodes
	b.Write(q)
}

// HandleQueue makes one attempt for each Job of the batch, all at once. A failed
// attempt's message is made visible again after Backoff and reported failed; after
// MaxAttempts the queue moves it to its dead-letter queue on its next receive.
func (c *Consumer) HandleQueue(ctx context.Context, batch events.SQSEvent) events.SQSEventResponse {
	var mu sync.Mutex
	var failures []events.SQSBatchItemFailure
	hooks := &hookCache{hooks: c.hooks, m: map[string]*hookEntry{}}
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxParallel)
	for _, m := range batch.Records {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if !c.serve(ctx, hooks, m) {
				mu.Lock()
				failures = append(failures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return events.SQSEventResponse{BatchItemFailures: failures}
}

// serve attempts message m's Job and reports whether it is done with (delivered, or
// never deliverable).
func (c *Consumer) serve(ctx context.Context, hooks *hookCache, m events.SQSMessage) bool {
	var job Job
	if err := json.Unmarshal([]byte(m.Body), &job); err != nil || job.AgentID == "" || job.URL == "" {
		c.logger.ErrorContext(ctx, "webhook: undecodable queue message: dropped", "message_id", m.MessageId)
		return true
	}
	attempt, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	attempt = max(attempt, 1)
	log := c.logger.With("agent_id", job.AgentID, "event_id", job.ID, "url", RedactURL(job.URL), "attempt", attempt)
	list, err := hooks.get(ctx, job.AgentID)
	if err != nil {
		log.ErrorContext(ctx, "webhook: read the agent's webhooks", "error", err.Error())
		return c.retry(ctx, log, m, attempt)
	}
	var hook *Hook
	for i := range list {
		if list[i].URL == job.URL {
			hook = &list[i]
			break
		}
	}
	if hook == nil {
		log.InfoContext(ctx, "webhook: no longer in the agent's profile: dropped")
		return true
	}
	if err := c.Attempt(ctx, *hook, job); err != nil {
		log.WarnContext(ctx, "webhook: attempt failed", "error", err.Error())
		return c.retry(ctx, log, m, attempt)
	}
	log.InfoContext(ctx, "webhook: delivered")
	return true
}

// retry schedules m's next attempt and reports it not done.
func (c *Consumer) retry(ctx context.Context, log *slog.Logger, m events.SQSMessage, attempt int) bool {
	d := Backoff(attempt, c.o.FirstRetry, c.o.MaxBackoff)
	if attempt >= c.o.MaxAttempts {
		// Visible at once: its next receive is past the redrive policy's count, which
		// moves it to the dead-letter queue (and raises its alarm).
		log.ErrorContext(ctx, "webhook: giving up: to the dead-letter queue", "attempts", attempt)
		d = 0
	}
	if err := c.queue.Delay(ctx, m.ReceiptHandle, d); err != nil {
		log.ErrorContext(ctx, "webhook: delay the retry", "error", err.Error())
	}
	return false
}

// Attempt POSTs job to hook once, signed, within Options.AttemptTimeout. It returns
// nil for a 2xx answer, else an error wrapping ErrAttempt (or ErrRefused) that names
// neither the secret nor the URL's query.
func (c *Consumer) Attempt(ctx context.Context, hook Hook, job Job) error {
	ctx, cancel := context.WithTimeout(ctx, c.o.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.URL, bytes.NewReader(job.Body))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAttempt, ErrBadURL)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "terret-webhook/1")
	Sign(req.Header, hook.Secret, job.ID, c.o.Now(), job.Body)
	resp, err := c.o.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text would quote the whole URL
		}
		if errors.Is(err, ErrRefused) {
			return fmt.Errorf("%w: %w", ErrAttempt, err)
		}
		return fmt.Errorf("%w: %v", ErrAttempt, err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%w: answered %d", ErrAttempt, resp.StatusCode)
	}
	return nil
}

// RedactURL is u for a log line: scheme, host and path, without a query (which may
// hold a token) or credentials.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(invalid url)"
	}
	return p.Scheme + "://" + p.Host + p.EscapedPath()
}

// hookCache reads each agent's webhooks once per batch.
type hookCache struct {
	hooks Hooks
	mu    sync.Mutex
	m     map[string]*hookEntry
}

type hookEntry struct {
	once  sync.Once
	hooks []Hook
	err   error
}

func (h *hookCache) get(ctx context.Context, agentID string) ([]Hook, error) {
	h.mu.Lock()
	e, ok := h.m[agentID]
	if !ok {
		e = &hookEntry{}
		h.m[agentID] = e
	}
	h.mu.Unlock()
	e.once.Do(func() { e.hooks, e.err = h.hooks.Hooks(ctx, agentID, true) })
	return e.hooks, e.err
}
