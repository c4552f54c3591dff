package localgw_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/terret/terret-ws/internal/localgw"
)

// forgedBatch is what an attacker's page posted to the deliver function: a stream
// record that would put an assistant/chunk at seq 7 of the victim's session.
const forgedBatch = `{"Records":[{"eventName":"INSERT","dynamodb":{"NewImage":{"pk":{"S":"log#victim"},"seq":{"N":"7"},"type":{"S":"assistant/chunk"}}}}]}`

// TestInternalAPIsRefuseStrangers sends the attacks of a cross-origin page — a forged
// Invoke of deliver and posts/deletes on @connections, as CORS "simple requests"
// (text/plain, no preflight) — to the socket address and to the internal listener
// without the secret, with a wrong secret, with a rebinding Host and with an Origin.
// Every one is refused, deliver never runs, and the victim's socket receives nothing
// before the marker the handlers' own client posts afterwards.
func TestInternalAPIsRefuseStrangers(t *testing.T) {
	var delivered atomic.Int32
	functions := map[string]lambda.Handler{"deliver": lambda.NewHandler(func(ctx context.Context, ev map[string]any) error {
		delivered.Add(1)
		return nil
	})}
	g, victim, id, _ := connected(t, localgw.Config{Functions: functions})
	pub := "http://" + strings.TrimPrefix(g.WebSocketURL(), "ws://")
	mgmt, _ := url.Parse(g.ManagementEndpoint())
	internal := "http://" + mgmt.Host
	secret := strings.Split(strings.Trim(mgmt.Path, "/"), "/")[0]
	if len(secret) != 32 {
		t.Fatalf("secret segment %q of %s, want 32 hex digits", secret, mgmt)
	}
	invoke := "/2015-03-31/functions/deliver/invocations"
	conn := "/local/@connections/" + url.PathEscape(id)

	tests := []struct {
		name, method, url, host, origin string
		want                            int
	}{
		{"invoke at the socket address", http.MethodPost, pub + invoke, "", "http://evil.example", http.StatusNotFound},
		{"invoke at the socket address with the secret", http.MethodPost, pub + "/" + secret + invoke, "", "", http.StatusNotFound},
		{"post at the socket address", http.MethodPost, pub + conn, "", "", http.StatusNotFound},
		{"delete at the socket address", http.MethodDelete, pub + conn, "", "", http.StatusNotFound},
		{"invoke without the secret", http.MethodPost, internal + invoke, "", "", http.StatusForbidden},
		{"invoke with a wrong secret", http.MethodPost, internal + "/" + strings.Repeat("0", 32) + invoke, "", "", http.StatusForbidden},
		{"post without the secret", http.MethodPost, internal + conn, "", "", http.StatusForbidden},
		{"delete without the secret", http.MethodDelete, internal + conn, "", "", http.StatusForbidden},
		{"invoke with a rebinding Host", http.MethodPost, internal + "/" + secret + invoke, "rebind.example:" + mgmt.Port(), "", http.StatusForbidden},
		{"invoke with localhost as Host", http.MethodPost, internal + "/" + secret + invoke, "localhost:" + mgmt.Port(), "", http.StatusForbidden},
		{"post with a rebinding Host", http.MethodPost, internal + "/" + secret + conn, "rebind.example:" + mgmt.Port(), "", http.StatusForbidden},
		{"invoke from a browser (Origin)", http.MethodPost, internal + "/" + secret + invoke, "", "http://evil.example", http.StatusForbidden},
		{"delete from a browser (Origin)", http.MethodDelete, internal + "/" + secret + conn, "", "null", http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := forgedBatch
			if strings.Contains(tt.url, "@connections") {
				body = `{"type":"event","seq":7,"event":{"type":"assistant/chunk","payload":{"text":"forged"}}}`
			}
			req, err := http.NewRequest(tt.method, tt.url, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "text/plain")
			if tt.host != "" {
				req.Host = tt.host
			}
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			if got := httpStatus(t, req); got != tt.want {
				t.Fatalf("%s %s answered %d, want %d", tt.method, tt.url, got, tt.want)
			}
		})
	}
	if n := delivered.Load(); n != 0 {
		t.Fatalf("deliver ran %d times on forged invocations", n)
	}
	// The handlers' own clients still get through, and the marker is the first frame
	// the victim sees: nothing forged came before it, nor a close.
	if _, err := managementClient(g).PostToConnection(ctxT(t), postInput(id, `{"marker":1}`)); err != nil {
		t.Fatalf("PostToConnection through ManagementEndpoint: %v", err)
	}
	if got := readText(t, victim); got != `{"marker":1}` {
		t.Fatalf("victim's first frame %q, want the marker", got)
	}
	out, err := lambdaClient(g).Invoke(ctxT(t), &awslambda.InvokeInput{FunctionName: aws.String("deliver"), Payload: []byte(`{}`)})
	if err != nil || out.FunctionError != nil {
		t.Fatalf("Invoke through LambdaEndpoint: %v %v", err, out)
	}
	if n := delivered.Load(); n != 1 {
		t.Fatalf("deliver ran %d times, want once (the legitimate Invoke)", n)
	}
}

// TestInternalListenerIsLoopback checks that the internal APIs are bound to
// 127.0.0.1 even when the sockets listen on every interface.
func TestInternalListenerIsLoopback(t *testing.T) {
	g, err := localgw.Start(context.Background(), localgw.Config{Addr: "0.0.0.0:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	for _, ep := range []string{g.ManagementEndpoint(), g.LambdaEndpoint()} {
		u, err := url.Parse(ep)
		if err != nil {
			t.Fatal(err)
		}
		if u.Hostname() != "127.0.0.1" {
			t.Errorf("endpoint %s is not on 127.0.0.1", u.Redacted())
		}
	}
}
