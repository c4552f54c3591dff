package openai_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/model/openai"
)

const (
	modelName = "gpt-4o-mini"
	testKey   = "sk-proj-TESTKEY0123456789abcdefghijklmnop"
)

// recorded returns a committed recording under testdata/.
func recorded(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read recording: %v", err)
	}
	return b
}

// newServer starts a local chat-completions server: POST /v1/chat/completions is
// handed to check, then answered by respond.
func newServer(t *testing.T, check func(t *testing.T, r *http.Request, body []byte), respond http.HandlerFunc) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read request: %v", err)
		}
		if check != nil {
			check(t, r, body)
		}
		respond(w, r)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
		http.NotFound(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func sse(body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	}
}

func status(code int, contentType string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(code)
		_, _ = w.Write(body)
	}
}

func newModel(t *testing.T, baseURL, key string) model.Model {
	t.Helper()
	p, err := openai.NewProvider(nil, openai.Config{BaseURL: baseURL, APIKey: key})
	if err != nil {
		t.Fatalf("NewProvider: %v", err)
	}
	m, err := p.Model(modelName)
	if err != nil {
		t.Fatalf("Model: %v", err)
	}
	return m
}

func userRequest(text string) model.Request {
	return model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: text}}}
}

func stream(t *testing.T, m model.Model, req model.Request) (model.Response, []string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var deltas []string
	resp, err := m.Stream(ctx, req, func(d model.Delta) error {
		deltas = append(deltas, d.Text)
		return nil
	})
	return resp, deltas, err
}

func TestStreamRecorded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file       string
		wantDeltas []string
		want       model.Response
	}{
		{
			file:       "text.sse",
			wantDeltas: []string{"Hel", "lo, ", "world"},
			want:       model.Response{Text: "Hello, world", StopReason: model.StopEndTurn, Usage: model.Usage{InputTokens: 12, OutputTokens: 5}},
		},
		{
			file: "parallel_tool_calls.sse",
			want: model.Response{
				ToolCalls: []model.ToolCall{
					{ID: "call_Lk2mP9xQ", Name: "lookup", Args: json.RawMessage(`{"id":42,"tags":["a"]}`)},
					{ID: "call_Ck7vR3nW", Name: "clock", Args: json.RawMessage(`{"tz":"UTC"}`)},
				},
				StopReason: model.StopToolUse,
				Usage:      model.Usage{InputTokens: 431, OutputTokens: 88},
			},
		},
		{
			// CRLF line ends, keep-alive comments, "data:" without a space, the finish
			// reason on the last content chunk.
			file:       "vllm_text.sse",
			wantDeltas: []string{"Grüße ", "🌍"},
			want:       model.Response{Text: "Grüße 🌍", StopReason: "max_tokens", Usage: model.Usage{InputTokens: 7, OutputTokens: 3}},
		},
		{
			file: "content_filter.sse",
			want: model.Response{StopReason: model.StopRefusal, Usage: model.Usage{InputTokens: 20}},
		},
		{
			// Tool calls without index, no usage chunk, no [DONE].
			file: "indexless_tool_calls.sse",
			want: model.Response{
				ToolCalls: []model.ToolCall{
					{ID: "call_a1", Name: "lookup", Args: json.RawMessage(`{"id":7}`)},
					{ID: "call_b2", Name: "clock", Args: json.RawMessage(`{}`)},
				},
				StopReason: model.StopToolUse,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, nil, sse(recorded(t, tt.file)))
			resp, deltas, err := stream(t, newModel(t, srv.URL+"/v1", ""), userRequest("hi"))
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			if !reflect.DeepEqual(deltas, tt.wantDeltas) {
				t.Errorf("deltas = %q, want %q", deltas, tt.wantDeltas)
			}
			if !reflect.DeepEqual(resp, tt.want) {
				t.Errorf("response =\n%+v\nwant\n%+v", resp, tt.want)
			}
		})
	}
}

func TestStreamErrors(t *testing.T) {
	t.Parallel()
	echoKey := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, key)
	}
	tests := []struct {
		name     string
		respond  http.HandlerFunc
		want     error
		contains []string
	}{
		{"HTTP 429", status(http.StatusTooManyRequests, "application/json", recorded(t, "error_429.json")), openai.ErrThrottled,
			[]string{"HTTP 429", "Rate limit reached"}},
		{"HTTP 500", status(http.StatusInternalServerError, "application/json", recorded(t, "error_500.json")), openai.ErrUnavailable,
			[]string{"HTTP 500", "The server had an error"}},
		{"HTTP 502 plain text", status(http.StatusBadGateway, "text/plain", []byte("upstream connect error or disconnect/reset before headers\n")), openai.ErrUnavailable,
			[]string{"HTTP 502"}},
		{"HTTP 400 vLLM error shape", status(http.StatusBadRequest, "application/json", recorded(t, "error_400_vllm.json")), openai.ErrInvalidRequest,
			[]string{"HTTP 400", "maximum context length is 8192 tokens"}},
		{"HTTP 400 context_length_exceeded", status(http.StatusBadRequest, "application/json",
			[]byte(`{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`)),
			openai.ErrInvalidRequest, []string{"HTTP 400", "context window"}},
		{"HTTP 400 other", status(http.StatusBadRequest, "application/json",
			[]byte(`{"error":{"message":"Invalid value for temperature.","type":"invalid_request_error","code":"invalid_value"}}`)),
			openai.ErrInvalidRequest, []string{"HTTP 400", "temperature"}},
		{"HTTP 401 echoing the key", echoKey, openai.ErrAuth, []string{"HTTP 401", "Incorrect API key provided"}},
		{"malformed chunk", sse(recorded(t, "malformed.sse")), openai.ErrBadResponse, []string{"not JSON"}},
		{"stream cut before finish_reason", sse(recorded(t, "truncated.sse")), openai.ErrBadResponse, []string{"finish_reason"}},
		{"error event in stream", sse(recorded(t, "stream_error.sse")), openai.ErrUnavailable, []string{"The server had an error"}},
		{"tool arguments not an object", sse(recorded(t, "bad_args.sse")), openai.ErrBadResponse, []string{"lookup", "call_bad"}},
		{"JSON error with status 200", status(http.StatusOK, "application/json", recorded(t, "error_500.json")), openai.ErrUnavailable,
			[]string{"The server had an error"}},
	}
	// The context-length refusals (model.ErrContextLength) among them.
	tooLong := map[string]bool{"HTTP 400 vLLM error shape": true, "HTTP 400 context_length_exceeded": true}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, nil, tt.respond)
			_, _, err := stream(t, newModel(t, srv.URL+"/v1", testKey), userRequest("hi"))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if got := model.IsContextLength(err); got != tooLong[tt.name] {
				t.Errorf("IsContextLength(%v) = %v, want %v", err, got, tooLong[tt.name])
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "openai: ") || !strings.Contains(msg, modelName) {
				t.Errorf("error %q is not package-prefixed or does not name the model", msg)
			}
			for _, s := range tt.contains {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not mention %q", msg, s)
				}
			}
			if strings.Contains(msg, testKey) || strings.Contains(msg, "TESTKEY") {
				t.Errorf("error %q carries the API key", msg)
			}
			if strings.Contains(msg, "upstream") {
				t.Errorf("error %q copies a body that is no error shape", msg)
			}
		})
	}
}

// TestErrorsNeverEchoTheKey: a server that echoes the key encoded (base64, hex), split
// by white space, or in a body of no error shape gets none of it into the error; the
// message is bounded.
func TestErrorsNeverEchoTheKey(t *testing.T) {
	t.Parallel()
	echo := func(status int, ct string, body func(key string) string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ct)
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")))
		}
	}
	msgJSON := func(m string) string {
		b, _ := json.Marshal(map[string]any{"error": map[string]string{"message": m}})
		return string(b)
	}
	for _, tc := range []struct {
		name    string
		respond http.HandlerFunc
	}{
		{"base64", echo(401, "application/json", func(k string) string {
			return msgJSON("bad key " + base64.StdEncoding.EncodeToString([]byte(k)))
		})},
		{"base64 url in Basic", echo(403, "application/json", func(k string) string {
			return msgJSON("Basic " + base64.URLEncoding.EncodeToString([]byte("api:"+k)))
		})},
		{"hex", echo(400, "application/json", func(k string) string { return msgJSON("key=" + hex.EncodeToString([]byte(k))) })},
		{"split by a newline", echo(401, "application/json", func(k string) string { return msgJSON("key " + k[:7] + "\n" + k[7:]) })},
		{"plain body", echo(500, "text/html", func(k string) string { return "<pre>Authorization: Bearer\n" + k + "</pre>" })},
		{"long", echo(400, "application/json", func(k string) string { return msgJSON(strings.Repeat("x", 5000) + k) })},
		{"stream error event", sse([]byte("data: " + `{"error":{"message":"key ` + base64.StdEncoding.EncodeToString([]byte(testKey)) + `"}}` + "\n\n"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, nil, tc.respond)
			_, _, err := stream(t, newModel(t, srv.URL+"/v1", testKey), userRequest("hi"))
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			flat := strings.Join(strings.Fields(msg), "")
			for _, f := range []string{testKey, base64.StdEncoding.EncodeToString([]byte(testKey))[4:16], hex.EncodeToString([]byte(testKey))[:16]} {
				if strings.Contains(flat, f) {
					t.Errorf("error %q carries a form of the key (%s)", msg, f)
				}
			}
			if len(msg) > 400 {
				t.Errorf("error is %d bytes, want it bounded", len(msg))
			}
		})
	}
}

func TestStreamServerDown(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, _, err := stream(t, newModel(t, url+"/v1", testKey), userRequest("hi"))
	if !errors.Is(err, openai.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

func TestStreamOnDeltaErrorAborts(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil, sse(recorded(t, "text.sse")))
	stop := errors.New("client gone")
	calls := 0
	_, err := newModel(t, srv.URL+"/v1", "").Stream(context.Background(), userRequest("hi"), func(model.Delta) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("err = %v after %d calls, want %v after 1", err, calls, stop)
	}
}

func TestStreamContextCancel(t *testing.T) {
	t.Parallel()
	head := recorded(t, "truncated.sse") // role chunk + "Hel", then the server stalls
	srv := newServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(head)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := newModel(t, srv.URL+"/v1", "").Stream(ctx, userRequest("hi"), func(d model.Delta) error {
			cancel()
			return nil
		})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(hang.Bound()):
		t.Fatal("Stream did not return after cancellation")
	}
}

func TestRequestBody(t *testing.T) {
	t.Parallel()
	temp := 0.5
	req := model.Request{
		System: "You are terse.",
		Messages: []model.Message{
			{Role: model.RoleUser, Text: "look up 42 and the time"},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{
				{ID: "call_1", Name: "lookup", Args: json.RawMessage(`{"id": 42}`)},
				{ID: "call_2", Name: "clock", Args: nil},
			}},
			{Role: model.RoleTool, ToolResults: []model.ToolResult{
				{CallID: "call_1", Result: json.RawMessage(`{"name": "widget"}`)},
				{CallID: "call_2", Error: "cancelled before execution"},
			}},
			{Role: model.RoleAssistant, Text: "It is a widget."},
			{Role: model.RoleAssistant}, // empty: dropped
			{Role: model.RoleUser, Text: "thanks"},
		},
		Tools: []model.ToolSpec{
			{Name: "lookup", Description: "Looks up an item.", Schema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}`)},
			{Name: "clock", Description: "Current time."},
		},
	}
	want := `{
	  "model": "gpt-4o-mini",
	  "messages": [
	    {"role": "system", "content": "You are terse."},
	    {"role": "user", "content": "look up 42 and the time"},
	    {"role": "assistant", "content": null, "tool_calls": [
	      {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"id\":42}"}},
	      {"id": "call_2", "type": "function", "function": {"name": "clock", "arguments": "{}"}}
	    ]},
	    {"role": "tool", "tool_call_id": "call_1", "content": "{\"name\":\"widget\"}"},
	    {"role": "tool", "tool_call_id": "call_2", "content": "{\"error\":\"cancelled before execution\"}"},
	    {"role": "assistant", "content": "It is a widget."},
	    {"role": "user", "content": "thanks"}
	  ],
	  "tools": [
	    {"type": "function", "function": {"name": "lookup", "description": "Looks up an item.", "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}},
	    {"type": "function", "function": {"name": "clock", "description": "Current time.", "parameters": {"type": "object", "properties": {}}}}
	  ],
	  "stream": true,
	  "stream_options": {"include_usage": true},
	  "max_tokens": 256,
	  "temperature": 0.5
	}`
	check := func(t *testing.T, r *http.Request, body []byte) {
		if got := r.Header.Get("Authorization"); got != "Bearer "+testKey {
			t.Errorf("Authorization = %q", got)
		}
		if got := r.Header.Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type = %q", got)
		}
		if got := r.Header.Get("Accept"); got != "text/event-stream" {
			t.Errorf("Accept = %q", got)
		}
		var gotV, wantV any
		if err := json.Unmarshal(body, &gotV); err != nil {
			t.Fatalf("request body is not JSON: %v", err)
		}
		if err := json.Unmarshal([]byte(want), &wantV); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gotV, wantV) {
			t.Errorf("request body =\n%s\nwant\n%s", body, want)
		}
	}
	srv := newServer(t, check, sse(recorded(t, "text.sse")))
	p, err := openai.NewProvider(srv.Client(), openai.Config{BaseURL: srv.URL + "/v1/", APIKey: testKey, MaxTokens: 256, Temperature: &temp})
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.Model(modelName)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := stream(t, m, req); err != nil {
		t.Fatalf("Stream: %v", err)
	}
}

func TestRequestWithoutKeyHasNoAuthorization(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(t *testing.T, r *http.Request, _ []byte) {
		if _, ok := r.Header["Authorization"]; ok {
			t.Errorf("Authorization header sent without a key: %q", r.Header.Get("Authorization"))
		}
	}, sse(recorded(t, "text.sse")))
	if _, _, err := stream(t, newModel(t, srv.URL+"/v1", ""), userRequest("hi")); err != nil {
		t.Fatalf("Stream: %v", err)
	}
}

func TestRequestRejectsBadInput(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(t *testing.T, _ *http.Request, _ []byte) { t.Error("request sent for an invalid model request") }, sse(nil))
	m := newModel(t, srv.URL+"/v1", "")
	for name, req := range map[string]model.Request{
		"unknown role":         {Messages: []model.Message{{Role: "system", Text: "x"}}},
		"tool args not JSON":   {Messages: []model.Message{{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "a", Name: "b", Args: json.RawMessage(`{`)}}}}},
		"tool result not JSON": {Messages: []model.Message{{Role: model.RoleTool, ToolResults: []model.ToolResult{{CallID: "a", Result: json.RawMessage(`nope`)}}}}},
		"tool schema not JSON": {Messages: []model.Message{{Role: model.RoleUser, Text: "x"}}, Tools: []model.ToolSpec{{Name: "t", Schema: json.RawMessage(`{]`)}}},
	} {
		if _, _, err := stream(t, m, req); !errors.Is(err, openai.ErrInvalidRequest) {
			t.Errorf("%s: err = %v, want ErrInvalidRequest", name, err)
		}
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	cfg, err := openai.ParseConfig(json.RawMessage(`{"base_url":"http://localhost:11434/v1","api_key":"` + testKey + `","max_tokens":100}`))
	if err != nil || cfg.BaseURL != "http://localhost:11434/v1" || cfg.APIKey != testKey || cfg.MaxTokens != 100 {
		t.Fatalf("ParseConfig = %v, %v", cfg, err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("provider", "config", cfg)
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), logged.String()} {
		if strings.Contains(s, testKey) || !strings.Contains(s, "localhost:11434") {
			t.Errorf("printed config %q leaks the key or lost the URL", s)
		}
	}
	for _, bad := range []string{`{}`, `{"base_url":"localhost:8000"}`, `{"base_url":"ftp://x/v1"}`, `{"base_url":"http://x/v1","max_tokens":-1}`, `{"base_url":"http://x/v1","apikey":"k"}`, `[`} {
		if _, err := openai.ParseConfig(json.RawMessage(bad)); !errors.Is(err, openai.ErrInvalidRequest) {
			t.Errorf("ParseConfig(%s) err = %v, want ErrInvalidRequest", bad, err)
		}
	}
	p, err := openai.NewProvider(nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Model(" "); !errors.Is(err, model.ErrBadSpec) {
		t.Errorf("Model(\" \") err = %v, want ErrBadSpec", err)
	}
}
