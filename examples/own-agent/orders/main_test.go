package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/tools/mcptool"
)

// TestHTTP: terret's MCP client (the official SDK) connects to the server's streamable
// HTTP form (how the example runs on AWS), lists lookup_order and calls it, for a known
// order and for an unknown one (a tool error the model reads). The stdio form is
// examples/own-agent's TestExample.
func TestHTTP(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", serveHTTP)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	spec, _ := json.Marshal(map[string]string{"url": srv.URL + "/mcp"})
	ts, err := mcptool.Build(t.Context(), spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].Definition().Name != "lookup_order" {
		t.Fatalf("tools %v, want lookup_order alone", ts)
	}
	for _, tc := range []struct {
		args, want string
		fails      bool
	}{
		{`{"order_id":"1042"}`, `{"text":"order 1042: shipped on 2026-12-01 with DHL, tracking 00340434161094042557"}`, false},
		{`{"order_id":"#1043"}`, `{"text":"order 1043: paid, packed, waiting for the carrier"}`, false},
		{`{"order_id":"9"}`, `no order "9"`, true},
	} {
		out, err := ts[0].Call(t.Context(), json.RawMessage(tc.args))
		switch {
		case tc.fails && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("call %s: %s, %v; want an error saying %s", tc.args, out, err, tc.want)
		case !tc.fails && (err != nil || string(out) != tc.want):
			t.Errorf("call %s: %s, %v; want %s", tc.args, out, err, tc.want)
		}
	}
}
