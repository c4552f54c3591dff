package agent_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/model/openai"
)

// syncLog is a log/slog destination safe for the runner's goroutines.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *syncLog) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestProviderEchoingTheKey: an OpenAI-compatible server that answers every call with
// an error echoing the key base64-encoded, hex-encoded and split by a line break fails
// the turn, and no form of the key reaches turn/end's reason, any event, or the log.
func TestProviderEchoingTheKey(t *testing.T) {
	t.Parallel()
	const key = "sk-echo-Q7wE9rT2yU4iO6pA8sD0fG"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		msg := fmt.Sprintf("Incorrect API key %s (base64 %s, hex %s)", k[:9]+"\n"+k[9:],
			base64.StdEncoding.EncodeToString([]byte(k)), hex.EncodeToString([]byte(k)))
		b, _ := json.Marshal(map[string]any{"error": map[string]string{"message": msg}})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	prov, err := openai.NewProvider(nil, openai.Config{BaseURL: srv.URL + "/v1", APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	models := model.NewRegistry()
	if err := models.Register("acme", prov); err != nil {
		t.Fatal(err)
	}
	var logs syncLog
	p := allowing("acme/*")
	p.Models.Main = "acme/gpt"
	e := newEnv(t, opts{models: models, profile: p})
	e.restart(func(c *agent.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	e.inject("hi", true)
	evs := e.waitTurnEnds(1)
	e.settle()
	end := ofType(evs, agent.TypeTurnEnd)[0]
	if str(end, "status") != agent.StatusFailed || !strings.Contains(str(end, "reason"), "HTTP 401") {
		t.Fatalf("turn/end %s, want failed with the status", end.Payload)
	}
	all, _ := json.Marshal(evs)
	for where, text := range map[string]string{"events": string(all), "log": logs.String()} {
		flat := strings.Join(strings.Fields(strings.ReplaceAll(text, `\n`, " ")), "")
		for _, f := range []string{key, key[9:], base64.StdEncoding.EncodeToString([]byte(key))[:20], hex.EncodeToString([]byte(key))[:20]} {
			if strings.Contains(flat, f) {
				t.Errorf("%s carry a form of the key (%s):\n%s", where, f, text)
			}
		}
	}
}
