package devstack

import (
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/localgw"
)

// TestTemplateTimeouts: the in-process functions get template.yaml's deadlines — the
// routes API Gateway's 29 s, deliver 5 minutes, the runner 15.
func TestTemplateTimeouts(t *testing.T) {
	t.Parallel()
	got, err := templateTimeouts()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]time.Duration{
		localgw.RouteConnect: 29 * time.Second, localgw.RouteDefault: 29 * time.Second, localgw.RouteDisconnect: 29 * time.Second,
		"message": 29 * time.Second, "deliver": 5 * time.Minute, "runner": 15 * time.Minute,
	} {
		if got[name] != want {
			t.Errorf("timeout of %s = %v, want %v", name, got[name], want)
		}
	}
}

// TestInProcessTimeouts: in process, only the message route's deadline differs from
// the template's.
func TestInProcessTimeouts(t *testing.T) {
	t.Parallel()
	tmpl, err := templateTimeouts()
	if err != nil {
		t.Fatal(err)
	}
	got, err := inProcessTimeouts()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range tmpl {
		if name == localgw.RouteDefault {
			want = inProcessMessageTimeout
		}
		if got[name] != want {
			t.Errorf("in-process timeout of %s = %v, want %v", name, got[name], want)
		}
	}
}
