package devstack

import (
	"fmt"
	"time"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/localgw"
	"github.com/terret/terret-ws/internal/stack"
)

// inProcessMessageTimeout is the in-process $default route's deadline, longer than the
// message function's 29 s (template.yaml). In process one Runtime serves the message
// route and the runner, so a frame's handler, before it returns, waits for every
// fast-path send of the process (delivery.Notifier.Flush) — the runner's turns of
// every agent included — where a deployed message function waits only for its own
// invocation's few sends. On a loaded machine that wait alone can pass 29 s.
const inProcessMessageTimeout = 5 * time.Minute

// inProcessTimeouts is templateTimeouts with $default given inProcessMessageTimeout.
func inProcessTimeouts() (map[string]time.Duration, error) {
	t, err := templateTimeouts()
	if err != nil {
		return nil, err
	}
	t[localgw.RouteDefault] = max(t[localgw.RouteDefault], inProcessMessageTimeout)
	return t, nil
}

// templateTimeouts returns the invocation deadline of every function of template.yaml
// (its own Timeout, else the Globals'), by function name and, for the route functions,
// by route key as well: the in-process handlers get the deployed functions' deadlines.
func templateTimeouts() (map[string]time.Duration, error) {
	s, err := stack.Parse(terretws.Template)
	if err != nil {
		return nil, fmt.Errorf("devstack: function timeouts: %w", err)
	}
	g, err := s.Globals()
	if err != nil {
		return nil, fmt.Errorf("devstack: function timeouts: %w", err)
	}
	fns, err := s.Functions()
	if err != nil {
		return nil, fmt.Errorf("devstack: function timeouts: %w", err)
	}
	out := map[string]time.Duration{}
	for _, f := range fns {
		secs := f.Props.Timeout
		if secs == 0 {
			secs = g.Timeout
		}
		if secs == 0 {
			return nil, fmt.Errorf("devstack: function timeouts: %s sets no Timeout and Globals none", f.LogicalID)
		}
		out[f.Name] = time.Duration(secs) * time.Second
		if route, ok := routeOf[f.Name]; ok {
			out[route] = out[f.Name]
		}
	}
	for _, name := range []string{"deliver", "runner", localgw.RouteDefault, localgw.RouteConnect, localgw.RouteDisconnect} {
		if out[name] == 0 {
			return nil, fmt.Errorf("devstack: function timeouts: template.yaml has no function for %s", name)
		}
	}
	return out, nil
}
