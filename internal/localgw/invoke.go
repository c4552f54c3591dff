package localgw

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambda/messages"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

// FunctionError is a failed invocation as Lambda reports it: the errorType and
// errorMessage of the Invoke API's error payload.
type FunctionError struct {
	Type    string `json:"errorType"`
	Message string `json:"errorMessage"`
}

func (e *FunctionError) Error() string { return e.Type + ": " + e.Message }

// routeFunction names the function behind a route in ARNs and logs ("$connect" is
// served by "connect").
func routeFunction(route string) string { return strings.TrimPrefix(route, "$") }

func (g *Gateway) functionARN(name string) string {
	return fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", g.cfg.Region, g.cfg.AccountID, name)
}

// invoke runs h once the way Lambda does: the event round-trips through JSON, the
// context carries a LambdaContext with a fresh request id (unless requestID is given,
// as for the retries of one asynchronous event) and a deadline. A panic or a result
// returned after the deadline is reported as the error Lambda would report.
func (g *Gateway) invoke(parent context.Context, name string, h lambda.Handler, timeout time.Duration, event any, lc *lambdacontext.LambdaContext) (out []byte, requestID string, err error) {
	var payload []byte
	switch e := event.(type) {
	case []byte:
		payload = e
	default:
		if payload, err = json.Marshal(event); err != nil {
			return nil, "", fmt.Errorf("localgw: marshal %s event: %w", name, err)
		}
	}
	if lc == nil {
		lc = &lambdacontext.LambdaContext{}
	}
	if lc.AwsRequestID == "" {
		lc.AwsRequestID = newUUID()
	}
	lc.InvokedFunctionArn = g.functionARN(name)
	requestID = lc.AwsRequestID

	ctx, cancel := context.WithTimeout(lambdacontext.NewContext(parent, lc), timeout)
	defer cancel()
	start := time.Now()
	out, err = callHandler(ctx, h, payload)
	elapsed := time.Since(start)
	if err == nil && elapsed > timeout {
		// Lambda would have killed the function; its result is lost.
		out, err = nil, &FunctionError{Type: "Sandbox.Timedout", Message: fmt.Sprintf("RequestId: %s Error: Task timed out after %.2f seconds", requestID, timeout.Seconds())}
	}
	if err != nil {
		err = toFunctionError(err)
	}
	g.log.Debug("invoked", "function", name, "request_id", requestID, "duration_ms", elapsed.Milliseconds(), "ok", err == nil)
	return out, requestID, err
}

func callHandler(ctx context.Context, h lambda.Handler, payload []byte) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &FunctionError{Type: "Runtime.Panic", Message: fmt.Sprint(p)}
		}
	}()
	return h.Invoke(ctx, payload)
}

// toFunctionError names an error the way aws-lambda-go's runtime does: the Go type
// name of the error value.
func toFunctionError(err error) *FunctionError {
	var fe *FunctionError
	if errors.As(err, &fe) {
		return fe
	}
	if ie, ok := err.(messages.InvokeResponse_Error); ok {
		return &FunctionError{Type: ie.Type, Message: ie.Message}
	}
	if ie, ok := err.(*messages.InvokeResponse_Error); ok {
		return &FunctionError{Type: ie.Type, Message: ie.Message}
	}
	t := reflect.TypeOf(err)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return &FunctionError{Type: t.Name(), Message: err.Error()}
}

// unmarshalOutput decodes a handler's result; an empty or null result leaves v zero.
func unmarshalOutput(out []byte, v any) error {
	s := strings.TrimSpace(string(out))
	if s == "" || s == "null" {
		return nil
	}
	return json.Unmarshal(out, v)
}

// serveInvoke is Lambda's Invoke API (POST /2015-03-31/functions/{name}/invocations)
// for Lambda clients (package invoke's, aws-sdk-go-v2's):
//   - X-Amz-Invocation-Type RequestResponse (default) runs the function and answers
//     200 with its output, or 200 with X-Amz-Function-Error: Unhandled and
//     {"errorMessage","errorType"} when it failed;
//   - Event answers 202 at once and runs it in the background, retried up to twice
//     on error after RetryBackoff and 2×RetryBackoff (Lambda's asynchronous retries);
//   - DryRun answers 204.
//
// An unknown function answers 404 ResourceNotFoundException.
func (g *Gateway) serveInvoke(w http.ResponseWriter, r *http.Request, ref string) {
	name := functionName(ref)
	h, ok := g.cfg.Functions[name]
	if !ok {
		drain(r.Body, MaxSyncInvokeBytes)
		writeLambdaError(w, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+g.functionARN(name))
		return
	}
	invType := r.Header.Get("X-Amz-Invocation-Type")
	limit := int64(MaxSyncInvokeBytes)
	switch invType {
	case "", "RequestResponse":
	case "Event":
		limit = MaxAsyncInvokeBytes
	case "DryRun":
		w.WriteHeader(http.StatusNoContent)
		return
	default:
		writeLambdaError(w, http.StatusBadRequest, "InvalidParameterValueException", "unsupported invocation type "+invType)
		return
	}
	payload, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		writeLambdaError(w, http.StatusBadRequest, "InvalidRequestContentException", "reading payload: "+err.Error())
		return
	}
	if int64(len(payload)) > limit {
		writeLambdaError(w, http.StatusRequestEntityTooLarge, "RequestTooLargeException",
			fmt.Sprintf("Request must be smaller than %d bytes for the InvokeFunction operation", limit))
		return
	}
	if len(strings.TrimSpace(string(payload))) == 0 {
		payload = []byte("{}") // Lambda's event for an invoke without payload
	}
	lc := &lambdacontext.LambdaContext{AwsRequestID: newUUID()}
	if cc := r.Header.Get("X-Amz-Client-Context"); cc != "" {
		if raw, err := base64.StdEncoding.DecodeString(cc); err == nil {
			_ = json.Unmarshal(raw, &lc.ClientContext)
		}
	}
	if !g.work.add() {
		writeLambdaError(w, http.StatusServiceUnavailable, "ServiceException", "gateway closed")
		return
	}
	w.Header().Set("X-Amzn-RequestId", lc.AwsRequestID)

	if invType == "Event" {
		go func() {
			defer g.work.done()
			g.invokeAsync(name, h, payload, lc)
		}()
		w.WriteHeader(http.StatusAccepted)
		return
	}

	defer g.work.done()
	out, reqID, err := g.invoke(g.base, name, h, g.timeout(name), payload, lc)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amz-Executed-Version", "$LATEST")
	if err != nil {
		g.log.Warn("function failed", "function", name, "request_id", reqID, "error", err.Error())
		w.Header().Set("X-Amz-Function-Error", "Unhandled")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(err)
		return
	}
	if out == nil {
		out = []byte("null")
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// invokeAsync runs an Event invocation with Lambda's retry policy: two retries, the
// same request id each time. After that, or when the gateway shuts down during a
// backoff, the event is dropped and logged (there is no dead-letter queue here).
func (g *Gateway) invokeAsync(name string, h lambda.Handler, payload []byte, lc *lambdacontext.LambdaContext) {
	const attempts = 3
	for attempt := 1; ; attempt++ {
		attemptLC := *lc
		_, reqID, err := g.invoke(g.base, name, h, g.timeout(name), payload, &attemptLC)
		if err == nil {
			return
		}
		if attempt == attempts {
			g.log.Error("async invocation failed; event dropped", "function", name, "request_id", reqID, "attempts", attempt, "error", err.Error())
			return
		}
		g.log.Warn("async invocation failed; retrying", "function", name, "request_id", reqID, "attempt", attempt, "error", err.Error())
		t := time.NewTimer(time.Duration(attempt) * g.cfg.RetryBackoff)
		select {
		case <-t.C:
		case <-g.stopRetries:
			t.Stop()
			g.log.Error("gateway closing; async event dropped", "function", name, "request_id", reqID, "attempts", attempt)
			return
		}
	}
}

// functionName accepts what the Invoke API accepts as FunctionName: a name, a
// partial ARN (123456789012:function:name) or a full ARN, each optionally qualified
// (name:alias).
func functionName(ref string) string {
	if i := strings.LastIndex(ref, "function:"); i >= 0 {
		ref = ref[i+len("function:"):]
	}
	if i := strings.IndexByte(ref, ':'); i >= 0 {
		ref = ref[:i]
	}
	return ref
}

// writeLambdaError answers like the Lambda service: the error type in the
// X-Amzn-ErrorType header and {"Type":"User","message":...} in the body.
func writeLambdaError(w http.ResponseWriter, status int, errorType, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", errorType)
	w.WriteHeader(status)
	kind := "User"
	if status >= 500 {
		kind = "Service"
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"Type": kind, "message": message})
}
