package latency_test

import (
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/latency"
)

// TestFlags: without -aws-latency the profile is zero whatever the figures say; with
// it, the AWS defaults apply, each overridable by its flag.
func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want latency.Profile
	}{
		{nil, latency.Profile{}},
		{[]string{"-aws-post-latency", "7ms"}, latency.Profile{}},
		{[]string{"-aws-latency"}, latency.AWS()},
		{[]string{"--aws-latency", "--aws-post-latency", "7ms", "--aws-poll-interval", "1s"}, func() latency.Profile {
			p := latency.AWS()
			p.Post, p.PollInterval = 7*time.Millisecond, time.Second
			return p
		}()},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		get := latency.Flags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := get(); got != tc.want {
			t.Errorf("%v: got %+v, want %+v", tc.args, got, tc.want)
		}
	}
}

// TestInstallFloors: a request of each profiled service takes at least its figure, with
// the profile installed — DynamoDB against DynamoDB Local, PostToConnection against a
// small @connections server — and the zero profile changes nothing.
func TestInstallFloors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	p := latency.Profile{Post: 60 * time.Millisecond, DynamoDB: 80 * time.Millisecond}
	if cfg := (latency.Profile{}).Install(dynamolocal.Config()); len(cfg.APIOptions) != len(dynamolocal.Config().APIOptions) {
		t.Errorf("the zero profile installed a middleware")
	}
	cfg := p.Install(dynamolocal.Config())
	ctx := context.Background()

	posts := apigatewaymanagementapi.NewFromConfig(cfg, func(o *apigatewaymanagementapi.Options) { o.BaseEndpoint = aws.String(srv.URL) })
	began := time.Now()
	if _, err := posts.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String("c"), Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < p.Post {
		t.Errorf("PostToConnection took %v, want at least %v", took, p.Post)
	}

	endpoint := dynamotest.Endpoint(t)
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(endpoint) })
	began = time.Now()
	if _, err := db.ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < p.DynamoDB {
		t.Errorf("ListTables took %v, want at least %v", took, p.DynamoDB)
	}
}

// TestDelayed: a function run through the Invoke API starts AsyncStart late.
func TestDelayed(t *testing.T) {
	p := latency.Profile{AsyncStart: 50 * time.Millisecond}
	var started time.Time
	h := p.Delayed(lambda.NewHandler(func(context.Context) error { started = time.Now(); return nil }))
	began := time.Now()
	if _, err := h.Invoke(context.Background(), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if d := started.Sub(began); d < p.AsyncStart {
		t.Errorf("started after %v, want at least %v", d, p.AsyncStart)
	}
}
