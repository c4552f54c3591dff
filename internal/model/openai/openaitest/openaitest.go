// Package openaitest is a model provider for tests: a real HTTP server speaking the
// OpenAI chat-completions wire format (POST {base}/chat/completions, the reply streamed
// as server-sent events). It records every request — its Authorization header and JSON
// body — so a test can check what reached the provider: the key, the system prompt,
// the model and the tools.
package openaitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Reply is the text every request is answered with, streamed as three deltas.
const Reply = "Hello world"

// Server is the provider. It is safe for concurrent use.
type Server struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []Request
}

// Request is one chat-completions request as the server received it.
type Request struct {
	Auth string // the Authorization header
	Body struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
}

// New starts a server, closed when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// BaseURL is the API root a profile's base_url names.
func (s *Server) BaseURL() string { return s.srv.URL + "/v1" }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	var req Request
	req.Auth = r.Header.Get("Authorization")
	if err := json.NewDecoder(r.Body).Decode(&req.Body); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"content":"lo "},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"content":"world"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`[DONE]`,
	} {
		fmt.Fprintf(w, "data: %s\n\n", c)
		w.(http.Flusher).Flush()
	}
}

// Request returns the n-th request (from 1), failing the test unless exactly n were
// received.
func (s *Server) Request(t testing.TB, n int) Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) != n {
		t.Fatalf("model server got %d requests, want %d", len(s.reqs), n)
	}
	return s.reqs[n-1]
}

// Last returns the newest request, failing the test if there is none.
func (s *Server) Last(t testing.TB) Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("model server got no request")
	}
	return s.reqs[len(s.reqs)-1]
}

// System is the request's system prompt ("" without one).
func (r Request) System() string {
	if len(r.Body.Messages) == 0 || r.Body.Messages[0].Role != "system" {
		return ""
	}
	s, _ := r.Body.Messages[0].Content.(string)
	return s
}

// Tools are the names of the tools the request offers the model, in order.
func (r Request) Tools() []string {
	var out []string
	for _, t := range r.Body.Tools {
		out = append(out, t.Function.Name)
	}
	return out
}
