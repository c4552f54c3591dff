package devstack

import (
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/delivery"
	"github.com/terret/terret-ws/internal/localgw"
)

// TestTimeoutsOfTemplate: template.yaml's deadlines as read here — the routes API
// Gateway's 29 s, deliver 5 minutes, the runner 15.
func TestTimeoutsOfTemplate(t *testing.T) {
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

// TestHelloGraceCoversConnect: a post before $connect has completed answers Gone, so
// the hello loop's grace must outlast the longest $connect the template allows; with
// a shorter one, a $connect slowed past the grace lost its hello and the connection
// waited open for it forever.
func TestHelloGraceCoversConnect(t *testing.T) {
	got, err := templateTimeouts()
	if err != nil {
		t.Fatal(err)
	}
	if connect := got[localgw.RouteConnect]; delivery.DefaultHelloGrace <= connect {
		t.Errorf("delivery.DefaultHelloGrace = %v, want more than the connect function's timeout %v", delivery.DefaultHelloGrace, connect)
	}
}
