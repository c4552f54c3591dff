package devstack

import (
	"fmt"
	"time"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/localgw"
	"github.com/terret/terret-ws/internal/stack"
)

// templateTimeouts returns the invocation deadline of every function of template.yaml
// (its own Timeout, else the Globals'), by function name and, for the route functions,
// by route key as well: the in-process handlers get the deployed functions' deadlines,
// the message route's 29 s included. That holds in one process too, where the message
// route and the runner share one fast-path Notifier, because a handler waits only for its
// own invocation's sends (delivery.Notifier.Invocation), not for the runner's turns.
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
