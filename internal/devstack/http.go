package devstack

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/terret/terret-ws/internal/httpapi"
	"github.com/terret/terret-ws/internal/protocol"
)

// lateHandler serves the agent paths over HTTP once Start has built them: the gateway
// listens before the handlers exist, as its routes do (localgw.Deferred).
type lateHandler struct{ h atomic.Pointer[http.Handler] }

// Bind makes h serve every request from now on.
func (l *lateHandler) Bind(h http.Handler) { l.h.Store(&h) }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := l.h.Load()
	if h == nil {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"type":"error","code":"internal","message":"terret dev is still starting"}` + "\n"))
		return
	}
	(*h).ServeHTTP(w, r)
}

// ringing rings bell for the agent of each record of a log stream batch, then hands
// the batch on to h (deliver): a reader of the log over HTTP waiting in this process
// reads at once instead of at its next look (httpapi.Bell).
func ringing(bell *httpapi.Bell, h lambda.Handler) lambda.Handler {
	return handlerFunc(func(ctx context.Context, payload []byte) ([]byte, error) {
		var batch events.DynamoDBEvent
		if err := json.Unmarshal(payload, &batch); err == nil {
			rung := map[string]bool{}
			for _, rec := range batch.Records {
				if id := rec.Change.Keys["session_id"]; id.DataType() == events.DataTypeString && !rung[id.String()] {
					rung[id.String()] = true
					bell.Ring(id.String())
				}
			}
		}
		return h.Invoke(ctx, payload)
	})
}

// emulatedHTTP serves the agent paths through the http function's built bootstrap under
// the Lambda Runtime Interface Emulator (`terret dev --lambda-emulator`): each request
// becomes the function URL event Lambda would send, and the answer is read back from
// the streaming response's bytes (its JSON prelude, eight zero bytes, the body). The
// emulator hands a response over only once the handler returns, which a Server-Sent
// Events stream does only at its deadline: those requests are served in process
// (inProcess) instead, as without the flag.
type emulatedHTTP struct {
	fn        lambda.Handler
	inProcess http.Handler
}

func (e emulatedHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if httpapi.AcceptsEventStream(r.Header.Get("Accept")) {
		e.inProcess.ServeHTTP(w, r)
		return
	}
	// Lambda's bound on an invocation's request, 6 MB
	// (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html): each
	// path's own, smaller bound answers first, with its own message, as on AWS.
	body, err := httpapi.ReadBody(r, 6<<20)
	if err != nil {
		httpapi.WriteError(w, protocol.CodeBadFrame, "body over Lambda's 6 MB request bound")
		return
	}
	ev := events.LambdaFunctionURLRequest{
		Version:         "2.0",
		RawPath:         r.URL.EscapedPath(),
		RawQueryString:  r.URL.RawQuery,
		Headers:         map[string]string{},
		Body:            base64.StdEncoding.EncodeToString(body),
		IsBase64Encoded: true,
	}
	for k, v := range r.Header {
		ev.Headers[strings.ToLower(k)] = strings.Join(v, ",")
	}
	ev.RequestContext.HTTP.Method = r.Method
	ev.RequestContext.HTTP.Path = r.URL.Path
	ev.RequestContext.DomainName = r.Host
	ev.RequestContext.HTTP.SourceIP, _, _ = strings.Cut(r.RemoteAddr, ":")
	payload, _ := json.Marshal(ev)
	out, err := e.fn.Invoke(r.Context(), payload)
	prelude, rest, ok := bytes.Cut(out, make([]byte, 8))
	var head struct {
		StatusCode int               `json:"statusCode"`
		Headers    map[string]string `json:"headers"`
	}
	if err != nil || !ok || json.Unmarshal(prelude, &head) != nil || head.StatusCode == 0 {
		httpapi.WriteError(w, protocol.CodeInternal, "the http function failed")
		return
	}
	for k, v := range head.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(head.StatusCode)
	_, _ = w.Write(rest)
}
