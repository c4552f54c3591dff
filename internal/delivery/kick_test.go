package delivery

import (
	"encoding/json"
	"testing"

	"github.com/terret/terret-ws/internal/protocol"
)

// TestKickWire pins the kick payload's JSON: the kind travels as a plain string, so a
// deliver function of another build reads it.
func TestKickWire(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		k    Kick
		want string
	}{
		{Kick{Kind: KickPump, AgentID: "a"}, `{"kind":"pump","agent_id":"a"}`},
		{Kick{Kind: KickDrop, ConnectionID: "c", Code: protocol.CodeUnauthorized}, `{"kind":"drop","connection_id":"c","code":"unauthorized"}`},
		{Kick{Kind: KickDrop, AgentID: "a", ConnectionID: "c", Code: protocol.CodeSuperseded, Hello: true}, `{"kind":"drop","agent_id":"a","connection_id":"c","code":"superseded","hello":true}`},
		{Kick{Kind: KickWatch, AgentID: "a", Watcher: "w", ClaimedUntil: 7}, `{"kind":"watch","agent_id":"a","watcher":"w","claimed_until":7}`},
		{Kick{Kind: KickFail, ConnectionID: "c"}, `{"kind":"fail","connection_id":"c"}`},
	} {
		b, err := json.Marshal(c.k)
		if err != nil || string(b) != c.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", c.k, b, err, c.want)
		}
		var back Kick
		if err := json.Unmarshal([]byte(c.want), &back); err != nil || back != c.k {
			t.Errorf("Unmarshal(%s) = %+v, %v; want %+v", c.want, back, err, c.k)
		}
	}
}
