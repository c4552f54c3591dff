package invoke

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

const (
	accessKey = "AKIDINVOKETEST"
	secretKey = "invoke-test-secret"
	region    = "eu-west-1"
	apiPrefix = "/2015-03-31/functions/"
)

// request is what the test server received, as a Lambda front end would see it.
type request struct {
	rawPath  string // the escaped path, under the endpoint's prefix
	function string // the path's FunctionName, unescaped
	header   http.Header
	body     []byte
	sigErr   error // nil when the SigV4 signature checks out
}

// reply is one answer of the test server.
type reply struct {
	status int
	header map[string]string
	body   string
}

// server is a Lambda Invoke endpoint under prefix ("" or "/SECRET", as terret dev's
// gateway has), answering the n-th request (from 0) with respond(n, req).
type server struct {
	*httptest.Server
	prefix  string
	respond func(n int, req request) reply

	mu   sync.Mutex
	reqs []request
}

func newServer(t *testing.T, prefix string, respond func(n int, req request) reply) *server {
	t.Helper()
	s := &server{prefix: prefix, respond: respond}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := request{rawPath: r.URL.EscapedPath(), header: r.Header.Clone(), body: body, sigErr: verifySigV4(r, body)}
	rest, ok := strings.CutPrefix(req.rawPath, s.prefix+apiPrefix)
	if esc, ok2 := strings.CutSuffix(rest, "/invocations"); ok && ok2 && r.Method == http.MethodPost && !strings.Contains(esc, "/") {
		req.function, _ = url.PathUnescape(esc)
	}
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	if req.function == "" {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	rep := s.respond(n, req)
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
}

func (s *server) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// config is an aws.Config for endpoint with static credentials (a session token if
// token is set).
func config(endpoint, token string) aws.Config {
	return aws.Config{
		Region:       region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(accessKey, secretKey, token),
	}
}

// noWait makes c's backoff instant, recording each wait.
func noWait(c *Client) *[]time.Duration {
	var waits []time.Duration
	c.sleep = func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		return ctx.Err()
	}
	return &waits
}

// verifySigV4 checks r's Authorization header the way the service does, from the
// specification (docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html),
// without the SDK: the credential scope is today's /REGION/lambda/aws4_request, the
// signed headers cover host, X-Amz-Date and every header Invoke sends, and the
// signature is the HMAC chain over the canonical request.
func verifySigV4(r *http.Request, body []byte) error {
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ")
	if !ok {
		return errors.New("not signed with AWS4-HMAC-SHA256")
	}
	fields := map[string]string{}
	for _, f := range strings.Split(auth, ", ") {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	amzDate := r.Header.Get("X-Amz-Date")
	at, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil {
		return fmt.Errorf("X-Amz-Date %q: %v", amzDate, err)
	}
	if d := time.Since(at); d < -5*time.Minute || d > 5*time.Minute {
		return fmt.Errorf("X-Amz-Date %s is %v away", amzDate, d)
	}
	scope := amzDate[:8] + "/" + region + "/lambda/aws4_request"
	if want := accessKey + "/" + scope; fields["Credential"] != want {
		return fmt.Errorf("credential %q, want %q", fields["Credential"], want)
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	for _, h := range []string{"host", "x-amz-date", "x-amz-invocation-type", "content-type"} {
		if !slices.Contains(signed, h) {
			return fmt.Errorf("signed headers %q lack %s", signed, h)
		}
	}
	if r.Header.Get("X-Amz-Security-Token") != "" && !slices.Contains(signed, "x-amz-security-token") {
		return errors.New("the session token is not signed")
	}
	if !slices.IsSorted(signed) {
		return fmt.Errorf("signed headers %q not sorted", signed)
	}
	sum := sha256.Sum256(body)
	payloadHash := hex.EncodeToString(sum[:])
	if h := r.Header.Get("X-Amz-Content-Sha256"); h != "" && h != payloadHash {
		return fmt.Errorf("X-Amz-Content-Sha256 %s, body hashes to %s", h, payloadHash)
	}
	var canon strings.Builder
	canon.WriteString(r.Method + "\n")
	// Every service but S3 signs the path encoded once more.
	for _, c := range []byte(r.URL.EscapedPath()) {
		if c == '/' || c == '-' || c == '_' || c == '.' || c == '~' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') {
			canon.WriteByte(c)
		} else {
			fmt.Fprintf(&canon, "%%%02X", c)
		}
	}
	canon.WriteString("\n" + r.URL.RawQuery + "\n")
	for _, h := range signed {
		var v string
		switch h {
		case "host":
			v = r.Host
		case "content-length":
			v = strconv.FormatInt(r.ContentLength, 10)
		default:
			vs := r.Header.Values(h)
			for i := range vs {
				vs[i] = strings.Join(strings.Fields(vs[i]), " ")
			}
			v = strings.Join(vs, ",")
		}
		canon.WriteString(h + ":" + v + "\n")
	}
	canon.WriteString("\n" + fields["SignedHeaders"] + "\n" + payloadHash)
	crHash := sha256.Sum256([]byte(canon.String()))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(crHash[:])
	mac := func(key []byte, s string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(s))
		return m.Sum(nil)
	}
	key := mac(mac(mac(mac([]byte("AWS4"+secretKey), amzDate[:8]), region), "lambda"), "aws4_request")
	if want := hex.EncodeToString(mac(key, toSign)); !hmac.Equal([]byte(fields["Signature"]), []byte(want)) {
		return fmt.Errorf("signature %s, want %s over\n%s", fields["Signature"], want, canon.String())
	}
	return nil
}

// TestInvoke: each invocation goes out as Lambda's Invoke API — the FunctionName
// escaped into the path, the headers, the payload as the body, signed — and the
// answer comes back as Output.
func TestInvoke(t *testing.T) {
	t.Parallel()
	const arn = "arn:aws:lambda:eu-west-1:123456789012:function:lookup:prod"
	tests := []struct {
		name     string
		prefix   string // the endpoint's path
		token    string // session token
		in       Input
		reply    reply
		wantPath string // escaped, under the prefix
		wantType string
		want     Output
	}{
		{
			name:     "RequestResponse returns the output",
			in:       Input{FunctionName: "lookup", InvocationType: RequestResponse, Payload: []byte(`{"id":42}`)},
			reply:    reply{status: 200, header: map[string]string{"X-Amz-Executed-Version": "$LATEST"}, body: `{"id":42,"name":"widget"}`},
			wantPath: apiPrefix + "lookup/invocations", wantType: "RequestResponse",
			want: Output{StatusCode: 200, Payload: []byte(`{"id":42,"name":"widget"}`)},
		},
		{
			name:     "no invocation type is RequestResponse",
			in:       Input{FunctionName: "lookup", Payload: []byte(`{}`)},
			reply:    reply{status: 200, body: `null`},
			wantPath: apiPrefix + "lookup/invocations", wantType: "RequestResponse",
			want: Output{StatusCode: 200, Payload: []byte(`null`)},
		},
		{
			name:     "Event is accepted",
			in:       Input{FunctionName: "deliver", InvocationType: Event, Payload: []byte(`{"kind":"pump","agent_id":"a"}`)},
			reply:    reply{status: 202},
			wantPath: apiPrefix + "deliver/invocations", wantType: "Event",
			want: Output{StatusCode: 202, Payload: []byte{}},
		},
		{
			name:     "DryRun",
			in:       Input{FunctionName: "runner", InvocationType: DryRun, Payload: []byte(`{}`)},
			reply:    reply{status: 204},
			wantPath: apiPrefix + "runner/invocations", wantType: "DryRun",
			want: Output{StatusCode: 204, Payload: []byte{}},
		},
		{
			name:     "a qualified ARN is escaped whole into one segment",
			in:       Input{FunctionName: arn, InvocationType: RequestResponse, Payload: []byte(`{}`)},
			reply:    reply{status: 200, body: `{}`},
			wantPath: apiPrefix + "arn%3Aaws%3Alambda%3Aeu-west-1%3A123456789012%3Afunction%3Alookup%3Aprod/invocations", wantType: "RequestResponse",
			want: Output{StatusCode: 200, Payload: []byte(`{}`)},
		},
		{
			name:     "a partial ARN",
			in:       Input{FunctionName: "123456789012:function:lookup", Payload: []byte(`{}`)},
			reply:    reply{status: 200, body: `{}`},
			wantPath: apiPrefix + "123456789012%3Afunction%3Alookup/invocations", wantType: "RequestResponse",
			want: Output{StatusCode: 200, Payload: []byte(`{}`)},
		},
		{
			name:     "the endpoint's path prefixes the API's (terret dev's secret)",
			prefix:   "/0123456789abcdef0123456789abcdef",
			in:       Input{FunctionName: "runner", InvocationType: Event, Payload: []byte(`{"agent_id":"a"}`)},
			reply:    reply{status: 202},
			wantPath: "/0123456789abcdef0123456789abcdef" + apiPrefix + "runner/invocations", wantType: "Event",
			want: Output{StatusCode: 202, Payload: []byte{}},
		},
		{
			name:     "session credentials sign the token",
			token:    "session-token",
			in:       Input{FunctionName: "runner", InvocationType: Event, Payload: []byte(`{}`)},
			reply:    reply{status: 202},
			wantPath: apiPrefix + "runner/invocations", wantType: "Event",
			want: Output{StatusCode: 202, Payload: []byte{}},
		},
		{
			name: "a function error is an output, not an error",
			in:   Input{FunctionName: "fails", InvocationType: RequestResponse, Payload: []byte(`{}`)},
			reply: reply{status: 200, header: map[string]string{"X-Amz-Function-Error": "Unhandled"},
				body: `{"errorMessage":"item 42 not found","errorType":"NotFoundError"}`},
			wantPath: apiPrefix + "fails/invocations", wantType: "RequestResponse",
			want: Output{StatusCode: 200, FunctionError: "Unhandled", Payload: []byte(`{"errorMessage":"item 42 not found","errorType":"NotFoundError"}`)},
		},
		{
			name:     "a handled function error",
			in:       Input{FunctionName: "fails", Payload: []byte(`{}`)},
			reply:    reply{status: 200, header: map[string]string{"X-Amz-Function-Error": "Handled"}, body: `{"errorMessage":"quota"}`},
			wantPath: apiPrefix + "fails/invocations", wantType: "RequestResponse",
			want: Output{StatusCode: 200, FunctionError: "Handled", Payload: []byte(`{"errorMessage":"quota"}`)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, tt.prefix, func(int, request) reply { return tt.reply })
			out, err := NewFromConfig(config(srv.URL+tt.prefix, tt.token)).Invoke(context.Background(), &tt.in)
			if err != nil {
				t.Fatalf("Invoke: %v", err)
			}
			if out.StatusCode != tt.want.StatusCode || out.FunctionError != tt.want.FunctionError || !bytes.Equal(out.Payload, tt.want.Payload) {
				t.Errorf("Output = {%d %q %q}, want {%d %q %q}", out.StatusCode, out.FunctionError, out.Payload, tt.want.StatusCode, tt.want.FunctionError, tt.want.Payload)
			}
			reqs := srv.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.rawPath != tt.wantPath {
				t.Errorf("path %s, want %s", r.rawPath, tt.wantPath)
			}
			if r.function != tt.in.FunctionName {
				t.Errorf("FunctionName from the path %q, want %q", r.function, tt.in.FunctionName)
			}
			if r.sigErr != nil {
				t.Errorf("signature: %v", r.sigErr)
			}
			if got := r.header.Get("X-Amz-Invocation-Type"); got != tt.wantType {
				t.Errorf("X-Amz-Invocation-Type %q, want %q", got, tt.wantType)
			}
			if got := r.header.Get("Content-Type"); got != "application/octet-stream" {
				t.Errorf("Content-Type %q", got)
			}
			if got := r.header.Get("X-Amz-Security-Token"); got != tt.token {
				t.Errorf("X-Amz-Security-Token %q, want %q", got, tt.token)
			}
			if !bytes.Equal(r.body, tt.in.Payload) {
				t.Errorf("body %q, want the payload %q", r.body, tt.in.Payload)
			}
		})
	}
}

// TestRetries: throttling, 5xx and transport failures are tried again, up to the
// attempts configured, with doubling jittered waits; other refusals are not, and every
// refusal is an *Error of Lambda's type, status and message.
func TestRetries(t *testing.T) {
	t.Parallel()
	throttled := reply{status: 429, header: map[string]string{"X-Amzn-ErrorType": "TooManyRequestsException"},
		body: `{"Type":"User","message":"Rate Exceeded.","Reason":"ReservedFunctionConcurrentInvocationLimitExceeded"}`}
	service := reply{status: 500, header: map[string]string{"X-Amzn-ErrorType": "ServiceException"}, body: `{"Type":"Service","message":"internal"}`}
	ok := reply{status: 202}
	seq := func(rs ...reply) func(int, request) reply {
		return func(n int, _ request) reply { return rs[min(n, len(rs)-1)] }
	}
	tests := []struct {
		name        string
		maxAttempts int                // aws.Config.RetryMaxAttempts
		retryer     func() aws.Retryer // aws.Config.Retryer
		respond     func(int, request) reply
		wantTries   int
		wantErr     *Error // nil: success
		wantText    string
	}{
		{name: "throttled every time", respond: seq(throttled), wantTries: 3,
			wantErr:  &Error{Status: 429, Code: "TooManyRequestsException", Message: "Rate Exceeded."},
			wantText: "invoke: TooManyRequestsException (HTTP 429): Rate Exceeded. (after 3 attempts)"},
		{name: "5xx every time", respond: seq(service), wantTries: 3,
			wantErr: &Error{Status: 500, Code: "ServiceException", Message: "internal"}},
		{name: "a 502 without a body, then accepted", respond: seq(reply{status: 502}, ok), wantTries: 2},
		{name: "throttled twice, then accepted", respond: seq(throttled, throttled, ok), wantTries: 3},
		{name: "a throttling type on a 400 (code in the body)",
			respond: seq(reply{status: 400, body: `{"__type":"com.amazon.coral.availability#ThrottlingException","message":"slow down"}`}), wantTries: 3,
			wantErr: &Error{Status: 400, Code: "ThrottlingException", Message: "slow down"}},
		{name: "not found is not retried",
			respond: seq(reply{status: 404, header: map[string]string{"X-Amzn-ErrorType": "ResourceNotFoundException:http://internal.amazon.com/coral/com.amazonaws.awsgirgamesh/"},
				body: `{"Type":"User","Message":"Function not found: arn:aws:lambda:eu-west-1:123456789012:function:nope"}`}),
			wantTries: 1,
			wantErr:   &Error{Status: 404, Code: "ResourceNotFoundException", Message: "Function not found: arn:aws:lambda:eu-west-1:123456789012:function:nope"},
			wantText:  "invoke: ResourceNotFoundException (HTTP 404): Function not found: arn:aws:lambda:eu-west-1:123456789012:function:nope"},
		{name: "a refused payload is not retried",
			respond:   seq(reply{status: 413, header: map[string]string{"X-Amzn-ErrorType": "RequestTooLargeException"}, body: `{"Type":"User","message":"Request must be smaller than 262144 bytes"}`}),
			wantTries: 1, wantErr: &Error{Status: 413, Code: "RequestTooLargeException", Message: "Request must be smaller than 262144 bytes"}},
		{name: "access denied, a body that is not JSON", respond: seq(reply{status: 403, body: `<html>no</html>`}), wantTries: 1,
			wantErr: &Error{Status: 403, Code: "Forbidden"}, wantText: "invoke: Forbidden (HTTP 403)"},
		{name: "RetryMaxAttempts 5", maxAttempts: 5, respond: seq(service), wantTries: 5,
			wantErr: &Error{Status: 500, Code: "ServiceException", Message: "internal"}},
		// The local stacks' Retryer (dynamolocal.Config) allows 10: the SDK's Lambda
		// client took its attempts from there, and so does this one.
		{name: "a Retryer of 10 attempts", retryer: retryerOf(10), respond: seq(service), wantTries: 10,
			wantErr: &Error{Status: 500, Code: "ServiceException", Message: "internal"}},
		{name: "RetryMaxAttempts over the Retryer's", maxAttempts: 2, retryer: retryerOf(10), respond: seq(service), wantTries: 2,
			wantErr: &Error{Status: 500, Code: "ServiceException", Message: "internal"}},
		{name: "RetryMaxAttempts 1", maxAttempts: 1, respond: seq(throttled), wantTries: 1,
			wantErr:  &Error{Status: 429, Code: "TooManyRequestsException", Message: "Rate Exceeded."},
			wantText: "invoke: TooManyRequestsException (HTTP 429): Rate Exceeded."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, "", tt.respond)
			cfg := config(srv.URL, "")
			cfg.RetryMaxAttempts = tt.maxAttempts
			cfg.Retryer = tt.retryer
			c := NewFromConfig(cfg)
			waits := noWait(c)
			_, err := c.Invoke(context.Background(), &Input{FunctionName: "deliver", InvocationType: Event, Payload: []byte(`{"kind":"pump"}`)})
			if n := len(srv.requests()); n != tt.wantTries {
				t.Errorf("%d requests, want %d", n, tt.wantTries)
			}
			for _, r := range srv.requests() {
				if r.sigErr != nil {
					t.Errorf("a retry's signature: %v", r.sigErr)
				}
			}
			if len(*waits) != tt.wantTries-1 {
				t.Errorf("%d waits, want %d", len(*waits), tt.wantTries-1)
			}
			for i, w := range *waits {
				if i == 0 && (w < backoffMin || w >= backoffMin+backoffSpan) {
					t.Errorf("first wait %v, want [%v, %v)", w, backoffMin, backoffMin+backoffSpan)
				}
				if i > 0 && w != min(2*(*waits)[i-1], maxBackoff) {
					t.Errorf("waits %v do not double", *waits)
				}
			}
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Invoke: %v", err)
				}
				return
			}
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want an *Error", err)
			}
			if *ie != *tt.wantErr {
				t.Errorf("Error = %+v, want %+v", *ie, *tt.wantErr)
			}
			if tt.wantText != "" && err.Error() != tt.wantText {
				t.Errorf("text %q, want %q", err, tt.wantText)
			}
		})
	}
}

// TestTransportFailures: a connection that fails is tried again as often as a
// throttling; the error names the endpoint's host but never its path (terret dev's
// secret).
func TestTransportFailures(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef0123456789abcdef"
	dropper, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropper.Close() })
	var mu sync.Mutex
	accepted := 0
	go func() {
		for {
			c, err := dropper.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted++
			mu.Unlock()
			c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	for _, addr := range []string{dropper.Addr().String(), closed.Addr().String()} {
		c := NewFromConfig(config("http://"+addr+"/"+secret, ""))
		waits := noWait(c)
		_, err := c.Invoke(context.Background(), &Input{FunctionName: "runner", InvocationType: Event, Payload: []byte(`{}`)})
		if err == nil {
			t.Fatalf("%s: Invoke succeeded", addr)
		}
		if len(*waits) != attempts-1 {
			t.Errorf("%s: %d waits, want %d (three attempts)", addr, len(*waits), attempts-1)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error %q carries the endpoint's path", addr, err)
		}
		if !strings.HasPrefix(err.Error(), "invoke: ") || !strings.Contains(err.Error(), "http://"+addr+"/[redacted]") {
			t.Errorf("%s: error %q does not say invoke and name the endpoint's host", addr, err)
		}
		var ue *url.Error
		if !errors.As(err, &ue) {
			t.Errorf("%s: error %q is not a *url.Error underneath", addr, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// Each attempt dials at least once (the transport may dial again on its own).
	if accepted < attempts {
		t.Errorf("the dropping server accepted %d connections, want at least %d", accepted, attempts)
	}
}

// TestBounds: a successful response is read up to MaxPayload (Lambda's 6 MB and a
// margin) and refused beyond, unretried; an error response's body is read up to a
// small bound, beyond which only its status and header make the Error.
func TestBounds(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", MaxPayload)
	tests := []struct {
		name    string
		reply   reply
		wantErr string // "" for success
		wantLen int
	}{
		{name: "MaxPayload bytes", reply: reply{status: 200, body: big}, wantLen: MaxPayload},
		{name: "one byte more", reply: reply{status: 200, body: big + "x"}, wantErr: fmt.Sprintf("invoke: response (HTTP 200) larger than %d bytes", MaxPayload)},
		{name: "an error body above its bound",
			reply:   reply{status: 400, header: map[string]string{"X-Amzn-ErrorType": "InvalidRequestContentException"}, body: `{"message":"` + strings.Repeat("y", maxErrorBody) + `"}`},
			wantErr: "invoke: InvalidRequestContentException (HTTP 400)"},
		{name: "a long message is cut",
			reply:   reply{status: 400, header: map[string]string{"X-Amzn-ErrorType": "InvalidParameterValueException"}, body: `{"message":"` + strings.Repeat("é", maxMessage) + `"}`},
			wantErr: "invoke: InvalidParameterValueException (HTTP 400): " + strings.Repeat("é", maxMessage/2) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, "", func(int, request) reply { return tt.reply })
			c := NewFromConfig(config(srv.URL, ""))
			noWait(c)
			out, err := c.Invoke(context.Background(), &Input{FunctionName: "tool", Payload: []byte(`{}`)})
			if n := len(srv.requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
			if tt.wantErr == "" {
				if err != nil || len(out.Payload) != tt.wantLen {
					t.Fatalf("Invoke = %v; want %d bytes", err, tt.wantLen)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("err = %.200v, want %.200s", err, tt.wantErr)
			}
		})
	}
}

// TestContextEndsBackoff: a ctx that ends while the client waits to retry ends the
// call at once with ctx's error, saying what it was retrying.
func TestContextEndsBackoff(t *testing.T) {
	t.Parallel()
	srv := newServer(t, "", func(int, request) reply {
		return reply{status: 503, header: map[string]string{"X-Amzn-ErrorType": "ServiceException"}, body: `{"message":"busy"}`}
	})
	c := NewFromConfig(config(srv.URL, ""))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waited time.Duration
	c.sleep = func(ctx context.Context, d time.Duration) error {
		cancel() // ends ctx during the real wait
		start := time.Now()
		err := sleep(ctx, d)
		waited = time.Since(start)
		return err
	}
	_, err := c.Invoke(ctx, &Input{FunctionName: "runner", InvocationType: Event, Payload: []byte(`{}`)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if want := "invoke: context canceled (waiting to retry after: ServiceException (HTTP 503): busy)"; err.Error() != want {
		t.Errorf("text %q, want %q", err, want)
	}
	if n := len(srv.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	if waited >= backoffMin {
		t.Errorf("the wait took %v after ctx ended", waited)
	}

	// A deadline that passes during a request is not retried either: the server
	// answers only once the call has returned.
	release := make(chan struct{})
	slow := newServer(t, "", func(_ int, req request) reply {
		<-release
		return reply{status: 200, body: `{}`}
	})
	c = NewFromConfig(config(slow.URL, ""))
	waits := noWait(c)
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = c.Invoke(ctx, &Input{FunctionName: "tool", Payload: []byte(`{}`)})
	close(release)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if len(*waits) != 0 {
		t.Errorf("retried after the deadline: waits %v", *waits)
	}
}

// TestRefusedBeforeSending: what the client cannot send fails without a request.
func TestRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	srv := newServer(t, "", func(int, request) reply { return reply{status: 202} })
	noCreds := config(srv.URL, "")
	noCreds.Credentials = nil
	tests := []struct {
		name string
		cfg  aws.Config
		in   *Input
		want string
	}{
		{"no function name", config(srv.URL, ""), &Input{Payload: []byte(`{}`)}, "invoke: no function name"},
		{"no input", config(srv.URL, ""), nil, "invoke: no function name"},
		{"no credentials", noCreds, &Input{FunctionName: "f"}, "invoke: no AWS credentials configured"},
		{"no region nor endpoint", aws.Config{Credentials: noCreds.Credentials}, &Input{FunctionName: "f"}, "invoke: no AWS region or endpoint configured"},
	}
	for _, tt := range tests {
		if _, err := NewFromConfig(tt.cfg).Invoke(context.Background(), tt.in); err == nil || err.Error() != tt.want {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
	if n := len(srv.requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// TestAnonymousUnsigned: anonymous credentials send the request unsigned (as the SDK
// does).
func TestAnonymousUnsigned(t *testing.T) {
	t.Parallel()
	srv := newServer(t, "", func(int, request) reply { return reply{status: 202} })
	cfg := config(srv.URL, "")
	cfg.Credentials = aws.AnonymousCredentials{}
	if _, err := NewFromConfig(cfg).Invoke(context.Background(), &Input{FunctionName: "f", InvocationType: Event}); err != nil {
		t.Fatal(err)
	}
	if r := srv.requests(); len(r) != 1 || r[0].header.Get("Authorization") != "" {
		t.Errorf("requests %+v, want one unsigned", r)
	}
}

// TestEndpoint: the regional endpoint, China's domain, and BaseEndpoint (a trailing
// slash dropped) when set.
func TestEndpoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  aws.Config
		want string
	}{
		{aws.Config{Region: "eu-west-1"}, "https://lambda.eu-west-1.amazonaws.com"},
		{aws.Config{Region: "us-gov-west-1"}, "https://lambda.us-gov-west-1.amazonaws.com"},
		{aws.Config{Region: "cn-north-1"}, "https://lambda.cn-north-1.amazonaws.com.cn"},
		{aws.Config{Region: "eu-west-1", BaseEndpoint: aws.String("http://127.0.0.1:4566/")}, "http://127.0.0.1:4566"},
		{aws.Config{Region: "eu-west-1", BaseEndpoint: aws.String("http://127.0.0.1:9/abc")}, "http://127.0.0.1:9/abc"},
		{aws.Config{BaseEndpoint: aws.String("http://127.0.0.1:9")}, "http://127.0.0.1:9"},
	} {
		if got := NewFromConfig(c.cfg).endpoint; got != c.want {
			t.Errorf("region %q base %q: endpoint %q, want %q", c.cfg.Region, aws.ToString(c.cfg.BaseEndpoint), got, c.want)
		}
	}
}

// TestHTTPClient: aws.Config's HTTP client carries the requests when set.
func TestHTTPClient(t *testing.T) {
	t.Parallel()
	srv := newServer(t, "", func(int, request) reply { return reply{status: 202} })
	cfg := config(srv.URL, "")
	rt := &countingTransport{}
	cfg.HTTPClient = &http.Client{Transport: rt}
	if _, err := NewFromConfig(cfg).Invoke(context.Background(), &Input{FunctionName: "f", InvocationType: Event}); err != nil {
		t.Fatal(err)
	}
	if rt.n != 1 {
		t.Errorf("the configured client carried %d requests, want 1", rt.n)
	}
}

type countingTransport struct{ n int }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n++
	return http.DefaultTransport.RoundTrip(r)
}

// retryerOf is an aws.Config.Retryer of n attempts, as the local stacks set one.
func retryerOf(n int) func() aws.Retryer {
	return func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts = n })
	}
}
