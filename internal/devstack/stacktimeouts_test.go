package devstack_test

import (
	"testing"
	"time"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/localgw"
	"github.com/terret/terret-ws/internal/stack"
)

// TestTimeoutsMatchTemplate: a running in-process stack gives every function, and every
// route its function serves, the deadline template.yaml gives it — the message route
// its 29 s, not more.
func TestTimeoutsMatchTemplate(t *testing.T) {
	t.Parallel()
	s, err := stack.Parse(terretws.Template)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Globals()
	if err != nil {
		t.Fatal(err)
	}
	fns, err := s.Functions()
	if err != nil {
		t.Fatal(err)
	}
	e := startStack(t, devstack.Options{LambdaEmulator: inProcess})
	routes := map[string]string{"connect": localgw.RouteConnect, "message": localgw.RouteDefault, "disconnect": localgw.RouteDisconnect}
	checked := map[string]bool{}
	for _, f := range fns {
		secs := f.Props.Timeout
		if secs == 0 {
			secs = g.Timeout
		}
		want := time.Duration(secs) * time.Second
		names := []string{f.Name}
		if r, ok := routes[f.Name]; ok {
			names = append(names, r)
		}
		for _, name := range names {
			checked[name] = true
			if got := e.stack.Timeout(name); got != want {
				t.Errorf("stack's deadline for %s = %v, want template.yaml's %v (function %s)", name, got, want, f.LogicalID)
			}
		}
	}
	for _, name := range []string{"deliver", "runner", localgw.RouteConnect, localgw.RouteDefault, localgw.RouteDisconnect} {
		if !checked[name] {
			t.Errorf("template.yaml has no function for %s", name)
		}
	}
}
