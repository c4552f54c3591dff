package delivery

import (
	"testing"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
)

func TestStateFor(t *testing.T) {
	want := map[protocol.Code]connections.State{
		protocol.CodeUnauthorized: connections.StateUnauthorized,
		protocol.CodeSuperseded:   connections.StateSuperseded,
		protocol.CodeLagged:       connections.StateLagged,
		protocol.CodeInternal:     connections.StateUnauthorized,
		protocol.CodeBadFrame:     connections.StateUnauthorized,
		protocol.CodeNotRunning:   connections.StateUnauthorized,
		protocol.CodeStaleCall:    connections.StateUnauthorized,
		protocol.CodeUnsupported:  connections.StateUnauthorized,
		protocol.CodeStale:        connections.StateUnauthorized,
	}
	for _, code := range protocol.Codes() {
		w, ok := want[code]
		if !ok {
			t.Errorf("code %s has no expected state in this table", code)
			continue
		}
		if got := stateFor(code); got != w {
			t.Errorf("stateFor(%s) = %q, want %q", code, got, w)
		}
		if got := stateFor(code); got == connections.StateAuthorized {
			t.Errorf("stateFor(%s) = authorized: a closed connection could still send", code)
		}
	}
}
