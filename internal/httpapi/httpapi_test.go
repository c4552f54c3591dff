package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/protocol"
)

// tokens is one agent's one token; a store error for agent "broken".
type tokens struct{ agent, token string }

func (t tokens) CheckRole(_ context.Context, agentID, token string) (string, string, error) {
	switch {
	case agentID == "broken":
		return "", "", errors.New("table throttled")
	case agentID == t.agent && token == t.token:
		return auth.Hash(token), auth.RoleDriver, nil
	case agentID == t.agent && token == "watch-tok":
		return auth.Hash(token), auth.RoleObserver, nil
	}
	return "", "", fmt.Errorf("check: %w", auth.ErrUnauthorized)
}

func TestRouteAuthenticatesFirst(t *testing.T) {
	s := New(tokens{"a1", "s3cr3t-tok"}, nil)
	var got []Caller
	s.RouteDriver("POST /agents/{agent_id}/frames", func(w http.ResponseWriter, r *http.Request, c Caller) {
		got = append(got, c)
		WriteJSON(w, http.StatusAccepted, map[string]bool{"accepted": true})
	})
	tests := []struct {
		name, method, path, auth string
		status                   int
		code                     protocol.Code
	}{
		{"good token", "POST", "/agents/a1/frames", "Bearer s3cr3t-tok", 202, ""},
		{"no token", "POST", "/agents/a1/frames", "", 401, protocol.CodeUnauthorized},
		{"wrong token", "POST", "/agents/a1/frames", "Bearer nope", 401, protocol.CodeUnauthorized},
		{"another agent's token", "POST", "/agents/a2/frames", "Bearer s3cr3t-tok", 401, protocol.CodeUnauthorized},
		{"store failure", "POST", "/agents/broken/frames", "Bearer s3cr3t-tok", 500, protocol.CodeInternal},
		{"unknown path", "POST", "/agents/a1/nothing", "Bearer s3cr3t-tok", 400, protocol.CodeBadFrame},
		{"wrong method", "GET", "/agents/a1/frames", "Bearer s3cr3t-tok", 400, protocol.CodeBadFrame},
		{"an observer's token on a driver's path", "POST", "/agents/a1/frames", "Bearer watch-tok", 403, protocol.CodeForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got = nil
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader("{}"))
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d (body %s)", rec.Code, tt.status, rec.Body)
			}
			if tt.code == "" {
				if len(got) != 1 || got[0].AgentID != "a1" || got[0].TokenHash != auth.Hash("s3cr3t-tok") {
					t.Fatalf("handler calls %+v, want one for a1 with the token's hash", got)
				}
				return
			}
			if len(got) != 0 {
				t.Fatalf("handler ran for a refused request: %+v", got)
			}
			var e protocol.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Type != "error" || e.Code != tt.code || e.Message == "" {
				t.Fatalf("body %q (%v), want an error frame with code %s", rec.Body, err, tt.code)
			}
			if strings.Contains(rec.Body.String(), "s3cr3t") && tt.code != protocol.CodeBadFrame {
				t.Fatalf("body %q carries the token", rec.Body)
			}
		})
	}
}

func TestStatusFor(t *testing.T) {
	for code, want := range map[protocol.Code]int{
		protocol.CodeUnauthorized: 401, protocol.CodeForbidden: 403, protocol.CodeBadFrame: 400,
		protocol.CodeNotRunning: 409, protocol.CodeStaleCall: 409, protocol.CodeStale: 409,
		protocol.CodeUnsupported: 501, protocol.CodeInternal: 500,
	} {
		if got := statusFor(code); got != want {
			t.Errorf("statusFor(%s) = %d, want %d", code, got, want)
		}
	}
}

func TestReadBodyBound(t *testing.T) {
	for _, tt := range []struct {
		n   int
		err error
	}{{10, nil}, {11, ErrBodyTooLarge}, {0, nil}} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(strings.Repeat("x", tt.n)))
		b, err := ReadBody(r, 10)
		if !errors.Is(err, tt.err) || (err == nil && len(b) != tt.n) {
			t.Errorf("ReadBody of %d bytes, bound 10: %d bytes, %v; want %v", tt.n, len(b), err, tt.err)
		}
	}
}
