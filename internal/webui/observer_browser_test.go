package webui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/client"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/dynamotest"
)

// observerTurn is the turn the driver sends while the page watches: a tool call, a call
// that needs an approval (which the driver gives), and a reply.
const observerTurn = `{"script":[{"call":[{"tool":"echo","args":{"text":"seen by the observer"}}]},` +
	`{"call":[{"tool":"guarded_echo","args":{"text":"approve me"}}]},{"say":"observed and done"}]}`

// TestBrowserObserver: the page opened from a share link with an observer token
// (#agent=ID&observe=TOKEN) follows a turn that a Go client drives with the driver's
// token (web-tests/observer.test.mjs). The page shows the turn's events in the order the
// driver got them (the same seqs and types), the tool calls, the approval and the
// reply; its controls (message, send, cancel, model, policy, approve and deny) are
// disabled and it sends no frame but subscribe; and the driver, connected before the
// page and after, is never superseded, never reconnects and gets every event once.
func TestBrowserObserver(t *testing.T) {
	t.Parallel()
	webTests(t)
	ps := startPageStack(t)
	agent := dynamotest.UniqueName("obs-")
	tokens := auth.New(dynamolocal.Client(ps.endpoint), ps.st.Tables["ConnectionsTable"])
	ctx := context.Background()
	driverTok, err := tokens.Create(ctx, agent)
	if err != nil {
		t.Fatal(err)
	}
	observerTok, err := tokens.CreateRole(ctx, agent, 0, auth.RoleObserver)
	if err != nil {
		t.Fatal(err)
	}

	d := dialDriver(t, ps.st.WebSocketURL()+"/agents/"+agent+"/ws", driverTok)
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	ps.run(t, "observer.test.mjs", "AGENT_ID="+agent, "OBSERVER_TOKEN="+observerTok, "DRIVER_URL="+srv.URL)

	// The driver is still the agent's: a frame it sends now is applied, and it has been
	// connected once, without a reconnect or a close, since before the page came.
	if err := d.c.Inject(ctx, "still driving", true); err != nil {
		t.Fatalf("the driver's inject after the observer left: %v", err)
	}
	d.await(t, "the driver's turn after the observer left", func(evs []client.Event) bool {
		return countType(evs, "turn/end") == 2
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, ev := range d.events {
		if ev.Seq != int64(i) {
			t.Fatalf("the driver's events are not 0..n once each: event %d has seq %d", i, ev.Seq)
		}
	}
	for _, s := range d.statuses {
		if s.State != client.StateConnected || s.Attempt != 0 {
			t.Fatalf("the driver's connection changed while the observer watched: %s (attempt %d, %v); all: %v", s.State, s.Attempt, s.Err, d.statuses)
		}
	}
	if len(d.notices) > 0 {
		t.Fatalf("the driver got notices: %v", d.notices)
	}
	if err := d.c.Err(); err != nil {
		t.Fatalf("the driver stopped: %v", err)
	}
}

// driver is a Go client holding the agent's driver seat for the page test; it serves
// the script's two requests: POST /turn sends observerTurn and answers once the
// driver got its approval/requested; POST /approve approves it and answers with the
// events the driver got through the turn's turn/end, [{"seq":N,"type":T}, …].
type driver struct {
	c *client.Client

	mu       sync.Mutex
	events   []client.Event
	statuses []client.Status
	notices  []client.Notice
	more     chan struct{}
	callID   string
}

func dialDriver(t *testing.T, url, token string) *driver {
	t.Helper()
	d := &driver{more: make(chan struct{}, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, url, token, client.Options{
		OnEvent: func(ev client.Event) error {
			d.mu.Lock()
			d.events = append(d.events, ev)
			d.mu.Unlock()
			d.signal()
			return nil
		},
		OnNotice: func(n client.Notice) {
			d.mu.Lock()
			d.notices = append(d.notices, n)
			d.mu.Unlock()
		},
		OnStatus: func(s client.Status) {
			if s.State == client.StateConnecting && s.Attempt == 0 {
				return // Dial's own
			}
			d.mu.Lock()
			d.statuses = append(d.statuses, s)
			d.mu.Unlock()
			d.signal()
		},
		KeepaliveInterval: -1,
	})
	if err != nil {
		t.Fatalf("the driver's dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if role := c.Hello().Role; role != "driver" {
		t.Fatalf("the driver's hello names role %q, want driver", role)
	}
	if err := c.Subscribe(ctx, 0); err != nil {
		t.Fatalf("the driver's subscribe: %v", err)
	}
	d.c = c
	return d
}

func (d *driver) signal() {
	select {
	case d.more <- struct{}{}:
	default:
	}
}

// await waits until ok accepts the driver's events so far; what names it in the failure.
func (d *driver) await(t testing.TB, what string, ok func([]client.Event) bool) {
	t.Helper()
	if err := d.wait(what, ok); err != nil {
		t.Fatal(err)
	}
}

// wait is await's condition, bounded (a loaded machine's turn takes seconds) and ended
// early by the driver's stop.
func (d *driver) wait(what string, ok func([]client.Event) bool) error {
	deadline := time.After(3 * time.Minute)
	for {
		d.mu.Lock()
		done := ok(d.events)
		d.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-d.more:
		case <-d.c.Done():
			return fmt.Errorf("the driver stopped (%v) before %s", d.c.Err(), what)
		case <-deadline:
			return fmt.Errorf("the driver got no %s within 3m", what)
		}
	}
}

func countType(evs []client.Event, typ string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func (d *driver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST /turn or /approve", http.StatusMethodNotAllowed)
		return
	}
	ctx := r.Context()
	switch r.URL.Path {
	case "/turn":
		if err := d.c.Inject(ctx, observerTurn, true); err != nil {
			http.Error(w, "inject: "+err.Error(), http.StatusInternalServerError)
			return
		}
		var callID string
		err := d.wait("approval/requested", func(evs []client.Event) bool {
			for _, ev := range evs {
				var p struct {
					CallID string `json:"call_id"`
				}
				if ev.Type == "approval/requested" && json.Unmarshal(ev.Payload, &p) == nil {
					callID = p.CallID
					return true
				}
			}
			return false
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		d.mu.Lock()
		d.callID = callID
		d.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case "/approve":
		d.mu.Lock()
		callID := d.callID
		d.mu.Unlock()
		if callID == "" {
			http.Error(w, "no approval asked yet: POST /turn first", http.StatusConflict)
			return
		}
		if err := d.c.Approve(ctx, callID); err != nil {
			http.Error(w, "approve: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if err := d.wait("the turn's turn/end", func(evs []client.Event) bool { return countType(evs, "turn/end") == 1 }); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		type seen struct {
			Seq  int64  `json:"seq"`
			Type string `json:"type"`
		}
		var out []seen
		d.mu.Lock()
		for _, ev := range d.events {
			out = append(out, seen{ev.Seq, ev.Type})
			if ev.Type == "turn/end" {
				break
			}
		}
		d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	default:
		http.Error(w, "POST /turn or /approve", http.StatusNotFound)
	}
}
