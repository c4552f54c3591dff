package delivery

import (
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
)

// stateFor is the state Close records on a connection it drops with code: the
// connection may send nothing more, and a frame that still arrives from it is refused
// (superseded for a superseded connection, unauthorized for any other). Codes that do
// not close a connection have no state of their own and map to StateUnauthorized.
func stateFor(code protocol.Code) connections.State {
	switch code {
	case protocol.CodeSuperseded:
		return connections.StateSuperseded
	case protocol.CodeLagged:
		return connections.StateLagged
	default:
		return connections.StateUnauthorized
	}
}
