// Package latency is an AWS latency profile for the local stack: delays added where the
// local stack is faster than AWS, so that what decides speed on AWS — one HTTPS round
// trip per post, per invoke and per DynamoDB request, and the event source mapping's
// polling — shows up in `terret dev --aws-latency` and `make bench -aws-latency`.
//
// Each figure is the least a request takes: half of it passes before the request is
// sent (its way there: a post reaches the socket that much later), and the rest is
// waited out after the answer unless the request already took that long locally
// (DynamoDB Local on a loaded machine). The figures and their
// sources are in docs/performance.md ("The AWS latency profile"); each is a flag.
package latency

import (
	"context"
	"encoding/json"
	"flag"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsmw "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
)

// Profile is a set of AWS-like latencies. The zero Profile adds nothing.
type Profile struct {
	// Post is the least a PostToConnection (or DeleteConnection) request takes: an
	// HTTPS request from the function to the API's execute-api endpoint.
	Post time.Duration
	// Invoke is the least a Lambda Invoke request takes (for an asynchronous invoke, until
	// Lambda answered 202).
	Invoke time.Duration
	// AsyncStart is how long after an asynchronous Invoke the function starts: Lambda
	// queues the event and a separate process runs it.
	AsyncStart time.Duration
	// DynamoDB is the least a DynamoDB request takes.
	DynamoDB time.Duration
	// PollInterval is how often the event source mapping polls a stream shard.
	PollInterval time.Duration
}

// AWS returns the profile's default figures (docs/performance.md cites each).
func AWS() Profile {
	return Profile{
		Post:         20 * time.Millisecond,
		Invoke:       20 * time.Millisecond,
		AsyncStart:   25 * time.Millisecond,
		DynamoDB:     5 * time.Millisecond,
		PollInterval: 250 * time.Millisecond,
	}
}

// IsZero reports whether p adds nothing.
func (p Profile) IsZero() bool { return p == Profile{} }

// Flags registers -aws-latency (turn the profile on) and one flag per figure on fs, and
// returns a function giving the chosen profile after fs.Parse: the zero Profile without
// -aws-latency, otherwise AWS() with the figures given overriding its defaults.
func Flags(fs *flag.FlagSet) func() Profile {
	def := AWS()
	on := fs.Bool("aws-latency", false, "add AWS-like latencies where the local stack is faster than AWS (see the -aws-* figures)")
	var p Profile
	fs.DurationVar(&p.Post, "aws-post-latency", def.Post, "with -aws-latency: least time of a PostToConnection round trip")
	fs.DurationVar(&p.Invoke, "aws-invoke-latency", def.Invoke, "with -aws-latency: least time of a Lambda Invoke request")
	fs.DurationVar(&p.AsyncStart, "aws-async-start", def.AsyncStart, "with -aws-latency: delay from an asynchronous Invoke to the function running")
	fs.DurationVar(&p.DynamoDB, "aws-dynamodb-latency", def.DynamoDB, "with -aws-latency: least time of a DynamoDB request")
	fs.DurationVar(&p.PollInterval, "aws-poll-interval", def.PollInterval, "with -aws-latency: stream polling interval of the event source mapping")
	return func() Profile {
		if !*on {
			return Profile{}
		}
		return p
	}
}

// Install returns cfg with a middleware that makes every request of a client built from
// it take at least the profile's figure for its service (DynamoDB, the @connections
// API, Lambda). Other services (DynamoDB Streams, polled by the event source mapping,
// whose delay is PollInterval) are left alone.
func (p Profile) Install(cfg aws.Config) aws.Config {
	if p.IsZero() {
		return cfg
	}
	cfg.APIOptions = append(append([]func(*middleware.Stack) error(nil), cfg.APIOptions...), p.register)
	return cfg
}

// floor is the least time a request of service svc takes under p.
func (p Profile) floor(svc string) time.Duration {
	switch svc {
	case "DynamoDB":
		return p.DynamoDB
	case "ApiGatewayManagementApi":
		return p.Post
	case "Lambda":
		return p.Invoke
	}
	return 0
}

func (p Profile) register(st *middleware.Stack) error {
	return st.Initialize.Add(middleware.InitializeMiddlewareFunc("AWSLatencyProfile",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			floor := p.floor(awsmw.GetServiceID(ctx))
			began := time.Now()
			// Half the figure on the way there — a post reaches the socket, a write is
			// visible, that much later — and the rest once the answer is back.
			sleep(ctx, floor/2)
			out, md, err := next.HandleInitialize(ctx, in)
			if rest := floor - time.Since(began); rest > 0 {
				sleep(ctx, rest)
			}
			return out, md, err
		}), middleware.Before)
}

// Delayed returns h with each invocation started AsyncStart late: for the functions
// the Invoke API runs (asynchronous deliver and runner invocations).
func (p Profile) Delayed(h lambda.Handler) lambda.Handler {
	if p.AsyncStart <= 0 {
		return h
	}
	return delayed{h: h, d: p.AsyncStart}
}

type delayed struct {
	h lambda.Handler
	d time.Duration
}

func (d delayed) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	sleep(ctx, d.d)
	return d.h.Invoke(ctx, payload)
}

// String describes p for logs and reports.
func (p Profile) String() string {
	if p.IsZero() {
		return "none"
	}
	b, _ := json.Marshal(map[string]string{
		"post": p.Post.String(), "invoke": p.Invoke.String(), "async_start": p.AsyncStart.String(),
		"dynamodb": p.DynamoDB.String(), "poll_interval": p.PollInterval.String(),
	})
	return string(b)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
