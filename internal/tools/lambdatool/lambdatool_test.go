package lambdatool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/terret/terret-ws/internal/invoke"
	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/tools/lambdatool"
)

const arnPrefix = "arn:aws:lambda:us-east-1:123456789012:function:"

// function is what the local Lambda server runs for one function name: it returns the
// payload, and a function error kind ("" for success).
type function func(ctx context.Context, payload []byte) (out []byte, functionError string)

// lambdaServer is a local server speaking the Lambda Invoke API:
// POST /2015-03-31/functions/{name}/invocations answers 200 with the function's output
// (and X-Amz-Function-Error when it failed), or 404 ResourceNotFoundException.
type lambdaServer struct {
	*httptest.Server
	mu       sync.Mutex
	payloads map[string][][]byte // by function name: the payloads received
}

func newLambdaServer(t *testing.T, functions map[string]function) *lambdaServer {
	t.Helper()
	s := &lambdaServer{payloads: map[string][][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /2015-03-31/functions/{name}/invocations", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if got := r.Header.Get("X-Amz-Invocation-Type"); got != "RequestResponse" {
			t.Errorf("invocation type = %q, want RequestResponse", got)
		}
		if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
			t.Errorf("request not signed")
		}
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.payloads[name] = append(s.payloads[name], body)
		s.mu.Unlock()
		fn, ok := functions[strings.TrimPrefix(name, arnPrefix)]
		if !ok || !strings.HasPrefix(name, arnPrefix) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Amzn-Errortype", "ResourceNotFoundException")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"Type":"User","Message":"Function not found: %s"}`, name)
			return
		}
		out, ferr := fn(r.Context(), body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amz-Executed-Version", "$LATEST")
		if ferr != "" {
			w.Header().Set("X-Amz-Function-Error", ferr)
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
		http.NotFound(w, r)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func (s *lambdaServer) received(name string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.payloads[arnPrefix+name]
}

func newClient(url string) *invoke.Client {
	return invoke.NewFromConfig(aws.Config{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(url),
		Credentials:      credentials.NewStaticCredentialsProvider("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""),
		RetryMaxAttempts: 1,
	})
}

// functions served by the test server.
var functions = map[string]function{
	"lookup": func(_ context.Context, payload []byte) ([]byte, string) {
		var in struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(payload, &in); err != nil {
			return []byte(`{"errorMessage":"bad payload","errorType":"SyntaxError"}`), "Unhandled"
		}
		return fmt.Appendf(nil, `{"id": %d, "name": "widget-%d"}`, in.ID, in.ID), ""
	},
	"fails": func(context.Context, []byte) ([]byte, string) {
		return []byte(`{"errorMessage":"item 42 not found","errorType":"NotFoundError","stackTrace":["at lookup (/var/task/index.js:3:9)"]}`), "Unhandled"
	},
	"fails_handled": func(context.Context, []byte) ([]byte, string) {
		return []byte(`{"errorMessage":"quota exhausted"}`), "Handled"
	},
	"nothing": func(context.Context, []byte) ([]byte, string) { return nil, "" },
	"text":    func(context.Context, []byte) ([]byte, string) { return []byte(`hello, not json`), "" },
	"big": func(context.Context, []byte) ([]byte, string) {
		return []byte(`{"blob":"` + strings.Repeat("x", 200) + `"}`), ""
	},
	"slow": func(ctx context.Context, _ []byte) ([]byte, string) {
		<-ctx.Done()
		return []byte(`{}`), ""
	},
}

func build(t *testing.T, url, spec string) tools.Tool {
	t.Helper()
	ts, err := lambdatool.Build(json.RawMessage(spec), newClient(url))
	if err != nil {
		t.Fatalf("Build(%s): %v", spec, err)
	}
	if len(ts) != 1 {
		t.Fatalf("Build returned %d tools, want 1", len(ts))
	}
	return ts[0]
}

func spec(name string, extra string) string {
	return `{"kind":"lambda","name":"` + name + `","description":"test","function_arn":"` + arnPrefix + name + `"` + extra + `}`
}

func TestCallReturnsFunctionOutput(t *testing.T) {
	t.Parallel()
	srv := newLambdaServer(t, functions)
	tool := build(t, srv.URL, spec("lookup", ""))
	got, err := tool.Call(context.Background(), json.RawMessage(`{"id": 42}`))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	if string(got) != `{"id": 42, "name": "widget-42"}` {
		t.Errorf("result = %s", got)
	}
	if p := srv.received("lookup"); len(p) != 1 || string(p[0]) != `{"id": 42}` {
		t.Errorf("payloads received = %q, want the call's args", p)
	}
}

func TestCallErrors(t *testing.T) {
	t.Parallel()
	srv := newLambdaServer(t, functions)
	tests := []struct {
		name     string
		spec     string
		args     string
		want     error
		contains []string
	}{
		{"unhandled function error", spec("fails", ""), `{}`, lambdatool.ErrFunction, []string{"fails", "NotFoundError", "item 42 not found"}},
		{"handled function error", spec("fails_handled", ""), `{}`, lambdatool.ErrFunction, []string{"quota exhausted"}},
		{"function not found", spec("absent", ""), `{}`, lambdatool.ErrInvoke, []string{"ResourceNotFoundException", "Function not found"}},
		{"output not JSON", spec("text", ""), `{}`, lambdatool.ErrBadOutput, []string{"text"}},
		{"output above max_result_bytes", spec("big", `,"max_result_bytes":100`), `{}`, lambdatool.ErrResultTooLarge, []string{"limit 100"}},
		{"args not an object", spec("lookup", ""), `[1]`, tools.ErrBadArgs, nil},
		{"args not JSON", spec("lookup", ""), `{"id":`, tools.ErrBadArgs, nil},
		{"timeout_ms", spec("slow", `,"timeout_ms":50`), `{}`, context.DeadlineExceeded, []string{"slow"}},
	}
	// Runs after the parallel subtests.
	t.Cleanup(func() {
		if n := len(srv.received("lookup")); n != 0 {
			t.Errorf("invalid args reached the function %d times", n)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := build(t, srv.URL, tt.spec).Call(context.Background(), json.RawMessage(tt.args))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			for _, s := range tt.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "AKIAIOSFODNN7EXAMPLE") {
				t.Errorf("error %q carries the access key id", err)
			}
		})
	}
}

// TestTransportErrorHidesEndpointPath: a transport error (which quotes the request's
// URL) keeps the endpoint's host but not its path, where terret dev's internal endpoint
// carries its secret; the error text becomes the call's tool/result.
func TestTransportErrorHidesEndpointPath(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef0123456789abcdef"
	// A server that drops every connection unanswered, and an address nobody listens on.
	dropper, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropper.Close() })
	go func() {
		for {
			c, err := dropper.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	for _, addr := range []string{dropper.Addr().String(), closed.Addr().String()} {
		_, err := build(t, "http://"+addr+"/"+secret, spec("lookup", "")).Call(context.Background(), json.RawMessage(`{"id": 1}`))
		if !errors.Is(err, lambdatool.ErrInvoke) {
			t.Fatalf("%s: err = %v, want ErrInvoke", addr, err)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error %q carries the endpoint's path", addr, err)
		}
		if !strings.Contains(err.Error(), "http://"+addr+"/[redacted]") {
			t.Errorf("%s: error %q does not name the endpoint's host", addr, err)
		}
	}
}

func TestCallEmptyOutputAndArgs(t *testing.T) {
	t.Parallel()
	srv := newLambdaServer(t, functions)
	got, err := build(t, srv.URL, spec("nothing", "")).Call(context.Background(), nil)
	if err != nil || string(got) != "null" {
		t.Fatalf("Call = %s, %v; want null", got, err)
	}
	if p := srv.received("nothing"); len(p) != 1 || string(p[0]) != `{}` {
		t.Errorf("payload for empty args = %q, want {}", p)
	}
}

func TestCallContextCancel(t *testing.T) {
	t.Parallel()
	srv := newLambdaServer(t, functions)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := build(t, srv.URL, spec("slow", "")).Call(ctx, json.RawMessage(`{}`))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lambdatool.ErrInvoke) {
		t.Fatalf("err = %v, want ErrInvoke wrapping DeadlineExceeded", err)
	}
}

func TestDefinition(t *testing.T) {
	t.Parallel()
	srv := newLambdaServer(t, functions)
	tests := []struct {
		spec string
		want tools.Definition
	}{
		{
			spec: `{"kind":"lambda","name":"lookup","description":"Looks up an item.","function_arn":"` + arnPrefix + `lookup",
				"schema":{"type":"object","properties":{"id":{"type":"integer"}}},"concurrency":"parallel","needs_approval":true}`,
			want: tools.Definition{Name: "lookup", Description: "Looks up an item.", Schema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer"}}}`),
				Concurrency: tools.Parallel, NeedsApproval: true},
		},
		{
			spec: `{"name":"lookup","description":"d","function_arn":"` + arnPrefix + `lookup"}`,
			want: tools.Definition{Name: "lookup", Description: "d", Concurrency: tools.Serial},
		},
	}
	for _, tt := range tests {
		got := build(t, srv.URL, tt.spec).Definition()
		gotJSON, _ := json.Marshal(got)
		wantJSON, _ := json.Marshal(tt.want)
		if string(gotJSON) != string(wantJSON) {
			t.Errorf("Definition = %s, want %s", gotJSON, wantJSON)
		}
	}
}

func TestBuildRejectsBadSpecs(t *testing.T) {
	t.Parallel()
	client := newClient("http://127.0.0.1:1")
	for _, bad := range []string{
		`{"kind":"mcp","name":"x","function_arn":"a"}`,
		`{"name":"","function_arn":"a"}`,
		`{"name":"has space","function_arn":"a"}`,
		`{"name":"` + strings.Repeat("n", 65) + `","function_arn":"a"}`,
		`{"name":"a.b","function_arn":"a"}`,
		`{"name":"x"}`,
		`{"name":"x","function_arn":"a","concurrency":"sometimes"}`,
		`{"name":"x","function_arn":"a","schema":[1]}`,
		`{"name":"x","function_arn":"a","timeout_ms":-1}`,
		`{"name":"x","function_arn":"a","functionArn":"b"}`,
		`not json`,
	} {
		if _, err := lambdatool.Build(json.RawMessage(bad), client); !errors.Is(err, lambdatool.ErrBadConfig) {
			t.Errorf("Build(%s) err = %v, want ErrBadConfig", bad, err)
		}
	}
	for _, name := range []string{strings.Repeat("n", 64), "a", "A_b-9"} {
		if _, err := lambdatool.Build(json.RawMessage(`{"name":"`+name+`","function_arn":"a"}`), client); err != nil {
			t.Errorf("Build of a tool named %q: %v", name, err)
		}
	}
	if _, err := lambdatool.Build(json.RawMessage(spec("x", "")), nil); !errors.Is(err, lambdatool.ErrBadConfig) {
		t.Errorf("Build with nil client err = %v, want ErrBadConfig", err)
	}
}

func TestBuilder(t *testing.T) {
	t.Parallel()
	srv := newLambdaServer(t, functions)
	build := lambdatool.Builder(newClient(srv.URL))
	approval := true
	tool, err := build(tools.ToolConfig{
		Name: "lookup", Kind: "lambda", Description: "Looks up an item.", Concurrency: tools.Parallel, NeedsApproval: &approval,
		Schema: json.RawMessage(`{"type":"object"}`),
		Spec:   json.RawMessage(`{"function_arn":"` + arnPrefix + `lookup","timeout_ms":5000}`),
	})
	if err != nil {
		t.Fatalf("Builder: %v", err)
	}
	def := tool.Definition()
	if def.Name != "lookup" || def.Description != "Looks up an item." || def.Concurrency != tools.Parallel || !def.NeedsApproval || string(def.Schema) != `{"type":"object"}` {
		t.Errorf("Definition = %+v", def)
	}
	got, err := tool.Call(context.Background(), json.RawMessage(`{"id": 7}`))
	if err != nil || string(got) != `{"id": 7, "name": "widget-7"}` {
		t.Errorf("Call = %s, %v", got, err)
	}
	for _, spec := range []string{``, `{"function_arn":""}`, `{"function_arn":"a","arn":"b"}`} {
		if _, err := build(tools.ToolConfig{Name: "x", Kind: "lambda", Spec: json.RawMessage(spec)}); !errors.Is(err, lambdatool.ErrBadConfig) {
			t.Errorf("Builder with spec %q: err = %v, want ErrBadConfig", spec, err)
		}
	}
}
