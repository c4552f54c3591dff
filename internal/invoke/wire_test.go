package invoke

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/terret/terret-ws/internal/latency"
	"github.com/terret/terret-ws/internal/localgw"
)

// The SDK's Lambda client is used here only as an independent speaker of the Invoke
// API: what it sends and how it reads Lambda's errors is what this client must match.

func sdkClient(cfg aws.Config) *awslambda.Client {
	cfg.RetryMaxAttempts = 1
	return awslambda.NewFromConfig(cfg)
}

// TestSameRequestAsTheSDK: for the same invocation both clients send the same path
// (the FunctionName escaped the same way), invocation type, content type and body.
func TestSameRequestAsTheSDK(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"runner",
		"arn:aws:lambda:eu-west-1:123456789012:function:lookup:prod",
		"123456789012:function:lookup",
		"lookup:$LATEST",
		"we ird+name~x_y.z",
	} {
		for _, typ := range []InvocationType{Event, RequestResponse} {
			srv := newServer(t, "/secret", func(int, request) reply { return reply{status: 200, body: `{}`} })
			cfg := config(srv.URL+"/secret", "token")
			payload := []byte(`{"agent_id":"a"}`)
			if _, err := NewFromConfig(cfg).Invoke(context.Background(), &Input{FunctionName: name, InvocationType: typ, Payload: payload}); err != nil {
				t.Fatalf("%s: Invoke: %v", name, err)
			}
			if _, err := sdkClient(cfg).Invoke(context.Background(), &awslambda.InvokeInput{FunctionName: aws.String(name), InvocationType: lambdatypes.InvocationType(typ), Payload: payload}); err != nil {
				t.Fatalf("%s: the SDK's Invoke: %v", name, err)
			}
			reqs := srv.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests", len(reqs))
			}
			ours, sdk := reqs[0], reqs[1]
			if ours.rawPath != sdk.rawPath || ours.function != name {
				t.Errorf("%s: path %s (FunctionName %q), the SDK's %s", name, ours.rawPath, ours.function, sdk.rawPath)
			}
			for _, h := range []string{"X-Amz-Invocation-Type", "Content-Type", "X-Amz-Security-Token"} {
				if ours.header.Get(h) != sdk.header.Get(h) {
					t.Errorf("%s: %s %q, the SDK's %q", name, h, ours.header.Get(h), sdk.header.Get(h))
				}
			}
			if string(ours.body) != string(sdk.body) {
				t.Errorf("%s: body %q, the SDK's %q", name, ours.body, sdk.body)
			}
			for i, r := range reqs {
				if r.sigErr != nil {
					t.Errorf("%s: request %d: %v", name, i, r.sigErr)
				}
			}
		}
	}
}

// TestSameErrorsAsTheSDK: an error response reads as the same type and message the
// SDK's deserializer finds.
func TestSameErrorsAsTheSDK(t *testing.T) {
	t.Parallel()
	for _, rep := range []reply{
		{status: 404, header: map[string]string{"X-Amzn-ErrorType": "ResourceNotFoundException"}, body: `{"Type":"User","message":"Function not found: x"}`},
		{status: 404, header: map[string]string{"X-Amzn-ErrorType": "ResourceNotFoundException:http://internal.amazon.com/coral/"}, body: `{"Type":"User","Message":"Function not found"}`},
		{status: 400, body: `{"__type":"aws.lambda#InvalidRequestContentException","message":"Could not parse request body into json"}`},
		{status: 400, body: `{"code":"InvalidParameterValueException","message":"bad"}`},
		{status: 403, header: map[string]string{"X-Amzn-ErrorType": "AccessDeniedException"}, body: `{"Message":"User is not authorized to perform: lambda:InvokeFunction"}`},
		{status: 413, header: map[string]string{"X-Amzn-ErrorType": "RequestTooLargeException"}, body: `{"Type":"User","message":"too large"}`},
	} {
		srv := newServer(t, "", func(int, request) reply { return rep })
		cfg := config(srv.URL, "")
		_, err := NewFromConfig(cfg).Invoke(context.Background(), &Input{FunctionName: "f", Payload: []byte(`{}`)})
		var ie *Error
		if !errors.As(err, &ie) {
			t.Fatalf("%+v: err = %v, want an *Error", rep, err)
		}
		_, sdkErr := sdkClient(cfg).Invoke(context.Background(), &awslambda.InvokeInput{FunctionName: aws.String("f"), Payload: []byte(`{}`)})
		var api smithy.APIError
		if !errors.As(sdkErr, &api) {
			t.Fatalf("%+v: the SDK's err = %v, want an APIError", rep, sdkErr)
		}
		if ie.Code != api.ErrorCode() || ie.Message != api.ErrorMessage() || ie.Status != rep.status {
			t.Errorf("%+v: Error %+v; the SDK read %s: %q", rep, *ie, api.ErrorCode(), api.ErrorMessage())
		}
	}
}

// TestLocalGateway: terret dev's gateway serves the Invoke API at LambdaEndpoint (its
// secret as the path's first segment); this client runs its functions synchronously,
// kicks them asynchronously, and reads its function errors and refusals.
func TestLocalGateway(t *testing.T) {
	t.Parallel()
	kicked := make(chan string, 1)
	g, err := localgw.Start(context.Background(), localgw.Config{
		Addr: "127.0.0.1:0",
		Functions: map[string]lambda.Handler{
			"echo": lambda.NewHandler(func(ev map[string]string) (map[string]string, error) {
				return map[string]string{"echo": ev["text"]}, nil
			}),
			"fail": lambda.NewHandler(func(map[string]string) error { return errors.New("it broke") }),
			"kick": lambda.NewHandler(func(ev map[string]string) error { kicked <- ev["text"]; return nil }),
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	c := NewFromConfig(config(g.LambdaEndpoint(), ""))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	out, err := c.Invoke(ctx, &Input{FunctionName: "arn:aws:lambda:us-east-1:123456789012:function:echo", Payload: []byte(`{"text":"hi"}`)})
	if err != nil || out.StatusCode != 200 || out.FunctionError != "" || string(out.Payload) != `{"echo":"hi"}` {
		t.Fatalf("RequestResponse: %v, %+v", err, out)
	}
	out, err = c.Invoke(ctx, &Input{FunctionName: "fail", InvocationType: RequestResponse, Payload: []byte(`{}`)})
	if err != nil || out.FunctionError != "Unhandled" || string(out.Payload) != `{"errorType":"errorString","errorMessage":"it broke"}`+"\n" {
		t.Fatalf("a failing function: %v, %+v (%s)", err, out, out.Payload)
	}
	out, err = c.Invoke(ctx, &Input{FunctionName: "kick", InvocationType: Event, Payload: []byte(`{"text":"bg"}`)})
	if err != nil || out.StatusCode != 202 {
		t.Fatalf("Event: %v, %+v", err, out)
	}
	select {
	case got := <-kicked:
		if got != "bg" {
			t.Errorf("the kicked function got %q", got)
		}
	case <-ctx.Done():
		t.Fatal("the kicked function never ran")
	}
	_, err = c.Invoke(ctx, &Input{FunctionName: "missing", InvocationType: Event, Payload: []byte(`{}`)})
	var ie *Error
	if !errors.As(err, &ie) || ie.Status != 404 || ie.Code != "ResourceNotFoundException" {
		t.Fatalf("an unknown function: %v", err)
	}
	// Without the secret the gateway refuses.
	base := g.LambdaEndpoint()
	wrong := base[:strings.LastIndex(base, "/")+1] + strings.Repeat("0", 32)
	_, err = NewFromConfig(config(wrong, "")).Invoke(ctx, &Input{FunctionName: "echo", Payload: []byte(`{}`)})
	if !errors.As(err, &ie) || ie.Status != 403 {
		t.Fatalf("a wrong secret: %v", err)
	}
}

// TestAPIOptions: aws.Config.APIOptions' Initialize step runs around each call once,
// retries inside, seeing what it sees around the SDK's Invoke (service ID, operation
// name) — terret dev's latency profile delays Invoke by its figure.
func TestAPIOptions(t *testing.T) {
	t.Parallel()
	srv := newServer(t, "", func(n int, _ request) reply {
		if n%2 == 0 {
			return reply{status: 429, header: map[string]string{"X-Amzn-ErrorType": "TooManyRequestsException"}}
		}
		return reply{status: 202}
	})
	type call struct {
		op            string
		params, value string
		err           error
	}
	var calls []call
	record := func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("record", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleInitialize(ctx, in)
			calls = append(calls, call{awsmiddleware.GetServiceID(ctx) + "." + awsmiddleware.GetOperationName(ctx), fmt.Sprintf("%T", in.Parameters), fmt.Sprintf("%T", out.Result), err})
			return out, md, err
		}), middleware.After)
	}
	const floor = 80 * time.Millisecond
	cfg := latency.Profile{Invoke: floor}.Install(config(srv.URL, ""))
	cfg.APIOptions = append(cfg.APIOptions, record)
	c := NewFromConfig(cfg)
	noWait(c)
	start := time.Now()
	if _, err := c.Invoke(context.Background(), &Input{FunctionName: "runner", InvocationType: Event, Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < floor {
		t.Errorf("Invoke took %v under a latency profile of %v", took, floor)
	}
	if len(srv.requests()) != 2 || len(calls) != 1 || calls[0] != (call{"Lambda.Invoke", "*invoke.Input", "*invoke.Output", nil}) {
		t.Errorf("%d requests, middleware saw %+v; want 2 requests (a retry) and one Lambda.Invoke of *invoke.Input", len(srv.requests()), calls)
	}

	// The SDK's client shows the same to the same middleware.
	sdkCfg := config(srv.URL, "")
	sdkCfg.APIOptions = []func(*middleware.Stack) error{record}
	sdkCfg.RetryMaxAttempts = 3
	if _, err := awslambda.NewFromConfig(sdkCfg).Invoke(context.Background(), &awslambda.InvokeInput{FunctionName: aws.String("runner"), InvocationType: lambdatypes.InvocationTypeEvent}); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[1].op != calls[0].op {
		t.Errorf("the SDK's Invoke showed %+v, ours %+v", calls[1:], calls[0])
	}

	// An option that fails, or replaces the input, fails the call.
	bad := config(srv.URL, "")
	bad.APIOptions = []func(*middleware.Stack) error{func(*middleware.Stack) error { return errors.New("no") }}
	if _, err := NewFromConfig(bad).Invoke(context.Background(), &Input{FunctionName: "f"}); err == nil || err.Error() != "invoke: API options: no" {
		t.Errorf("a failing option: %v", err)
	}
	bad.APIOptions = []func(*middleware.Stack) error{func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("swap", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			in.Parameters = "something else"
			return next.HandleInitialize(ctx, in)
		}), middleware.After)
	}}
	if _, err := NewFromConfig(bad).Invoke(context.Background(), &Input{FunctionName: "f"}); err == nil || !strings.Contains(err.Error(), "replaced the input with a string") {
		t.Errorf("a replaced input: %v", err)
	}
}
