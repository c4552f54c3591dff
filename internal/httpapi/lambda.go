package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/events"

	"github.com/terret/terret-ws/internal/protocol"
)

// OriginHeader carries the stack's origin secret from CloudFront (template.yaml,
// OriginSecret), as it does to $connect.
const OriginHeader = "X-Terret-Origin"

// RequireOrigin refuses, 403 forbidden, every request whose OriginHeader is not secret,
// so that with an origin secret only CloudFront reaches h — the function URL's own
// address is closed as the raw execute-api URL is. An empty secret checks nothing.
func RequireOrigin(secret string, h http.Handler) http.Handler {
	if secret == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(OriginHeader)), []byte(secret)) != 1 {
			WriteError(w, protocol.CodeForbidden, "not through the stack's front door")
			return
		}
		r.Header.Del(OriginHeader)
		h.ServeHTTP(w, r)
	})
}

// FunctionURL serves h as the handler of a Lambda function URL in RESPONSE_STREAM mode:
// the event becomes an http.Request (its context the invocation's), and what h writes
// streams to the client as it is written — the status and headers once h writes them
// (or its first byte, or its return), then the body through a pipe that Lambda reads.
// A Server-Sent Events stream thus reaches the client event by event, for at most the
// function's timeout (15 minutes at most; the stream ends before, StreamMargin).
func FunctionURL(h http.Handler) func(context.Context, events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error) {
	return func(ctx context.Context, ev events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error) {
		r, err := request(ctx, ev)
		if err != nil {
			return &events.LambdaFunctionURLStreamingResponse{
				StatusCode: http.StatusBadRequest,
				Headers:    map[string]string{"Content-Type": "application/json"},
				Body:       strings.NewReader(string(protocol.Marshal(protocol.NewError(protocol.CodeBadFrame, "malformed request: "+err.Error()))) + "\n"),
			}, nil
		}
		pr, pw := io.Pipe()
		w := &streamWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
		go func() {
			defer func() {
				if p := recover(); p != nil && !w.sent() {
					WriteError(w, protocol.CodeInternal, "internal error")
				}
				w.WriteHeader(http.StatusOK) // no-op once written
				_ = pw.Close()
			}()
			h.ServeHTTP(w, r)
		}()
		<-w.ready
		return &events.LambdaFunctionURLStreamingResponse{StatusCode: w.status, Headers: w.flat, Body: pr}, nil
	}
}

// request is the http.Request of a function URL event.
func request(ctx context.Context, ev events.LambdaFunctionURLRequest) (*http.Request, error) {
	u := &url.URL{Path: ev.RawPath, RawQuery: ev.RawQueryString}
	if p, err := url.PathUnescape(ev.RawPath); err == nil {
		u.Path, u.RawPath = p, ev.RawPath
	}
	var body io.Reader = strings.NewReader(ev.Body)
	if ev.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			return nil, err
		}
		body = strings.NewReader(string(b))
	}
	method := ev.RequestContext.HTTP.Method
	if method == "" {
		method = http.MethodGet
	}
	r, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	for k, v := range ev.Headers {
		r.Header.Set(k, v) // a function URL joins repeated headers with commas
	}
	if len(ev.Cookies) > 0 {
		r.Header.Set("Cookie", strings.Join(ev.Cookies, "; "))
	}
	r.Host = ev.RequestContext.DomainName
	r.RemoteAddr = ev.RequestContext.HTTP.SourceIP
	r.RequestURI = u.RequestURI()
	return r, nil
}

// streamWriter is the http.ResponseWriter of a streamed function URL response.
type streamWriter struct {
	header http.Header
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{} // closed once status and headers are set
	status int
	flat   map[string]string
}

func (w *streamWriter) Header() http.Header { return w.header }

func (w *streamWriter) WriteHeader(status int) {
	w.once.Do(func() {
		w.status = status
		w.flat = make(map[string]string, len(w.header))
		for k, v := range w.header {
			w.flat[k] = strings.Join(v, ", ")
		}
		close(w.ready)
	})
}

func (w *streamWriter) sent() bool {
	select {
	case <-w.ready:
		return true
	default:
		return false
	}
}

// Write streams b; it returns once Lambda has read it (a pipe), so a client that is
// gone stops the handler at its next write.
func (w *streamWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

// Flush does nothing: every Write is handed on as it is made.
func (w *streamWriter) Flush() {}
