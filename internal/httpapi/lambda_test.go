package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// TestFunctionURLStreams: the function URL adapter hands the handler the request as
// sent (method, path, query, headers, a base64 body), and streams what it writes: the
// prelude (status, headers) and the first event reach Lambda while the handler is still
// running, before the second is written.
func TestFunctionURLStreams(t *testing.T) {
	t.Parallel()
	second := make(chan struct{})
	var got struct {
		method, path, query, accept, body string
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.method, got.path, got.query, got.accept, got.body = r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Accept"), string(b)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "id: 1\ndata: {}\n\n")
		w.(http.Flusher).Flush()
		<-second
		_, _ = io.WriteString(w, "id: 2\ndata: {}\n\n")
	})
	ev := events.LambdaFunctionURLRequest{
		RawPath:         "/agents/a1/events",
		RawQueryString:  "from_seq=1&wait=2",
		Headers:         map[string]string{"accept": "text/event-stream"},
		Body:            "aGVsbG8=",
		IsBase64Encoded: true,
	}
	ev.RequestContext.HTTP.Method = "POST"
	resp, err := FunctionURL(h)(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Close()
	// What Lambda reads: the JSON prelude, eight zero bytes, then the body.
	buf := make([]byte, 4096)
	var read []byte
	for !bytes.Contains(read, []byte("id: 1\ndata: {}\n\n")) {
		n, err := resp.Read(buf)
		if err != nil {
			t.Fatalf("read before the second event: %v (read %q)", err, read)
		}
		read = append(read, buf[:n]...)
	}
	prelude, body, ok := bytes.Cut(read, make([]byte, 8))
	var p struct {
		StatusCode int               `json:"statusCode"`
		Headers    map[string]string `json:"headers"`
	}
	if !ok || json.Unmarshal(prelude, &p) != nil || p.StatusCode != 200 || p.Headers["Content-Type"] != "text/event-stream" {
		t.Fatalf("prelude %q, want status 200 and the content type", prelude)
	}
	if string(body) != "id: 1\ndata: {}\n\n" {
		t.Fatalf("body before the second event %q", body)
	}
	close(second)
	rest, err := io.ReadAll(resp)
	if err != nil || string(rest) != "id: 2\ndata: {}\n\n" {
		t.Fatalf("rest of the body %q (%v)", rest, err)
	}
	if got.method != "POST" || got.path != "/agents/a1/events" || got.query != "from_seq=1&wait=2" || got.accept != "text/event-stream" || got.body != "hello" {
		t.Fatalf("handler saw %+v", got)
	}
}

func TestRequireOrigin(t *testing.T) {
	t.Parallel()
	h := RequireOrigin("s3cret", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(OriginHeader) != "" {
			t.Error("the origin secret reached the handler")
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	for _, tt := range []struct {
		header string
		status int
	}{{"s3cret", 204}, {"", 403}, {"s3cre", 403}} {
		r := httptest.NewRequest("GET", "/agents/a1/events", nil)
		if tt.header != "" {
			r.Header.Set(OriginHeader, tt.header)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.status || (tt.status == 403 && !strings.Contains(w.Body.String(), `"code":"forbidden"`)) {
			t.Errorf("origin header %q: status %d body %s, want %d", tt.header, w.Code, w.Body, tt.status)
		}
	}
}
