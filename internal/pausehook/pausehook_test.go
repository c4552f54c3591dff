package pausehook_test

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/pausehook"
)

// watchdog bounds a wait that only a broken hook makes long.
const watchdog = 30 * time.Second

// TestRemoteHeldUntilHookReturns: Remote delivers the arrival to the server's hook and
// returns only after the hook has.
func TestRemoteHeldUntilHookReturns(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan pausehook.Arrival, 1), make(chan struct{})
	var hookReturned atomic.Bool
	srv, err := pausehook.Listen(func(point, agentID string) {
		arrived <- pausehook.Arrival{Point: point, AgentID: agentID}
		<-release
		hookReturned.Store(true)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var logs bytes.Buffer
	hook := pausehook.Remote(srv.URL(), time.Minute, logger(&logs))
	returned := make(chan bool, 1)
	go func() {
		hook("run", "a1")
		returned <- hookReturned.Load()
	}()
	select {
	case got := <-arrived:
		if want := (pausehook.Arrival{Point: "run", AgentID: "a1"}); got != want {
			t.Errorf("arrival %+v, want %+v", got, want)
		}
	case <-time.After(watchdog):
		t.Fatalf("no arrival within %v", watchdog)
	}
	select {
	case <-returned:
		t.Fatal("Remote returned while the hook held it; want it held until the hook returns")
	default:
	}
	close(release)
	select {
	case after := <-returned:
		if !after {
			t.Error("Remote returned before the server's hook did")
		}
	case <-time.After(watchdog):
		t.Fatalf("Remote still held %v after the hook's release", watchdog)
	}
	if logs.Len() != 0 {
		t.Errorf("logged %q, want nothing for an answered post", logs.String())
	}
}

// TestRemoteCarriesOn: a post that fails — nobody listening, a refused arrival, a server
// that never answers — returns, logged at warn with the point, and the runtime goes on.
func TestRemoteCarriesOn(t *testing.T) {
	t.Parallel()
	closedPort := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		url := "http://" + ln.Addr().String() + "/pause"
		ln.Close()
		return url
	}
	serving := func(h http.HandlerFunc) func(t *testing.T) string {
		return func(t *testing.T) string {
			s := httptest.NewServer(h)
			t.Cleanup(s.Close)
			return s.URL
		}
	}
	for _, tc := range []struct {
		name     string
		endpoint func(t *testing.T) string
		want     string // in the warning
	}{
		{"nobody listening", closedPort, "connection refused"},
		{"refused arrival", serving(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusInternalServerError) }), "500"},
		{"never answers", serving(func(_ http.ResponseWriter, r *http.Request) {
			// Read to the end: only then does the server notice the client hang up.
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}), "Client.Timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs syncBuffer
			hook := pausehook.Remote(tc.endpoint(t), 200*time.Millisecond, logger(&logs))
			done := make(chan struct{})
			go func() { hook("chunk", "a2"); close(done) }()
			select {
			case <-done:
			case <-time.After(watchdog):
				t.Fatalf("Remote still held after %v; want it to carry on", watchdog)
			}
			got := logs.String()
			for _, want := range []string{`"level":"WARN"`, `"point":"chunk"`, `"agent_id":"a2"`, tc.want} {
				if !strings.Contains(got, want) {
					t.Errorf("log %q, want it to hold %s", got, want)
				}
			}
		})
	}
}

// TestHandlerRefuses: anything but a POSTed arrival with both fields is refused, and the
// hook is not called.
func TestHandlerRefuses(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	h := pausehook.Handler(func(string, string) { calls.Add(1) })
	for _, tc := range []struct {
		name, method, body string
		want               int
	}{
		{"get", http.MethodGet, "", http.StatusMethodNotAllowed},
		{"not json", http.MethodPost, "run a1", http.StatusBadRequest},
		{"no agent", http.MethodPost, `{"point":"run"}`, http.StatusBadRequest},
		{"no point", http.MethodPost, `{"agent_id":"a1"}`, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(tc.method, "/pause", strings.NewReader(tc.body)))
			if w.Code != tc.want {
				t.Errorf("%s %q: status %d, want %d", tc.method, tc.body, w.Code, tc.want)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the hook was called %d times, want 0", n)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/pause", strings.NewReader(`{"point":"run","agent_id":"a1"}`)))
	if w.Code != http.StatusNoContent || calls.Load() != 1 {
		t.Errorf("a valid arrival: status %d and %d hook calls, want %d and 1", w.Code, calls.Load(), http.StatusNoContent)
	}
}

func logger(w interface{ Write([]byte) (int, error) }) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, nil))
}

// syncBuffer is a bytes.Buffer safe for the logger's writes and the test's read.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
