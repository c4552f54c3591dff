package webui_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/webui"
)

// syncWriter lets the test read what the service logs while it still runs.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func get(t *testing.T, h http.Handler, method, target string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	r.Host = "127.0.0.1:3001"
	for k, v := range header {
		if k == "Host" {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestStaticFiles(t *testing.T) {
	t.Parallel()
	h := webui.Handler(webui.Options{})
	tests := []struct {
		path                  string
		status                int
		contentType, contains string
	}{
		{"/", http.StatusOK, "text/html; charset=utf-8", `<script src="app.js" defer></script>`},
		{"/app.js", http.StatusOK, "text/javascript; charset=utf-8", "terret.bearer."},
		{"/style.css", http.StatusOK, "text/css; charset=utf-8", ".chat"},
		{"/index.html", http.StatusNotFound, "", ""}, // the page is "/" only
		{"/nope", http.StatusNotFound, "", ""},
		{"/dev/token?agent=a1", http.StatusNotFound, "", ""}, // no minter: no tokens
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			w := get(t, h, http.MethodGet, tc.path, map[string]string{webui.DevTokenHeader: "1"})
			if w.Code != tc.status {
				t.Fatalf("GET %s: status %d, want %d", tc.path, w.Code, tc.status)
			}
			if tc.status != http.StatusOK {
				return
			}
			if got := w.Header().Get("Content-Type"); got != tc.contentType {
				t.Errorf("Content-Type %q, want %q", got, tc.contentType)
			}
			if !strings.Contains(w.Body.String(), tc.contains) {
				t.Errorf("body lacks %q", tc.contains)
			}
			if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Errorf("Content-Security-Policy %q does not restrict scripts", csp)
			}
		})
	}
}

// TestDevToken mints real tokens in the connections table and checks that only a
// same-site request from the page gets one.
func TestDevToken(t *testing.T) {
	t.Parallel()
	names := dynamotest.CreateTables(t)
	store := auth.New(dynamotest.Client(t), names["ConnectionsTable"])
	const key = "0123456789abcdef0123456789abcdef"
	h := webui.Handler(webui.Options{DevToken: store.Create, DevTokenKey: key})
	ok := map[string]string{webui.DevTokenHeader: key}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{webui.DevTokenHeader: key}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name, method, target string
		header               map[string]string
		status               int
	}{
		{"GET", http.MethodGet, "/dev/token?agent=a1", ok, http.StatusOK},
		{"POST", http.MethodPost, "/dev/token?agent=a1", ok, http.StatusOK},
		{"localhost", http.MethodGet, "/dev/token?agent=a1", with(map[string]string{"Host": "localhost:3001"}), http.StatusOK},
		{"same origin", http.MethodPost, "/dev/token?agent=a1", with(map[string]string{"Origin": "http://127.0.0.1:3001"}), http.StatusOK},
		{"no header", http.MethodGet, "/dev/token?agent=a1", nil, http.StatusForbidden},
		// The header without the user's key: what any program or user of the machine sends.
		{"header without the key", http.MethodGet, "/dev/token?agent=a1", map[string]string{webui.DevTokenHeader: "1"}, http.StatusForbidden},
		{"another key", http.MethodPost, "/dev/token?agent=a1", map[string]string{webui.DevTokenHeader: "0123456789abcdef0123456789abcdee"}, http.StatusForbidden},
		{"the key's prefix", http.MethodGet, "/dev/token?agent=a1", map[string]string{webui.DevTokenHeader: key[:16]}, http.StatusForbidden},
		{"rebound name", http.MethodGet, "/dev/token?agent=a1", with(map[string]string{"Host": "evil.example:3001"}), http.StatusForbidden},
		{"other origin", http.MethodPost, "/dev/token?agent=a1", with(map[string]string{"Origin": "https://evil.example"}), http.StatusForbidden},
		{"HEAD", http.MethodHead, "/dev/token?agent=a1", ok, http.StatusMethodNotAllowed},
		{"no agent", http.MethodGet, "/dev/token", ok, http.StatusBadRequest},
		{"bad agent", http.MethodGet, "/dev/token?agent=a%2Fb", ok, http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := get(t, h, tc.method, tc.target, tc.header)
			if w.Code != tc.status {
				t.Fatalf("%s %s: status %d (%s), want %d", tc.method, tc.target, w.Code, strings.TrimSpace(w.Body.String()), tc.status)
			}
			if got := w.Header().Get("Cache-Control"); got != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", got)
			}
			if tc.status != http.StatusOK {
				if strings.Contains(w.Body.String(), auth.TokenPrefix) {
					t.Fatalf("refused request got a token: %s", w.Body)
				}
				return
			}
			var body struct {
				AgentID string `json:"agent_id"`
				Token   string `json:"token"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", w.Body, err)
			}
			if body.AgentID != "a1" {
				t.Errorf("agent_id %q, want a1", body.AgentID)
			}
			// The token opens a1's socket and no other agent's.
			if _, err := store.Check(context.Background(), "a1", body.Token); err != nil {
				t.Fatalf("minted token does not check for a1: %v", err)
			}
			if _, err := store.Check(context.Background(), "a2", body.Token); err == nil {
				t.Fatal("minted token checks for a2")
			}
		})
	}
}
