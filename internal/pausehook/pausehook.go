// Package pausehook carries the agent runtime's pause hook (agent.Config.Pause) across
// processes, for tests of the emulated functions (`terret dev --lambda-emulator`), which
// run as bootstraps in processes of their own. Remote is the hook such a function calls;
// Server answers it with the test's in-process hook. A test therefore arms, awaits and
// releases pause points the same way whether the runtime runs in its process or not.
//
// The wire: at a pause point the function POSTs an Arrival as JSON to the endpoint and
// is held until the answer, 204 No Content once the test's hook has returned. It is for
// tests only: internal/config takes the endpoint only for a local stack, and a post that
// fails lets the runtime carry on, as an unarmed pause point would.
package pausehook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Arrival is the body of one post: the runtime reached Point (an agent.Pause* name) for
// AgentID.
type Arrival struct {
	Point   string `json:"point"`
	AgentID string `json:"agent_id"`
}

// DefaultMaxHold bounds how long Remote holds the runtime, so that a test rig that stops
// answering (wedged rather than gone: a gone one refuses the connection at once) cannot
// hold a function until its timeout. It is longer than any test holds a point: the rig
// gives up waiting for a point after 45 s.
const DefaultMaxHold = 2 * time.Minute

// Remote returns a pause hook that posts each arrival to endpoint and returns once the
// answer comes, or after maxHold. A post that fails (no server, a refused arrival, the
// bound passed) is logged at warn and the runtime carries on. Cost: one loopback request
// per pause point reached, armed or not.
func Remote(endpoint string, maxHold time.Duration, logger *slog.Logger) func(point, agentID string) {
	// A transport of its own: no proxy from the environment, whatever it holds.
	client := &http.Client{Timeout: maxHold, Transport: &http.Transport{}}
	return func(point, agentID string) {
		if err := post(client, endpoint, Arrival{Point: point, AgentID: agentID}); err != nil {
			logger.Warn("pause hook: post failed; the runtime carries on", "point", point, "agent_id", agentID, "error", err.Error())
		}
	}
}

func post(client *http.Client, endpoint string, a Arrival) error {
	body, err := json.Marshal(a)
	if err != nil {
		return err
	}
	resp, err := client.Post(endpoint, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("pausehook: post %s: %s: %s", a.Point, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// Server serves Remote's posts on a loopback port: each arrival calls hook, and is
// answered once hook returns.
type Server struct {
	srv *http.Server
	url string
}

// Listen starts a Server for hook on 127.0.0.1, on a free port.
func Listen(hook func(point, agentID string)) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pausehook: listen: %w", err)
	}
	s := &Server{srv: &http.Server{Handler: Handler(hook), ReadHeaderTimeout: 10 * time.Second}, url: "http://" + ln.Addr().String() + "/pause"}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Default().Error("pausehook: serve", "error", err.Error())
		}
	}()
	return s, nil
}

// URL is the endpoint to give Remote.
func (s *Server) URL() string { return s.url }

// Close stops the server and drops its connections: a function held there carries on.
// A hook call still under way keeps its goroutine until the hook returns.
func (s *Server) Close() error { return s.srv.Close() }

// Handler serves one Remote post per request by calling hook: 204 once it returns, 400
// for a body that is not an Arrival with both fields, 405 for any method but POST.
func Handler(hook func(point, agentID string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "pausehook: POST an arrival", http.StatusMethodNotAllowed)
			return
		}
		var a Arrival
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&a); err != nil || a.Point == "" || a.AgentID == "" {
			http.Error(w, `pausehook: want {"point":…,"agent_id":…}`, http.StatusBadRequest)
			return
		}
		hook(a.Point, a.AgentID)
		w.WriteHeader(http.StatusNoContent)
	})
}
