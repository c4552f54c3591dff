package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/dynamotest"
	"github.com/terret/terret-ws/internal/webui"
)

func TestLoopbackAddr(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:3001", true},
		{"127.0.0.2:0", true},
		{"[::1]:3001", true},
		{"localhost:3001", true},
		{"0.0.0.0:3001", false},
		{":3001", false},
		{"[::]:3001", false},
		{"192.168.1.5:3001", false},
		{"example.com:3001", false},
		{"garbage", false},
	}
	for _, tt := range tests {
		if got := loopbackAddr(tt.addr); got != tt.want {
			t.Errorf("loopbackAddr(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

// TestDevTokenGuard checks the Host and Origin of /dev/token exactly: scheme, host and
// port; a DNS name other than localhost is a rebinding and refused.
func TestDevTokenGuard(t *testing.T) {
	tests := []struct {
		name, host, origin string
		loopbackOnly       bool
		want               int
	}{
		{"same origin", "127.0.0.1:3001", "http://127.0.0.1:3001", true, http.StatusOK},
		{"no Origin (curl)", "127.0.0.1:3001", "", true, http.StatusOK},
		{"localhost", "localhost:3001", "http://localhost:3001", true, http.StatusOK},
		{"IPv6 loopback", "[::1]:3001", "http://[::1]:3001", true, http.StatusOK},
		{"wrong port in Host", "127.0.0.1:3002", "", true, http.StatusForbidden},
		{"no port in Host", "127.0.0.1", "", true, http.StatusForbidden},
		{"rebound DNS name", "evil.example:3001", "http://evil.example:3001", true, http.StatusForbidden},
		{"https Origin", "127.0.0.1:3001", "https://127.0.0.1:3001", true, http.StatusForbidden},
		{"Origin on another port", "127.0.0.1:3001", "http://127.0.0.1:3002", true, http.StatusForbidden},
		{"Origin of another site", "127.0.0.1:3001", "http://evil.example", true, http.StatusForbidden},
		{"Origin without port", "127.0.0.1:3001", "http://127.0.0.1", true, http.StatusForbidden},
		{"null Origin", "127.0.0.1:3001", "null", true, http.StatusForbidden},
		{"Origin with a path", "127.0.0.1:3001", "http://127.0.0.1:3001/x", true, http.StatusForbidden},
		{"LAN address, loopback bind", "192.168.1.5:3001", "http://192.168.1.5:3001", true, http.StatusForbidden},
		{"LAN address, remote allowed", "192.168.1.5:3001", "http://192.168.1.5:3001", false, http.StatusOK},
		{"rebound name, remote allowed", "evil.example:3001", "", false, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reached := false
			g := &devTokenGuard{loopbackOnly: tt.loopbackOnly, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true })}
			port := "3001"
			g.port.Store(&port)
			req := httptest.NewRequest(http.MethodPost, "/dev/token?agent=a", nil)
			req.Host = tt.host
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			if rec.Code != tt.want || reached != (tt.want == http.StatusOK) {
				t.Fatalf("status %d (handler reached %v), want %d", rec.Code, reached, tt.want)
			}
		})
	}
	// Other paths are not the guard's business: the page loads under any Host.
	reached := false
	g := &devTokenGuard{loopbackOnly: true, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true })}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Host = "evil.example:1"
	g.ServeHTTP(httptest.NewRecorder(), req)
	if !reached {
		t.Fatal("the page was refused")
	}
}

// TestDevRemoteAddr runs the binary on 0.0.0.0: it warns and /dev/token is off; with
// --allow-remote-dev-token it warns that tokens are served, and serves them.
func TestDevRemoteAddr(t *testing.T) {
	t.Parallel()
	endpoint := dynamotest.Endpoint(t)
	tests := []struct {
		name     string
		extra    []string
		warning  string
		wantCode int
	}{
		{"default", nil, "/dev/token is off (--allow-remote-dev-token serves it anyway)", http.StatusNotFound},
		{"allowed", []string{"--allow-remote-dev-token"}, "lets anyone who reaches it mint tokens", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := t.TempDir()
			ready := filepath.Join(state, "ready.json")
			args := append([]string{"dev", "--addr", "0.0.0.0:0", "--ready-file", ready, "--dynamodb-endpoint", endpoint, "--table-prefix", dynamotest.UniqueName("r") + "-"}, tt.extra...)
			cmd := exec.Command(terretBin(t), args...)
			cmd.Env = append(os.Environ(), "TERRET_STATE_DIR="+state)
			stdout, stderr := &syncBuf{}, &syncBuf{}
			cmd.Stdout, cmd.Stderr = stdout, stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			stderr.waitFor(t, tt.warning)
			stdout.waitFor(t, "terret dev: listening on") // written after the ready file
			b, err := os.ReadFile(ready)
			var r devState
			if err != nil || json.Unmarshal(b, &r) != nil {
				t.Fatalf("ready file: %v %s", err, b)
			}
			_, port, _ := net.SplitHostPort(r.Addr)
			key := ""
			if tt.wantCode == http.StatusOK {
				_, key, _ = strings.Cut(r.PageURL, webui.KeyFragment)
				if key == "" || !strings.Contains(stdout.String(), "terret dev: web page at "+r.PageURL+"\n") {
					t.Fatalf("page_url %q: want the address with its key, printed on the console:\n%s", r.PageURL, stdout)
				}
			} else if r.PageURL != "" {
				t.Fatalf("page_url %q with /dev/token off", r.PageURL)
			}
			req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:"+port+"/dev/token?agent=a", nil)
			req.Header.Set(webui.DevTokenHeader, key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("/dev/token answered %d %s, want %d", resp.StatusCode, body, tt.wantCode)
			}
			if tt.wantCode == http.StatusOK && !strings.Contains(string(body), `"token":"tt_`) {
				t.Fatalf("/dev/token body %s, want a token", body)
			}
		})
	}
}
