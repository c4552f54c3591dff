// Package webhook delivers an agent's log events to the receivers its profile names
// ("webhooks": a URL, globs over event types, a secret by reference), signed per the
// Standard Webhooks scheme, at least once.
//
// Delivery has two halves, one code path on AWS and under `terret dev`:
//
//   - HandleStream consumes the log table's stream (filtered by StreamFilter): for each
//     new event it finds the agent's webhooks whose globs match the event's type and
//     enqueues one Job per match. It sends nothing over HTTP, so no receiver can hold
//     up the stream's shard, a turn, a socket, or another agent's events.
//   - HandleQueue consumes the queue (SQS on AWS; MemQueue locally): one attempt per
//     Job, each bounded by Options.AttemptTimeout, the Jobs of a batch in parallel. A
//     failed attempt (a non-2xx answer, a timeout, a refused address) makes the Job
//     visible again after Backoff(attempt) — 5 s, then doubling up to an hour — and
//     after Options.MaxAttempts the queue moves it to its dead-letter queue.
//
// A Job carries the agent id, the receiver's URL and the signed body, never the
// secret: each attempt finds the secret again through Hooks (a webhook removed from
// the profile since is dropped). Secrets never appear in logs, errors or Jobs.
package webhook

import (
	"encoding/json"
	"errors"
	"time"
)

// Errors.
var (
	ErrBadSecret = errors.New("webhook: invalid secret")
	ErrBadURL    = errors.New("webhook: invalid url")
	ErrBadGlob   = errors.New("webhook: invalid event glob")
	// ErrRefused is an address a receiver may not have (SSRF: private, loopback,
	// link-local, …), found when the URL is checked or when it is dialed.
	ErrRefused = errors.New("webhook: address refused")
	// ErrAttempt is a failed attempt: a non-2xx answer, a timeout, a network error.
	ErrAttempt = errors.New("webhook: delivery failed")
)

// Hook is one of an agent's webhooks, ready to sign with: its secret resolved.
type Hook struct {
	URL    string
	Events []string
	// Secret is the HMAC key (the base64-decoded part of "whsec_…"). Never log it.
	Secret []byte
}

// Matches reports whether an event of type typ goes to h.
func (h Hook) Matches(typ string) bool {
	for _, g := range h.Events {
		if Match(g, typ) {
			return true
		}
	}
	return false
}

// Body is what a receiver gets: the event's type, its agent, the log's epoch (the
// id of its seq 0: a receiver that sees it change knows the log was reset) and the
// envelope, byte for byte as a socket gets it. A receiver that missed an event reads
// the gap by seq.
type Body struct {
	Type    string          `json:"type"`
	AgentID string          `json:"agent_id"`
	Epoch   string          `json:"epoch"`
	Event   json.RawMessage `json:"event"`
}

// Job is one event for one receiver: what the queue carries between attempts.
type Job struct {
	AgentID string `json:"agent_id"`
	URL     string `json:"url"`
	// ID is the event's id: the webhook-id header, the same on every attempt, so a
	// receiver can drop a repeat.
	ID   string          `json:"id"`
	Body json.RawMessage `json:"body"`
}

// Defaults of Options.
const (
	DefaultAttemptTimeout = 10 * time.Second
	DefaultFirstRetry     = 5 * time.Second
	DefaultMaxBackoff     = time.Hour
	// DefaultMaxAttempts makes a failing receiver's retries span more than 24 hours
	// with the default backoff (5 s doubling to an hour: see RetrySpan); the
	// template's WebhookQueue redrives after as many receives.
	DefaultMaxAttempts = 36
)

// Backoff is how long a Job waits after its attempt-th failed attempt (1-based):
// first, doubled each time, at most max.
func Backoff(attempt int, first, max time.Duration) time.Duration {
	d := first
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// RetrySpan is the time from a Job's first attempt to its last, with attempts
// attempts and Backoff's schedule (the attempts' own durations not counted).
func RetrySpan(attempts int, first, max time.Duration) time.Duration {
	var total time.Duration
	for i := 1; i < attempts; i++ {
		total += Backoff(i, first, max)
	}
	return total
}

// StreamFilter is the log stream's event filter of the webhook function (template.yaml,
// WebhookFunction's LogStream FilterCriteria; `terret dev` applies the same): new
// events only (the log is append-only: a MODIFY is retention setting expires_at), of
// any type but assistant/chunk — the streamed text, most of a turn's events, which
// webhooks do not carry (a receiver reads the answer from the log). Which agents have
// webhooks is in their profiles, which a filter cannot read: the function reads them.
const StreamFilter = `{"eventName":["INSERT"],"dynamodb":{"NewImage":{"type":{"S":[{"anything-but":["assistant/chunk"]}]}}}}`

// Undelivered are the event types StreamFilter keeps from the function: a glob that
// matches only these matches nothing.
var Undelivered = []string{"assistant/chunk"}
