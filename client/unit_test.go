package client_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/protocol"
)

func TestAgentURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		base, agent, want string
	}{
		{"ws://127.0.0.1:3001/agents/{agent_id}/ws", "demo", "ws://127.0.0.1:3001/agents/demo/ws"},
		{"ws://127.0.0.1:3001", "demo", "ws://127.0.0.1:3001/agents/demo/ws"},
		{"http://127.0.0.1:3001/", "demo", "ws://127.0.0.1:3001/agents/demo/ws"},
		{"wss://d1.cloudfront.net/agents/demo/ws", "demo", "wss://d1.cloudfront.net/agents/demo/ws"},
		{"wss://d1.cloudfront.net/agents/demo/ws", "", "wss://d1.cloudfront.net/agents/demo/ws"},
		{"wss://abc.execute-api.us-east-1.amazonaws.com/prod", "agent-1", "wss://abc.execute-api.us-east-1.amazonaws.com/prod?agent_id=agent-1"},
		{"https://abc.execute-api.us-east-1.amazonaws.com/prod?agent_id=agent-1", "", "wss://abc.execute-api.us-east-1.amazonaws.com/prod?agent_id=agent-1"},
		{"wss://abc.execute-api.us-east-1.amazonaws.com/prod?agent_id=agent-1", "agent-1", "wss://abc.execute-api.us-east-1.amazonaws.com/prod?agent_id=agent-1"},
		{"wss://abc.execute-api.us-east-1.amazonaws.com/prod?agent_id={agent_id}", "a.b_c", "wss://abc.execute-api.us-east-1.amazonaws.com/prod?agent_id=a.b_c"},
	}
	for _, tc := range tests {
		got, err := client.AgentURL(tc.base, tc.agent)
		if err != nil || got != tc.want {
			t.Errorf("AgentURL(%q, %q) = %q, %v; want %q", tc.base, tc.agent, got, err, tc.want)
		}
	}
	for _, bad := range []struct{ base, agent string }{
		{"ws://h/agents/other/ws", "demo"},        // names another agent
		{"wss://api/prod?agent_id=other", "demo"}, // likewise
		{"ftp://h/agents/demo/ws", "demo"},        // not a WebSocket URL
		{"ws://h/agents/{agent_id}/ws", ""},       // a template needs the agent
		{"wss://api/prod", ""},                    // names no agent
		{"ws://h", "bad/id"},                      // not an agent id
		{"//h/agents/demo/ws", "demo"},            // no scheme
		{"ws:///agents/demo/ws", "demo"},          // no host
		{"ws://h/agents//ws", ""},                 // empty id
	} {
		if got, err := client.AgentURL(bad.base, bad.agent); !errors.Is(err, client.ErrBadURL) {
			t.Errorf("AgentURL(%q, %q) = %q, %v; want ErrBadURL", bad.base, bad.agent, got, err)
		}
	}
	for _, id := range []string{"a", "A-b_c.9", "x/y", "", "é", strings.Repeat("a", 129)} {
		_, err := client.AgentURL("ws://h", id)
		if (err == nil) != auth.ValidAgentID(id) {
			t.Errorf("agent id %q: client says %v, the server's rule %v", id, err, auth.ValidAgentID(id))
		}
	}
	if id, err := client.AgentID("wss://api/prod?agent_id=agent-1"); id != "agent-1" || err != nil {
		t.Errorf("AgentID = %q, %v", id, err)
	}
}

// TestCodes: every code of the protocol has its sentinel and the server's closing rule.
func TestCodes(t *testing.T) {
	t.Parallel()
	sentinels := map[protocol.Code]error{
		protocol.CodeUnauthorized: client.ErrUnauthorized, protocol.CodeSuperseded: client.ErrSuperseded,
		protocol.CodeLagged: client.ErrLagged, protocol.CodeBadFrame: client.ErrBadFrame,
		protocol.CodeNotRunning: client.ErrNotRunning, protocol.CodeStaleCall: client.ErrStaleCall,
		protocol.CodeUnsupported: client.ErrUnsupported, protocol.CodeInternal: client.ErrInternal,
		protocol.CodeStale: client.ErrStale,
	}
	for _, code := range protocol.Codes() {
		pe := &client.ProtocolError{Code: client.Code(code), Message: "m"}
		if !errors.Is(pe, sentinels[code]) || pe.Code.Closes() != code.Closes() {
			t.Errorf("code %s: errors.Is %v, Closes %v", code, errors.Is(pe, sentinels[code]), pe.Code.Closes())
		}
		for other, s := range sentinels {
			if other != code && errors.Is(pe, s) {
				t.Errorf("code %s matches %v", code, s)
			}
		}
	}
	if pe := (&client.ProtocolError{Code: "new_code"}); pe.Code.Closes() || errors.Unwrap(pe) != nil {
		t.Errorf("an unknown code closes or matches a sentinel")
	}
	if client.Subprotocol != auth.Subprotocol || client.SubprotocolBearer != auth.SubprotocolBearer {
		t.Errorf("subprotocols differ from the server's")
	}
}

func TestFileCursor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.cursor")
	c := client.NewFileCursor(path)
	if seq, ok, err := c.Load(); seq != 0 || ok || err != nil {
		t.Fatalf("Load of a missing file = %d %v %v", seq, ok, err)
	}
	for _, seq := range []int64{0, 41, 7} {
		if err := c.Store(seq); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := client.NewFileCursor(path).Load(); got != seq || !ok || err != nil {
			t.Fatalf("after Store(%d): Load = %d %v %v", seq, got, ok, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
	if err := os.WriteFile(path, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Load(); err == nil {
		t.Fatal("Load of a corrupt cursor succeeded")
	}
	if err := client.NewFileCursor(filepath.Join(dir, "missing-dir", "c")).Store(1); err == nil {
		t.Fatal("Store into a missing directory succeeded")
	}

	var m client.MemoryCursor
	if _, ok, _ := m.Load(); ok {
		t.Fatal("zero MemoryCursor holds a seq")
	}
	_ = m.Store(3)
	if seq, ok, _ := m.Load(); seq != 3 || !ok {
		t.Fatalf("MemoryCursor = %d %v", seq, ok)
	}
}
