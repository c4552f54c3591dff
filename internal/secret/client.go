package secret

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/terret/terret-ws/internal/awsapi"
)

const (
	// maxBody bounds a response read: a Secrets Manager value is at most 64 KB and an
	// SSM parameter at most 8 KB, so anything larger is not an answer to us.
	maxBody = 1 << 20
	// attempts and backoff follow the SDK's standard retryer, which the SSM and
	// Secrets Manager clients used: three attempts, jittered exponential backoff.
	attempts    = 3
	backoffMin  = 50 * time.Millisecond
	backoffSpan = 150 * time.Millisecond
	// maxMessage bounds the server's error message kept in an error.
	maxMessage = 256
)

// retryable are the error types (beside any 5xx or 429) worth another attempt.
var retryable = map[string]bool{
	"ThrottlingException":      true,
	"ThrottledException":       true,
	"TooManyRequestsException": true,
	"InternalServerError":      true,
}

// client calls one operation of a service speaking the AWS JSON 1.1 protocol
// (Secrets Manager, SSM): a signed POST of a JSON document to the service endpoint,
// the operation named in X-Amz-Target.
type client struct {
	creds    aws.CredentialsProvider
	region   string
	endpoint string // BaseEndpoint, or "" for the regional endpoint
	http     interface {
		Do(*http.Request) (*http.Response, error)
	}
	signer *v4.Signer
}

func newClient(cfg aws.Config) *client {
	c := &client{creds: cfg.Credentials, region: cfg.Region, http: cfg.HTTPClient, signer: v4.NewSigner()}
	if cfg.BaseEndpoint != nil {
		c.endpoint = strings.TrimRight(*cfg.BaseEndpoint, "/")
	}
	if c.http == nil {
		// A redirect would re-send the signed request elsewhere; the SDK does not
		// follow them either.
		c.http = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	return c
}

// url is the endpoint of service: BaseEndpoint if set, else the regional one.
func (c *client) url(service string) string {
	if c.endpoint != "" {
		return c.endpoint + "/"
	}
	return awsapi.Endpoint(service, c.region) + "/"
}

// apiError is an error response of the service.
type apiError struct {
	status        int
	code, message string
}

func (e *apiError) Error() string {
	if e.message == "" {
		return fmt.Sprintf("%s (HTTP %d)", e.code, e.status)
	}
	return fmt.Sprintf("%s (HTTP %d): %s", e.code, e.status, e.message)
}

// isCode reports whether err is the service's error of type code.
func isCode(err error, code string) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.code == code
}

// call performs target (e.g. "AmazonSSM.GetParameter") on service (its signing name,
// also its endpoint prefix) with in as the request document, decoding the response
// into out. It retries throttling, server and transport errors; a service error is an
// *apiError. Errors carry no part of a successful response body.
func (c *client) call(ctx context.Context, service, target string, in, out any) error {
	if c.creds == nil {
		return errors.New("no AWS credentials configured")
	}
	if c.region == "" && c.endpoint == "" {
		return errors.New("no AWS region configured")
	}
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	creds, err := c.creds.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("AWS credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	wait := backoffMin + rand.N(backoffSpan)
	for attempt := 1; ; attempt++ {
		retry, err := c.try(ctx, service, target, body, hash, creds, out)
		if err == nil || !retry {
			return err
		}
		if attempt == attempts {
			return fmt.Errorf("after %d attempts: %w", attempts, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (retrying after: %v)", ctx.Err(), err)
		case <-t.C:
		}
		wait *= 2
	}
}

// try makes one attempt of call, reporting whether a failure is worth another.
func (c *client) try(ctx context.Context, service, target string, body []byte, hash string, creds aws.Credentials, out any) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(service), bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", target)
	// Signed per attempt: the signature covers the time.
	if err := c.signer.SignHTTP(ctx, creds, req, hash, service, c.region, time.Now()); err != nil {
		return false, fmt.Errorf("sign: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return ctx.Err() == nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return ctx.Err() == nil, fmt.Errorf("read response: %w", err)
	}
	if len(data) > maxBody {
		return false, fmt.Errorf("response (HTTP %d) larger than %d bytes", resp.StatusCode, maxBody)
	}
	if resp.StatusCode/100 != 2 {
		code, msg := awsapi.DecodeError(resp, data, maxMessage)
		ae := &apiError{status: resp.StatusCode, code: code, message: msg}
		return ae.status >= 500 || ae.status == http.StatusTooManyRequests || retryable[ae.code], ae
	}
	// The decoder's error would quote the body, which holds the value.
	if err := json.Unmarshal(data, out); err != nil {
		return false, fmt.Errorf("malformed response (HTTP %d, %d bytes)", resp.StatusCode, len(data))
	}
	return false, nil
}
