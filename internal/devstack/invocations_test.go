package devstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/terret/terret-ws/internal/config"
)

// invocations is a runtime stack's Measure.Wrap: it records, per agent, the frames
// whose message handler has returned and the runner invocations that have returned.
// These are barriers the code reaches, in process and emulated alike (the emulated
// functions are invoked through the same wrapped handlers): a flow that knows how many
// runner invocations its frames cause waits for them instead of waiting a while to see
// that nothing more happens.
type invocations struct {
	mu      sync.Mutex
	changed chan struct{}     // closed and replaced at every record
	agents  map[string]string // connection id → agent, from $connect
	frames  map[string]int    // handled frames, by agent and body (frameKey)
	expired map[string]int    // handled frames whose route context had ended by their return, by agent
	runs    map[string]int    // runner invocations returned without error, by agent
	failed  map[string][]string
}

func newInvocations() *invocations {
	return &invocations{changed: make(chan struct{}), agents: map[string]string{}, frames: map[string]int{},
		expired: map[string]int{}, runs: map[string]int{}, failed: map[string][]string{}}
}

func frameKey(agent, body string) string { return agent + "\x00" + body }

// wrap records connect, message and runner invocations as they return; h runs as is.
func (iv *invocations) wrap(name string, h lambda.Handler) lambda.Handler {
	switch name {
	case "connect", "message", "runner":
	default:
		return h
	}
	return handlerFunc(func(ctx context.Context, p []byte) ([]byte, error) {
		out, err := h.Invoke(ctx, p)
		var in struct {
			AgentID string            `json:"agent_id"` // runner
			Query   map[string]string `json:"queryStringParameters"`
			Body    string            `json:"body"`
			Request struct {
				ConnectionID string `json:"connectionId"`
			} `json:"requestContext"`
		}
		_ = json.Unmarshal(p, &in)
		iv.mu.Lock()
		defer iv.mu.Unlock()
		switch name {
		case "connect":
			iv.agents[in.Request.ConnectionID] = in.Query["agent_id"]
		case "message":
			iv.frames[frameKey(iv.agents[in.Request.ConnectionID], in.Body)]++
			// The route's context ends config.RouteMargin before the invocation's.
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= config.RouteMargin {
				iv.expired[iv.agents[in.Request.ConnectionID]]++
			}
		case "runner":
			if in.AgentID == "" {
				return out, err // a sweep
			}
			if err != nil {
				iv.failed[in.AgentID] = append(iv.failed[in.AgentID], err.Error())
			} else {
				iv.runs[in.AgentID]++
			}
		}
		close(iv.changed)
		iv.changed = make(chan struct{})
		return out, err
	})
}

// until waits until ok holds (called under iv.mu); what names the wait in the failure.
func (iv *invocations) until(a *agentConn, what string, ok func() bool) {
	deadline := time.NewTimer(hang())
	defer deadline.Stop()
	for {
		iv.mu.Lock()
		done, changed := ok(), iv.changed
		iv.mu.Unlock()
		if done {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			iv.mu.Lock()
			state := fmt.Sprintf("%d runner invocations of %s returned, failed ones: %q", iv.runs[a.agent], a.agent, iv.failed[a.agent])
			iv.mu.Unlock()
			a.fatalf("%s never reached; %s", what, state)
		}
	}
}

// handled waits until the message handler has returned for every frame the flow has
// sent: whatever a frame does before its handler returns (an append, a queued inject,
// an accepted runner invocation, an error frame posted) is done.
func (a *agentConn) handled() {
	iv := a.e.calls
	iv.until(a, fmt.Sprintf("the handling of the %d frames sent", len(a.sent)), func() bool {
		for body, n := range a.sent {
			if iv.frames[frameKey(a.agent, body)] < n {
				return false
			}
		}
		return true
	})
}

// ran waits until n runner invocations of the flow's agent have returned without
// error: everything they appended is in the log.
func (a *agentConn) ran(n int) {
	iv := a.e.calls
	iv.until(a, fmt.Sprintf("%d runner invocations returned", n), func() bool { return iv.runs[a.agent] >= n })
}

// settled shows that nothing more happens: once every frame the flow sent has been
// handled and the n runner invocations they caused (no more, no fewer) have returned,
// the runtime has nothing left to append, so the client must have received the whole
// log, and no frame may be waiting beyond it.
func (a *agentConn) settled(n int) {
	a.handled()
	a.ran(n)
	iv := a.e.calls
	iv.mu.Lock()
	got := iv.runs[a.agent]
	iv.mu.Unlock()
	if got != n {
		a.fatalf("%d runner invocations returned, want %d", got, n)
	}
	a.matchLog()
	if b, ok, err := a.c.ws.Ready(); ok && err == nil {
		a.fatalf("a frame after the whole log was received: %s", b)
	}
}
