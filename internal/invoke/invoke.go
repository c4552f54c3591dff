// Package invoke calls Lambda's Invoke API: the asynchronous kicks of the deliver and
// runner functions (InvocationType Event), the lambda tools' synchronous calls
// (RequestResponse) and the local timers' fires.
//
// Contract: Client.Invoke sends one POST /2015-03-31/functions/{FunctionName}/invocations,
// signed with SigV4 (service "lambda") by the SDK's signer, to the regional endpoint
// (https://lambda.REGION.amazonaws.com, amazonaws.com.cn in China) or to the
// aws.Config's BaseEndpoint — a local stack's (terret dev's gateway, the emulator, the
// bench's stubs), whose path, if any, prefixes the API's. It answers the function's
// output for RequestResponse, 202 and no payload for Event; a function that failed is
// an Output with FunctionError set (the error document is the payload), not an error.
// The service refusing the call is an *Error (Lambda's error type, HTTP status and
// message); a throttling, a 5xx or a transport failure is tried again, three attempts
// in all (as many as the aws.Config's Retryer or RetryMaxAttempts allows when set) with
// jittered backoff from 50–200 ms, doubling up to 20 s, cut short by ctx. Error texts start "invoke: " and never quote the
// endpoint's path (terret dev's carries a secret) nor a response body.
//
// aws.Config.APIOptions' Initialize-step middlewares run around each call, once (outside
// the retries), as they would in the SDK's Lambda client, with the service ID "Lambda"
// and the operation name "Invoke" in ctx and the *Input as the parameters: terret dev's
// latency profile, the bench's meter and the tests' request counters see Invoke. The
// later steps' middlewares act on the SDK's HTTP request, which this client does not
// build; they do not run.
//
// Cost: one signed HTTPS request per call (more only when retried), and no package
// init: the package speaks the REST API itself rather than through the SDK's Lambda
// client, which cost every function that linked it about 0.7 MB of binary and 4 ms of
// init at each cold start. The signer is linked already (DynamoDB's).
package invoke

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/smithy-go/encoding/httpbinding"
	"github.com/aws/smithy-go/middleware"

	"github.com/terret/terret-ws/internal/awsapi"
)

// InvocationType is how Lambda runs the function (the X-Amz-Invocation-Type header).
type InvocationType string

// Invocation types.
const (
	// RequestResponse runs the function and answers its output (200); the default.
	RequestResponse InvocationType = "RequestResponse"
	// Event queues the event and answers 202 at once; Lambda retries a failed run.
	Event InvocationType = "Event"
	// DryRun checks the caller may invoke the function (204) and runs nothing.
	DryRun InvocationType = "DryRun"
)

// Input is one invocation.
type Input struct {
	// FunctionName is a function's name, ARN or partial ARN
	// (123456789012:function:name), optionally qualified with a version or alias
	// (name:alias).
	FunctionName   string
	InvocationType InvocationType // "" is RequestResponse
	Payload        []byte         // the event (JSON); empty is {}
}

// Output is Lambda's answer to an invocation it accepted.
type Output struct {
	StatusCode int // 200 (RequestResponse), 202 (Event), 204 (DryRun)
	// FunctionError is "Unhandled" or "Handled" when the function failed; then Payload
	// is the error document ({"errorMessage", "errorType", ...}).
	FunctionError string
	Payload       []byte // RequestResponse: the function's output
}

// API is the Invoke operation; *Client is one. Users declare the same method set
// where they use it, and fakes implement it.
type API interface {
	Invoke(ctx context.Context, in *Input) (*Output, error)
}

var _ API = (*Client)(nil)

// Error is Lambda refusing or failing an invocation: a response other than 2xx.
type Error struct {
	Status  int    // HTTP status
	Code    string // Lambda's error type: ResourceNotFoundException, TooManyRequestsException, ...
	Message string // the service's message, bounded
}

func (e *Error) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("invoke: %s (HTTP %d)", e.Code, e.Status)
	}
	return fmt.Sprintf("invoke: %s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

const (
	// MaxPayload bounds a successful response read: Lambda's synchronous response
	// payload is at most 6 MB; the margin covers nothing legitimate but costs nothing.
	MaxPayload = 6<<20 + 256<<10
	// maxErrorBody bounds an error response read: a JSON document of a type and a
	// message.
	maxErrorBody = 64 << 10
	// maxMessage bounds the service's message kept in an Error.
	maxMessage = 1024
	// attempts and backoff follow the SDK's standard retryer, which the SDK's Lambda
	// client used: three attempts, jittered exponential backoff.
	attempts    = 3
	backoffMin  = 50 * time.Millisecond
	backoffSpan = 150 * time.Millisecond
	// maxBackoff caps a wait, as the SDK's standard retryer does (retry.DefaultMaxBackoff).
	maxBackoff = 20 * time.Second
	// httpTimeout bounds a request through the client's own http.Client (when
	// aws.Config has none): longer than any function may run (15 minutes), so that
	// only ctx ends a RequestResponse call that is still running.
	httpTimeout = 16 * time.Minute
)

// retryable are the error types (beside any 5xx or 429) worth another attempt: the
// SDK's standard retryer's throttling and transient codes that Lambda answers.
var retryable = map[string]bool{
	"TooManyRequestsException": true,
	"ThrottlingException":      true,
	"ThrottledException":       true,
	"RequestLimitExceeded":     true,
	"EC2ThrottledException":    true,
	"RequestTimeout":           true,
	"RequestTimeoutException":  true,
	"PriorRequestNotComplete":  true,
}

// Client calls Lambda's Invoke API. It is safe for concurrent use.
type Client struct {
	creds    aws.CredentialsProvider
	region   string
	endpoint string // without a trailing slash
	attempts int
	options  []func(*middleware.Stack) error // aws.Config.APIOptions
	http     interface {
		Do(*http.Request) (*http.Response, error)
	}
	signer *v4.Signer
	sleep  func(ctx context.Context, d time.Duration) error // tests shorten it
}

// NewFromConfig returns a Client using cfg's credentials, region, HTTP client,
// BaseEndpoint (when set; else Lambda's regional endpoint) and APIOptions (their
// Initialize step). Its attempts are the SDK client's: cfg.Retryer's MaxAttempts when
// cfg has a Retryer (the local stacks' allow 10, so that a busy moment of one
// machine does not fail a kick), then cfg.RetryMaxAttempts when above 0, else three;
// which failures are tried again and the backoff are this package's. It makes no
// request until Invoke.
func NewFromConfig(cfg aws.Config) *Client {
	c := &Client{creds: cfg.Credentials, region: cfg.Region, attempts: attempts, http: cfg.HTTPClient, signer: v4.NewSigner(), sleep: sleep,
		options: cfg.APIOptions}
	if cfg.Retryer != nil {
		if r := cfg.Retryer(); r != nil && r.MaxAttempts() > 0 {
			c.attempts = r.MaxAttempts()
		}
	}
	if cfg.RetryMaxAttempts > 0 {
		c.attempts = cfg.RetryMaxAttempts
	}
	switch {
	case cfg.BaseEndpoint != nil && *cfg.BaseEndpoint != "":
		c.endpoint = strings.TrimRight(*cfg.BaseEndpoint, "/")
	case cfg.Region != "":
		c.endpoint = awsapi.Endpoint("lambda", cfg.Region)
	}
	if c.http == nil {
		// Every call goes to one host: keep as many idle connections to it as calls
		// run at once (net/http keeps 2 per host by default, and a burst of kicks would
		// open a new TLS connection each). A redirect would re-send the signed request
		// elsewhere; the SDK does not follow them either.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 100, 100
		c.http = &http.Client{Timeout: httpTimeout, Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	return c
}

// Invoke invokes in.FunctionName with in.Payload. A function that ran and failed is
// an Output with FunctionError set, not an error. Errors: an *Error when Lambda answers
// other than 2xx (after the retries a throttling or a 5xx gets), ctx's error when it
// ends the call, or a transport failure; each text starts "invoke: ".
func (c *Client) Invoke(ctx context.Context, in *Input) (*Output, error) {
	if len(c.options) == 0 {
		return c.invoke(ctx, in)
	}
	stack := middleware.NewStack("Invoke", func() any { return nil })
	for _, fn := range c.options {
		if err := fn(stack); err != nil {
			return nil, fmt.Errorf("invoke: API options: %w", err)
		}
	}
	ctx = middleware.ClearStackValues(ctx)
	ctx = middleware.WithServiceID(ctx, "Lambda")
	ctx = middleware.WithOperationName(ctx, "Invoke")
	ctx = awsmiddleware.SetServiceID(ctx, "Lambda")
	ctx = awsmiddleware.SetOperationName(ctx, "Invoke")
	if c.region != "" {
		ctx = awsmiddleware.SetRegion(ctx, c.region)
	}
	res, _, err := stack.Initialize.HandleMiddleware(ctx, in, middleware.HandlerFunc(func(ctx context.Context, params any) (any, middleware.Metadata, error) {
		in, ok := params.(*Input)
		if !ok {
			return nil, middleware.Metadata{}, fmt.Errorf("invoke: an API option replaced the input with a %T", params)
		}
		out, err := c.invoke(ctx, in)
		return out, middleware.Metadata{}, err
	}))
	out, _ := res.(*Output)
	return out, err
}

// invoke is Invoke without the APIOptions.
func (c *Client) invoke(ctx context.Context, in *Input) (*Output, error) {
	if in == nil || in.FunctionName == "" {
		return nil, errors.New("invoke: no function name")
	}
	if c.endpoint == "" {
		return nil, errors.New("invoke: no AWS region or endpoint configured")
	}
	if c.creds == nil {
		return nil, errors.New("invoke: no AWS credentials configured")
	}
	invType := in.InvocationType
	if invType == "" {
		invType = RequestResponse
	}
	target := c.endpoint + "/2015-03-31/functions/" + httpbinding.EscapePath(in.FunctionName, true) + "/invocations"
	sum := sha256.Sum256(in.Payload)
	hash := hex.EncodeToString(sum[:])
	wait := backoffMin + rand.N(backoffSpan)
	for attempt := 1; ; attempt++ {
		out, retry, err := c.try(ctx, target, invType, in.Payload, hash)
		if err == nil || !retry {
			return out, err
		}
		if attempt >= c.attempts {
			if attempt == 1 {
				return nil, err
			}
			return nil, fmt.Errorf("%w (after %d attempts)", err, attempt)
		}
		if serr := c.sleep(ctx, wait); serr != nil {
			return nil, fmt.Errorf("invoke: %w (waiting to retry after: %s)", serr, strings.TrimPrefix(err.Error(), "invoke: "))
		}
		wait = min(2*wait, maxBackoff)
	}
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// try makes one attempt, reporting whether a failure is worth another.
func (c *Client) try(ctx context.Context, target string, invType InvocationType, payload []byte, hash string) (out *Output, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(payload))
	if err != nil {
		return nil, false, fmt.Errorf("invoke: %w", redact(err))
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Amz-Invocation-Type", string(invType))
	if _, anonymous := c.creds.(aws.AnonymousCredentials); !anonymous {
		// Signed per attempt: the signature covers the time, and the credentials
		// (cached by the provider) may have been renewed.
		creds, err := c.creds.Retrieve(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("invoke: AWS credentials: %w", err)
		}
		if err := c.signer.SignHTTP(ctx, creds, req, hash, "lambda", c.region, time.Now()); err != nil {
			return nil, false, fmt.Errorf("invoke: sign: %w", err)
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, ctx.Err() == nil, fmt.Errorf("invoke: %w", redact(err))
	}
	defer resp.Body.Close()
	ok := resp.StatusCode/100 == 2
	limit := int64(MaxPayload)
	if !ok {
		limit = maxErrorBody
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, ctx.Err() == nil, fmt.Errorf("invoke: read response (HTTP %d): %w", resp.StatusCode, redact(err))
	}
	if !ok {
		if int64(len(data)) > limit {
			data = nil // cut mid-document: the status and header still say what it is
		}
		code, msg := awsapi.DecodeError(resp, data, maxMessage)
		e := &Error{Status: resp.StatusCode, Code: code, Message: msg}
		return nil, e.Status >= 500 || e.Status == http.StatusTooManyRequests || retryable[e.Code], e
	}
	if int64(len(data)) > limit {
		return nil, false, fmt.Errorf("invoke: response (HTTP %d) larger than %d bytes", resp.StatusCode, limit)
	}
	return &Output{StatusCode: resp.StatusCode, FunctionError: resp.Header.Get("X-Amz-Function-Error"), Payload: data}, false, nil
}

// redact strips the request's URL of its path, where terret dev's internal endpoint
// carries its secret, keeping the scheme and host: a transport error quotes the URL.
func redact(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	where := "[redacted URL]"
	if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
		where = u.Scheme + "://" + u.Host + "/[redacted]"
	}
	return &url.Error{Op: ue.Op, URL: where, Err: ue.Err}
}
