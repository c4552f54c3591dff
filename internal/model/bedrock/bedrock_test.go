package bedrock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"

	"github.com/terret/terret-ws/internal/hang"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/model/bedrock"
)

const (
	modelID = "anthropic.claude-3-5-haiku-20241022-v1:0"
	// AWS's documented example credentials: they must never show up in an error.
	testKeyID  = "AKIAIOSFODNN7EXAMPLE"
	testSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
)

// bedrockServer is a local HTTP server speaking ConverseStream: it answers
// POST /model/{modelId}/converse-stream with respond, after handing the request to check.
type bedrockServer struct {
	*httptest.Server
}

func newServer(t *testing.T, check func(t *testing.T, r *http.Request, body []byte), respond func(w http.ResponseWriter, r *http.Request)) *bedrockServer {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /model/{modelId}/converse-stream", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read request: %v", err)
		}
		if got := r.PathValue("modelId"); got != modelID {
			t.Errorf("model id in path = %q, want %q", got, modelID)
		}
		if !strings.Contains(r.Header.Get("Authorization"), "Credential="+testKeyID+"/") {
			t.Errorf("request not signed with the static credentials: %q", r.Header.Get("Authorization"))
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
	return &bedrockServer{srv}
}

// streamBody answers with a recorded event stream.
func streamBody(body []byte) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		w.Header().Set("X-Amzn-Requestid", "5f1b7c2e-0000-4000-8000-000000000000")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
	}
}

func newModel(t *testing.T, url string, cfg bedrock.Config) model.Model {
	t.Helper()
	client := bedrockruntime.New(bedrockruntime.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(url),
		Credentials:      credentials.NewStaticCredentialsProvider(testKeyID, testSecret, ""),
		RetryMaxAttempts: 1,
	})
	m, err := bedrock.NewProvider(client, cfg).Model(modelID)
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

func TestStreamText(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil, streamBody(recorded(t, "text")))
	resp, deltas, err := stream(t, newModel(t, srv.URL, bedrock.Config{}), userRequest("hi"))
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if want := []string{"Hel", "lo, ", "world"}; !reflect.DeepEqual(deltas, want) {
		t.Errorf("deltas = %q, want %q", deltas, want)
	}
	want := model.Response{Text: "Hello, world", StopReason: "end_turn", Usage: model.Usage{InputTokens: 12, OutputTokens: 5}}
	if !reflect.DeepEqual(resp, want) {
		t.Errorf("response = %+v, want %+v", resp, want)
	}
}

func TestStreamToolUse(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil, streamBody(recorded(t, "tool_use")))
	resp, deltas, err := stream(t, newModel(t, srv.URL, bedrock.Config{}), userRequest("look up 42"))
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if want := []string{"Let me look that up."}; !reflect.DeepEqual(deltas, want) {
		t.Errorf("deltas = %q, want %q", deltas, want)
	}
	want := model.Response{
		Text: "Let me look that up.",
		ToolCalls: []model.ToolCall{
			{ID: "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", Name: "lookup", Args: json.RawMessage(`{"id":42,"verbose":true}`)},
			{ID: "tooluse_Qm9XcRT1SvKj0bC3aDl2Ew", Name: "clock", Args: json.RawMessage(`{}`)},
		},
		StopReason: "tool_use",
		Usage:      model.Usage{InputTokens: 431, OutputTokens: 88},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Errorf("response =\n%+v\nwant\n%+v", resp, want)
	}
}

func TestStreamGuardrailIsRefusal(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil, streamBody(recorded(t, "guardrail")))
	resp, _, err := stream(t, newModel(t, srv.URL, bedrock.Config{}), userRequest("hi"))
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if resp.StopReason != model.StopRefusal || resp.Text != "Sorry, the model cannot answer this question." {
		t.Errorf("response = %+v, want the guardrail text and stop reason %q", resp, model.StopRefusal)
	}
}

func TestStreamErrors(t *testing.T) {
	t.Parallel()
	full := recorded(t, "text")
	tests := []struct {
		name     string
		respond  func(http.ResponseWriter, *http.Request)
		want     error
		contains []string
		tooLong  bool // a context-length refusal (model.ErrContextLength)
	}{
		{
			name: "HTTP 400 validation exception: input too long",
			respond: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Amzn-Errortype", "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, `{"message":"Input is too long for requested model."}`)
			},
			want:     bedrock.ErrInvalidRequest,
			contains: []string{"ValidationException", "too long"},
			tooLong:  true,
		},
		{
			name:     "throttling exception event",
			respond:  streamBody(recorded(t, "throttling")),
			want:     bedrock.ErrThrottled,
			contains: []string{modelID, "ThrottlingException", "Too many tokens"},
		},
		{
			name:     "model stream error exception event",
			respond:  streamBody(recorded(t, "model_stream_error")),
			want:     bedrock.ErrUnavailable,
			contains: []string{"ModelStreamErrorException", "Model stream processing failed."},
		},
		{
			name:     "stream ends before messageStop",
			respond:  streamBody(recorded(t, "truncated")),
			want:     bedrock.ErrBadResponse,
			contains: []string{"messageStop"},
		},
		{
			name:    "stream cut inside a delta",
			respond: streamBody(full[:len(encodeStream(t, scenarios["text"][:3]))-7]),
			want:    bedrock.ErrBadResponse,
		},
		{
			name:     "stream cut inside the metadata event",
			respond:  streamBody(full[:len(full)-10]),
			want:     bedrock.ErrBadResponse,
			contains: []string{"metadata"},
		},
		{
			name:     "tool input is not a JSON object",
			respond:  streamBody(recorded(t, "bad_tool_input")),
			want:     bedrock.ErrBadResponse,
			contains: []string{"lookup", "tooluse_bad"},
		},
		{
			name: "HTTP 400 validation exception",
			respond: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Amzn-Errortype", "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, `{"message":"A conversation must start with a user message. Try again with a conversation that starts with a user message."}`)
			},
			want:     bedrock.ErrInvalidRequest,
			contains: []string{"ValidationException", "must start with a user message"},
		},
		{
			// A service message that echoes signing material must not carry it into
			// the error, which is logged durably.
			name: "HTTP 403 echoing the signature",
			respond: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Amzn-Errortype", "InvalidSignatureException:http://internal.amazon.com/coral/com.amazon.coral.service/")
				w.WriteHeader(http.StatusForbidden)
				msg := "The request signature we calculated does not match the signature you provided. Authorization header: " +
					r.Header.Get("Authorization") + " key " + testKeyID
				b, _ := json.Marshal(map[string]string{"message": msg})
				_, _ = w.Write(b)
			},
			want:     bedrock.ErrAccessDenied,
			contains: []string{"InvalidSignatureException", "signature we calculated"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var authz string
			srv := newServer(t, func(_ *testing.T, r *http.Request, _ []byte) { authz = r.Header.Get("Authorization") }, tt.respond)
			_, _, err := stream(t, newModel(t, srv.URL, bedrock.Config{}), userRequest("hi"))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if got := model.IsContextLength(err); got != tt.tooLong {
				t.Errorf("IsContextLength(%v) = %v, want %v", err, got, tt.tooLong)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "bedrock: ") {
				t.Errorf("error %q is not package-prefixed", msg)
			}
			for _, s := range tt.contains {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not mention %q", msg, s)
				}
			}
			sig := authz[strings.LastIndex(authz, "Signature=")+len("Signature="):]
			for _, secret := range []string{testKeyID, testSecret, sig} {
				if strings.Contains(msg, secret) {
					t.Errorf("error %q carries credential material %q", msg, secret)
				}
			}
		})
	}
}

func TestStreamOnDeltaErrorAborts(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil, streamBody(recorded(t, "text")))
	m := newModel(t, srv.URL, bedrock.Config{})
	stop := errors.New("client gone")
	var calls int
	_, err := m.Stream(context.Background(), userRequest("hi"), func(model.Delta) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) {
		t.Fatalf("err = %v, want %v", err, stop)
	}
	if calls != 1 {
		t.Errorf("onDelta called %d times after failing, want 1", calls)
	}
}

func TestStreamContextCancel(t *testing.T) {
	t.Parallel()
	head := encodeStream(t, scenarios["text"][:2]) // messageStart + first delta
	srv := newServer(t, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(head)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the rest of the stream never comes
	})
	m := newModel(t, srv.URL, bedrock.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := m.Stream(ctx, userRequest("hi"), func(d model.Delta) error {
			if d.Text == "Hel" {
				cancel()
			}
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

func TestRequestMapping(t *testing.T) {
	t.Parallel()
	temp := float32(0.5)
	req := model.Request{
		System: "You are terse.",
		Messages: []model.Message{
			{Role: model.RoleUser, Text: "look up 12345678901234567890 and the time"},
			{Role: model.RoleAssistant, Text: "Looking.", ToolCalls: []model.ToolCall{
				{ID: "tooluse_1", Name: "lookup", Args: json.RawMessage(`{"id": 12345678901234567890, "tags": ["a", 1.5]}`)},
				{ID: "tooluse_2", Name: "clock", Args: json.RawMessage(`{}`)},
				{ID: "tooluse_3", Name: "lookup", Args: nil},
			}},
			{Role: model.RoleTool, ToolResults: []model.ToolResult{
				{CallID: "tooluse_1", Result: json.RawMessage(`{"name": "widget", "price": 9.99}`)},
				{CallID: "tooluse_2", Result: json.RawMessage(`"2024-05-01T00:00:00Z"`)},
				{CallID: "tooluse_3", Error: "cancelled before execution"},
			}},
			{Role: model.RoleUser, Text: "also: be quick"},
			{Role: model.RoleAssistant, Text: ""}, // empty: dropped
			{Role: model.RoleUser, Text: "thanks"},
		},
		Tools: []model.ToolSpec{
			{Name: "lookup", Description: "Looks up an item.", Schema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}`)},
			{Name: "clock", Description: "Current time."},
		},
	}
	want := `{
	  "system": [{"text": "You are terse."}],
	  "messages": [
	    {"role": "user", "content": [{"text": "look up 12345678901234567890 and the time"}]},
	    {"role": "assistant", "content": [
	      {"text": "Looking."},
	      {"toolUse": {"toolUseId": "tooluse_1", "name": "lookup", "input": {"id": 12345678901234567890, "tags": ["a", 1.5]}}},
	      {"toolUse": {"toolUseId": "tooluse_2", "name": "clock", "input": {}}},
	      {"toolUse": {"toolUseId": "tooluse_3", "name": "lookup", "input": {}}}
	    ]},
	    {"role": "user", "content": [
	      {"toolResult": {"toolUseId": "tooluse_1", "content": [{"json": {"name": "widget", "price": 9.99}}], "status": "success"}},
	      {"toolResult": {"toolUseId": "tooluse_2", "content": [{"text": "\"2024-05-01T00:00:00Z\""}], "status": "success"}},
	      {"toolResult": {"toolUseId": "tooluse_3", "content": [{"text": "cancelled before execution"}], "status": "error"}},
	      {"text": "also: be quick"},
	      {"text": "thanks"}
	    ]}
	  ],
	  "toolConfig": {"tools": [
	    {"toolSpec": {"name": "lookup", "description": "Looks up an item.", "inputSchema": {"json": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}}},
	    {"toolSpec": {"name": "clock", "description": "Current time.", "inputSchema": {"json": {"type": "object", "properties": {}}}}}
	  ]},
	  "inferenceConfig": {"maxTokens": 1024, "temperature": 0.5}
	}`
	check := func(t *testing.T, r *http.Request, body []byte) {
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("content type = %q", ct)
		}
		if got, want := decodeExact(t, body), decodeExact(t, []byte(want)); !reflect.DeepEqual(got, want) {
			t.Errorf("request body =\n%s\nwant\n%s", body, mustCompact(t, want))
		}
	}
	srv := newServer(t, check, streamBody(recorded(t, "text")))
	if _, _, err := stream(t, newModel(t, srv.URL, bedrock.Config{MaxTokens: 1024, Temperature: &temp}), req); err != nil {
		t.Fatalf("Stream: %v", err)
	}
}

func TestRequestMappingRejectsBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  model.Request
	}{
		{"unknown role", model.Request{Messages: []model.Message{{Role: "system", Text: "x"}}}},
		{"tool args not JSON", model.Request{Messages: []model.Message{{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "a", Name: "b", Args: json.RawMessage(`{`)}}}}}},
		{"tool result not JSON", model.Request{Messages: []model.Message{{Role: model.RoleTool, ToolResults: []model.ToolResult{{CallID: "a", Result: json.RawMessage(`nope`)}}}}}},
		{"tool schema not JSON", model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: "x"}}, Tools: []model.ToolSpec{{Name: "t", Schema: json.RawMessage(`{]`)}}}},
	}
	// No request may reach the server.
	srv := newServer(t, func(t *testing.T, _ *http.Request, _ []byte) { t.Error("request sent for an invalid model request") }, streamBody(nil))
	m := newModel(t, srv.URL, bedrock.Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := stream(t, m, tt.req)
			if !errors.Is(err, bedrock.ErrInvalidRequest) {
				t.Fatalf("err = %v, want ErrInvalidRequest", err)
			}
		})
	}
}

func TestProvider(t *testing.T) {
	t.Parallel()
	p := bedrock.NewProvider(bedrockruntime.New(bedrockruntime.Options{Region: "us-east-1"}), bedrock.Config{})
	if _, err := p.Model(""); !errors.Is(err, model.ErrBadSpec) {
		t.Errorf("Model(\"\") err = %v, want ErrBadSpec", err)
	}
	if m, err := p.Model(modelID); err != nil || m == nil {
		t.Errorf("Model(%q) = %v, %v", modelID, m, err)
	}

	cfg, err := bedrock.ParseConfig(json.RawMessage(`{"max_tokens": 2048, "temperature": 0.3}`))
	if err != nil || cfg.MaxTokens != 2048 || cfg.Temperature == nil || *cfg.Temperature != 0.3 {
		t.Errorf("ParseConfig = %+v, %v", cfg, err)
	}
	if cfg, err := bedrock.ParseConfig(nil); err != nil || cfg != (bedrock.Config{}) {
		t.Errorf("ParseConfig(nil) = %+v, %v", cfg, err)
	}
	for _, bad := range []string{`{"max_token": 1}`, `{"max_tokens": -1}`, `[`} {
		if _, err := bedrock.ParseConfig(json.RawMessage(bad)); !errors.Is(err, bedrock.ErrInvalidRequest) {
			t.Errorf("ParseConfig(%s) err = %v, want ErrInvalidRequest", bad, err)
		}
	}
}

// decodeExact decodes JSON keeping numbers as their literal text.
func decodeExact(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func mustCompact(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
