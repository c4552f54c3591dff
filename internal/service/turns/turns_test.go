package turns_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/profile"
	"github.com/terret/terret-ws/internal/service/turns"
	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/tools/mcptool"
)

// TestBedrockRegions: a bedrock entry's region reaches the request's signature (the
// client of that region), "" is the configuration's own, and the model id is the
// one the spec names.
func TestBedrockRegions(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		_, scope, _ := strings.Cut(auth, "Credential=AKID/")
		parts := strings.Split(scope, "/")
		region := ""
		if len(parts) > 2 {
			region = parts[1]
		}
		mu.Lock()
		seen = append(seen, region+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amzn-ErrorType", "AccessDeniedException")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": "no"})
	}))
	defer srv.Close()
	cfg := aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")}
	build := turns.Kit().Bedrock(cfg)
	for _, region := range []string{"", "eu-central-1"} {
		m, err := build(region, profile.BedrockConfig{MaxTokens: 10}).Model("anthropic.claude")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Stream(context.Background(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: "hi"}}}, nil); err == nil {
			t.Errorf("region %q: the call to a server that refuses it succeeded", region)
		}
	}
	want := []string{"us-east-1 /model/anthropic.claude/converse-stream", "eu-central-1 /model/anthropic.claude/converse-stream"}
	if strings.Join(seen, "; ") != strings.Join(want, "; ") {
		t.Errorf("requests %q, want %q", seen, want)
	}
}

// TestMCPKind: the kit's mcp kind refuses command servers where local is false (in
// Lambda there is no program to start).
func TestMCPKind(t *testing.T) {
	build := turns.Kit().MCP(nil, profile.Env{}, false)
	_, err := build(tools.ToolConfig{Name: "l", Kind: mcptool.Kind, Spec: json.RawMessage(`{"command": ["/nonexistent/server"]}`)})
	if !errors.Is(err, mcptool.ErrCommandRefused) {
		t.Errorf("MCP(local false)(command spec) = %v, want ErrCommandRefused", err)
	}
}
