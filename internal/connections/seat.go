package connections

import "strings"

// Roles a token, and so a connection, may have (docs/protocol.md, "Roles").
const (
	RoleDriver   = "driver"   // the agent's one driving seat: reads and controls
	RoleObserver = "observer" // reads the log and nothing else
)

// A seat is the delivery record a connection is served from, named by its key:
//
//   - the driver's seat is the agent's ownership record, "agent#<agent_id>", keyed by
//     the agent id itself — one per agent, the newest driver connection superseding the
//     one before;
//   - an observer's seat is "obs#<agent_id>#<connection_id>", keyed by
//     ObserverSeat(agent_id, connection_id) — one per observer connection, beside the
//     ownership record, carrying the same attributes (cursor, subscription, hello, sender
//     lease, mark, watch), so every rule of the ownership record holds for it as
//     written, and the observer has its own cursor, queue bound and lagged rule.
//
// Every method of Store that names a record by agentID takes a seat key: the agent id
// for the driver's seat, an ObserverSeat for an observer's. Agent ids never contain
// '#' (auth.ValidAgentID), which tells the two apart.
const (
	observerPrefix = "obs#"
	seatSep        = "#"
)

// ObserverSeat is the seat key of connID's observer seat on agentID.
func ObserverSeat(agentID, connID string) string { return agentID + seatSep + connID }

// SeatAgent is the agent id of a seat key.
func SeatAgent(seat string) string {
	agent, _, _ := strings.Cut(seat, seatSep)
	return agent
}

// IsObserverSeat reports whether seat names an observer's seat.
func IsObserverSeat(seat string) bool { return strings.Contains(seat, seatSep) }

// seatPK is the pk of seat's record.
func seatPK(seat string) string {
	if IsObserverSeat(seat) {
		return observerPrefix + seat
	}
	return ownerPrefix + seat
}

// Key is the seat key of o's record (Store methods take it where they say agentID).
func (o Owner) Key() string {
	if o.Observer {
		return ObserverSeat(o.AgentID, o.ConnID)
	}
	return o.AgentID
}

// Key is the seat key of the record c is served from.
func (c Conn) Key() string {
	if c.Role == RoleObserver {
		return ObserverSeat(c.AgentID, c.ID)
	}
	return c.AgentID
}

// RoleOf names role for hello: "" (a record written before roles) is the driver.
func RoleOf(role string) string {
	if role == "" {
		return RoleDriver
	}
	return role
}

// Role is the role of the connection o's record serves, for its hello.
func (o Owner) Role() string {
	if o.Observer {
		return RoleObserver
	}
	return RoleDriver
}
