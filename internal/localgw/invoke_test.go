package localgw_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/terret/terret-ws/internal/localgw"
)

type echoEvent struct {
	Text string `json:"text"`
}

func TestInvokeRequestResponse(t *testing.T) {
	functions := map[string]lambda.Handler{
		"echo": lambda.NewHandler(func(ctx context.Context, ev echoEvent) (echoEvent, error) {
			lc, ok := lambdacontext.FromContext(ctx)
			if !ok || !strings.HasSuffix(lc.InvokedFunctionArn, ":function:echo") {
				return echoEvent{}, errors.New("no lambda context")
			}
			return echoEvent{Text: "echo:" + ev.Text}, nil
		}),
		"fail": lambda.NewHandler(func(ev echoEvent) error { return errors.New("it broke") }),
	}
	g := startGateway(t, localgw.Config{Functions: functions}, nil)
	client := lambdaClient(g)

	tests := []struct {
		name        string
		function    string
		wantPayload string
		wantFnError string
	}{
		{name: "by name", function: "echo", wantPayload: `{"text":"echo:hi"}`},
		{name: "by ARN", function: "arn:aws:lambda:us-east-1:123456789012:function:echo", wantPayload: `{"text":"echo:hi"}`},
		{name: "by qualified name", function: "echo:$LATEST", wantPayload: `{"text":"echo:hi"}`},
		{name: "handler error", function: "fail", wantFnError: "Unhandled", wantPayload: `{"errorType":"errorString","errorMessage":"it broke"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := client.Invoke(ctxT(t), &awslambda.InvokeInput{FunctionName: aws.String(tt.function), Payload: []byte(`{"text":"hi"}`)})
			if err != nil {
				t.Fatalf("Invoke: %v", err)
			}
			if out.StatusCode != 200 || aws.ToString(out.FunctionError) != tt.wantFnError {
				t.Fatalf("status %d, function error %q; want 200, %q", out.StatusCode, aws.ToString(out.FunctionError), tt.wantFnError)
			}
			assertJSONEqual(t, out.Payload, tt.wantPayload)
		})
	}
}

func TestInvokeUnknownFunction(t *testing.T) {
	g := startGateway(t, localgw.Config{}, nil)
	_, err := lambdaClient(g).Invoke(ctxT(t), &awslambda.InvokeInput{FunctionName: aws.String("missing")})
	var notFound *lambdatypes.ResourceNotFoundException
	if !errors.As(err, &notFound) {
		t.Fatalf("error %v (%T), want ResourceNotFoundException", err, err)
	}
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusNotFound {
		t.Fatalf("error %v, want HTTP 404", err)
	}
}

func TestInvokeEvent(t *testing.T) {
	t.Run("answers 202 before the handler finishes", func(t *testing.T) {
		release := make(chan struct{})
		finished := make(chan string, 1)
		functions := map[string]lambda.Handler{
			"slow": lambda.NewHandler(func(ctx context.Context, ev echoEvent) error {
				<-release
				finished <- ev.Text
				return nil
			}),
		}
		g := startGateway(t, localgw.Config{Functions: functions}, nil)
		out, err := lambdaClient(g).Invoke(ctxT(t), &awslambda.InvokeInput{
			FunctionName: aws.String("slow"), InvocationType: lambdatypes.InvocationTypeEvent, Payload: []byte(`{"text":"bg"}`),
		})
		if err != nil || out.StatusCode != http.StatusAccepted {
			t.Fatalf("Invoke Event: %v, status %v; want 202", err, out)
		}
		close(release)
		select {
		case got := <-finished:
			if got != "bg" {
				t.Fatalf("handler got %q", got)
			}
		case <-time.After(waitTimeout):
			t.Fatal("background invocation never ran")
		}
	})

	t.Run("a failing event is tried 3 times with one request id", func(t *testing.T) {
		var mu sync.Mutex
		var ids []string
		functions := map[string]lambda.Handler{
			"flaky": lambda.NewHandler(func(ctx context.Context, ev echoEvent) error {
				lc, _ := lambdacontext.FromContext(ctx)
				mu.Lock()
				ids = append(ids, lc.AwsRequestID)
				mu.Unlock()
				return errors.New("always fails")
			}),
		}
		g := startGateway(t, localgw.Config{Functions: functions, RetryBackoff: 10 * time.Millisecond}, nil)
		if _, err := lambdaClient(g).Invoke(ctxT(t), &awslambda.InvokeInput{
			FunctionName: aws.String("flaky"), InvocationType: lambdatypes.InvocationTypeEvent, Payload: []byte(`{}`),
		}); err != nil {
			t.Fatalf("Invoke Event: %v", err)
		}
		// Close waits for the background invocation, retries included.
		if err := g.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(ids) != 3 {
			t.Fatalf("handler ran %d times, want 3 (1 + 2 retries)", len(ids))
		}
		if ids[0] == "" || ids[1] != ids[0] || ids[2] != ids[0] {
			t.Fatalf("request ids %v, want one id for all attempts", ids)
		}
	})

	t.Run("Close waits for an in-flight event", func(t *testing.T) {
		var done atomic.Bool
		functions := map[string]lambda.Handler{
			"work": lambda.NewHandler(func(ctx context.Context, ev echoEvent) error {
				time.Sleep(200 * time.Millisecond)
				done.Store(true)
				return nil
			}),
		}
		g := startGateway(t, localgw.Config{Functions: functions}, nil)
		if _, err := lambdaClient(g).Invoke(ctxT(t), &awslambda.InvokeInput{
			FunctionName: aws.String("work"), InvocationType: lambdatypes.InvocationTypeEvent, Payload: []byte(`{}`),
		}); err != nil {
			t.Fatalf("Invoke Event: %v", err)
		}
		if err := g.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if !done.Load() {
			t.Fatal("Close returned before the background invocation finished")
		}
	})
}

func TestInvokeTimeoutIsAFunctionError(t *testing.T) {
	functions := map[string]lambda.Handler{
		"sleepy": lambda.NewHandler(func(ctx context.Context) (string, error) {
			<-ctx.Done() // a well-behaved handler stops at its deadline
			return "too late", nil
		}),
	}
	g := startGateway(t, localgw.Config{Functions: functions, Timeouts: map[string]time.Duration{"sleepy": 50 * time.Millisecond}}, nil)
	out, err := lambdaClient(g).Invoke(ctxT(t), &awslambda.InvokeInput{FunctionName: aws.String("sleepy")})
	if err != nil {
		t.Fatalf("Invoke: %v", err)
	}
	var fe localgw.FunctionError
	if err := json.Unmarshal(out.Payload, &fe); err != nil || aws.ToString(out.FunctionError) != "Unhandled" || fe.Type != "Sandbox.Timedout" {
		t.Fatalf("function error %q payload %s, want Unhandled Sandbox.Timedout", aws.ToString(out.FunctionError), out.Payload)
	}
}

func assertJSONEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("payload %s is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Fatalf("payload %s, want %s", gb, wb)
	}
}
