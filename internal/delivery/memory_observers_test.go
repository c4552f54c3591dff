package delivery

import (
	"context"
	"sort"
	"time"

	"github.com/terret/terret-ws/internal/connections"
)

// The observer records of memRecords: connections.Store's Observe (a connect's write,
// which Records has not), Observers and Seats (ObserverIndex), each as the store
// documents it. An observer's seat is an ownership record under its seat key
// (connections.ObserverSeat), so every rule of memory_test.go holds for it as written.
// contract_observers_test.go holds them to the store on DynamoDB Local.

var _ ObserverIndex = (*memRecords)(nil)

// memObserverTTL is how long an entry of the observer index counts (connections'
// connTTL): a connection API Gateway closes after 2 hours whose $disconnect was lost
// is not listed 3 hours after it connected.
const memObserverTTL = 3 * time.Hour

// observe is connections.Store.Observe with a current token: connID, with token hash
// hash, observes agentID in a seat of its own, with a record of its own (role
// observer), and an entry in the observer index stamped now. The ownership record is
// never touched. With max (≤ 0: the default) or more observers listed, the oldest is dropped
// from the index, and its seat, if it still exists, is deleted and its
// connection marked superseded — unwelcomed, closing under its seat's sender lease, if
// its hello was not recorded — and returned as it stood.
func (m *memRecords) observe(agentID, connID, hash string, max int) connections.Owner {
	if max <= 0 {
		max = connections.DefaultMaxObservers
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	obs := m.observersLocked(agentID)
	var prev connections.Owner
	if len(obs) >= max {
		prev = m.owners[obs[0].Seat(agentID)] // zero if gone already: only its entry is dropped
		delete(m.index[agentID], obs[0].ConnID)
	}
	if prev.ConnID != "" {
		delete(m.owners, prev.Key())
		delete(m.stamps, prev.Key())
		delete(m.watchers, prev.Key())
		c := m.conns[prev.ConnID]
		c.ID, c.State = prev.ConnID, connections.StateSuperseded
		if !prev.HelloSent {
			c.Unwelcomed = true
			if prev.Lease != "" {
				c.Closer, c.CloserUntil = prev.Lease, prev.LeaseUntil
			}
		}
		m.conns[prev.ConnID] = c
	}
	seat := connections.Owner{AgentID: agentID, ConnID: connID, TokenHash: hash, Observer: true}
	m.owners[seat.Key()] = seat
	m.conns[connID] = connections.Conn{ID: connID, AgentID: agentID, TokenHash: hash, State: connections.StateAuthorized,
		ConnectedAt: msTime(now), Role: connections.RoleObserver}
	if m.index[agentID] == nil {
		m.index[agentID] = map[string]connections.Observer{}
	}
	m.index[agentID][connID] = connections.Observer{ConnID: connID, TokenHash: hash, ConnectedAt: msTime(now)}
	return prev
}

// Observers lists agentID's observers, oldest first (ties by connection id), leaving
// out entries older than a connection can live.
func (m *memRecords) Observers(_ context.Context, agentID string) ([]connections.Observer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.observersLocked(agentID), nil
}

func (m *memRecords) observersLocked(agentID string) []connections.Observer {
	cutoff := m.now().Add(-memObserverTTL)
	var obs []connections.Observer
	for _, o := range m.index[agentID] {
		if !o.ConnectedAt.Before(cutoff) {
			obs = append(obs, o)
		}
	}
	sort.Slice(obs, func(i, j int) bool {
		if !obs[i].ConnectedAt.Equal(obs[j].ConnectedAt) {
			return obs[i].ConnectedAt.Before(obs[j].ConnectedAt)
		}
		return obs[i].ConnID < obs[j].ConnID
	})
	return obs
}

// Seats returns the records of seats that exist, by seat key.
func (m *memRecords) Seats(_ context.Context, seats []string) (map[string]connections.Owner, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]connections.Owner{}
	for _, seat := range seats {
		if o, ok := m.owners[seat]; ok {
			out[seat] = o
		}
	}
	return out, nil
}

// unindex drops connID's entry from agentID's observer index. m.mu is held.
func (m *memRecords) unindex(agentID, connID string) {
	delete(m.index[agentID], connID)
}
