package delivery

// In-memory test doubles of the delivery core's own interfaces (LogReader, Records,
// ReplaySlots, PostAPI), so that the pump and sender algorithm can be tested in
// milliseconds. They are not a DynamoDB fake: the store's conditional writes are
// modelled at the level of connections.Store's contracts, and contract_test.go holds
// the double to them — one table of scenarios run against memRecords and against the
// store on DynamoDB Local, on one fake clock. The tests against DynamoDB Local
// (faults_test.go, linger_test.go, batch_test.go) stay the real check of the algorithm.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/lease"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// memLog is a session log in memory: seqs 0, 1, 2, … of one session.
type memLog struct {
	mu    sync.Mutex
	evs   []sessionlog.Event
	reads int
}

func (l *memLog) append(session string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range n {
		seq := int64(len(l.evs))
		l.evs = append(l.evs, sessionlog.Event{ID: fmt.Sprint(seq), SessionID: session, Seq: seq, Type: "note", Payload: json.RawMessage(`{}`)})
	}
}

func (l *memLog) Read(_ context.Context, _ string, from int64, limit int) ([]sessionlog.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	if from >= int64(len(l.evs)) {
		return nil, nil
	}
	end := min(int(from)+limit, len(l.evs))
	return slices.Clone(l.evs[from:end]), nil
}

// Retained: nothing in memory expires.
func (l *memLog) Retained(_ context.Context, _ string, from int64) (int64, error) { return from, nil }

func (l *memLog) Tip(context.Context, string) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(len(l.evs)) - 1, nil
}

// Epoch is the id of seq 0, as in the table.
func (l *memLog) Epoch(context.Context, string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.evs) == 0 {
		return "", sessionlog.ErrNotFound
	}
	return l.evs[0].ID, nil
}

// memRecords holds ownership and connection records as connections.Store documents
// them: each method is the store's conditional write, taken under one lock, on the same
// clock seam (now, as connections.NewWithClock takes it). contract_test.go runs one table
// of scenarios against it and against the store on DynamoDB Local, with one fake clock.
type memRecords struct {
	mu     sync.Mutex
	now    func() time.Time
	owners map[string]connections.Owner
	conns  map[string]connections.Conn
	stamps map[string]string // agent → the subscription in force's stamp
	// departed: connections without a record whose departure $disconnect recorded.
	departed map[string]bool
	// watchers: seat → the watcher whose claim (ClaimWatch) the record carries.
	watchers map[string]string
	// index: agent → its observer index, by connection (memory_observers_test.go).
	index map[string]map[string]connections.Observer
	// onRelease, if set, runs as a Release begins: a test's way to act at the moment a
	// sender has found nothing more to send.
	onRelease func()
}

// newMemRecords returns records on the wall clock.
func newMemRecords() *memRecords { return newMemRecordsAt(time.Now) }

// newMemRecordsAt returns records whose every lease rule reads the clock now.
func newMemRecordsAt(now func() time.Time) *memRecords {
	return &memRecords{
		now: now, owners: map[string]connections.Owner{}, conns: map[string]connections.Conn{},
		stamps: map[string]string{}, watchers: map[string]string{}, departed: map[string]bool{},
		index: map[string]map[string]connections.Observer{},
	}
}

// claim is connections.Store.Claim with a current token: connID owns agentID, in a
// fresh ownership record, and has a record of its own; a replaced owner connection is
// marked superseded and, if its hello was not recorded, owed closing under the replaced
// record's sender lease (TakeClose).
func (m *memRecords) claim(agentID, connID string) { m.claimWith(agentID, connID, "") }

// claimWith is claim with the hash of the token the connection presented.
func (m *memRecords) claimWith(agentID, connID, tokenHash string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, had := m.owners[agentID]
	m.owners[agentID] = connections.Owner{AgentID: agentID, ConnID: connID, TokenHash: tokenHash}
	delete(m.stamps, agentID)
	delete(m.watchers, agentID)
	m.conns[connID] = connections.Conn{ID: connID, AgentID: agentID, TokenHash: tokenHash, State: connections.StateAuthorized, ConnectedAt: m.now()}
	if !had || prev.ConnID == connID {
		return
	}
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

// set replaces agentID's record with o (a test's way to a state no method writes) and
// gives o's connection a record if it has none.
func (m *memRecords) set(o connections.Owner) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.owners[o.Key()] = o
	if _, ok := m.conns[o.ConnID]; !ok {
		m.conns[o.ConnID] = connections.Conn{ID: o.ConnID, AgentID: o.AgentID, State: connections.StateAuthorized}
	}
}

// Now is the clock every rule of the double reads.
func (m *memRecords) Now() time.Time { return m.now() }

func (m *memRecords) Owner(_ context.Context, agentID string) (connections.Owner, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.owners[agentID]
	if !ok {
		return connections.Owner{}, connections.ErrNotFound
	}
	return o, nil
}

func (m *memRecords) Conn(_ context.Context, connID string) (connections.Conn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.conns[connID]
	if !ok {
		return connections.Conn{}, connections.ErrNotFound
	}
	return c, nil
}

func (m *memRecords) Subscribe(_ context.Context, agentID, connID string, sub connections.Subscription) (connections.Owner, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.owners[agentID]
	if !ok || o.ConnID != connID {
		return connections.Owner{}, connections.ErrNotOwner
	}
	if m.stamps[agentID] > sub.Stamp {
		return o, connections.ErrSuperseded
	}
	m.stamps[agentID] = sub.Stamp
	o.Sub++
	o.Next, o.From, o.Requested, o.Truncated, o.ReplayEnd, o.Batch = sub.From, sub.From, sub.Requested, sub.Truncated, sub.ReplayEnd, sub.Batch
	o.Pending, o.PendingTo = true, 0
	m.owners[agentID] = o
	return o, nil
}

func (m *memRecords) Acquire(_ context.Context, agentID string, h connections.Holder, ttl time.Duration, upTo int64) (connections.AcquireResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	o, ok := m.owners[agentID]
	switch {
	case !ok:
		return connections.AcquireResult{Outcome: connections.NoOwner}, nil
	case o.Lease != "" && lease.Live(o.LeaseUntil, now):
		return connections.AcquireResult{Owner: o, Outcome: connections.LeaseHeld}, nil
	case o.HelloSent && o.Sub == 0, upTo >= 0 && o.HelloSent && o.Next > upTo && !o.Pending:
		return connections.AcquireResult{Owner: o, Outcome: connections.NothingOwed}, nil
	}
	o.Lease, o.LeaseKind, o.LeaseUntil, o.Pending, o.PendingTo = h.ID, h.Kind, msTime(now.Add(ttl)), false, 0
	m.owners[agentID] = o
	return connections.AcquireResult{Owner: o, Outcome: connections.Acquired}, nil
}

func (m *memRecords) MarkPending(_ context.Context, agentID string, upTo int64) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.owners[agentID]
	switch {
	case !ok:
		return false, nil
	case o.Lease == "" || !lease.Live(o.LeaseUntil, m.now()):
		// Let go (or run out) with the cursor past upTo: nothing is owed, as Acquire
		// would find.
		return upTo >= 0 && o.HelloSent && (o.Sub == 0 || o.Next > upTo) && !o.Pending, nil
	case upTo < 0:
		o.Pending, o.PendingTo = true, 0
	case o.Next <= upTo && !o.MarkReaches(upTo):
		o.Pending, o.PendingTo = true, upTo+1 // the seq only grows
	}
	m.owners[agentID] = o
	return true, nil
}

// write is connections.Store's write: progress under the lease for subscription o.Sub;
// a resubscribe is adopted under the same lease, and a release with Pending set keeps
// the lease and clears the mark. A checkpoint leaves the mark as it is.
func (m *memRecords) write(o connections.Owner, holder string, p connections.Progress, ttl time.Duration, release bool) (connections.Owner, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := o.Key()
	cur, ok := m.owners[key]
	if !ok || cur.Lease != holder || cur.ConnID != o.ConnID {
		return cur, connections.ErrLeaseLost
	}
	floor := ttl
	if floor <= 0 {
		floor = connections.DefaultLease
	}
	if cur.Sub != o.Sub {
		cur.HelloSent = cur.HelloSent || p.HelloSent
		cur.LeaseUntil, cur.Pending, cur.PendingTo = msTime(m.now().Add(floor)), false, 0
		m.owners[key] = cur
		return cur, nil
	}
	switch {
	case !release:
		cur.Next, cur.HelloSent, cur.Truncated = p.Next, p.HelloSent, p.Truncated
		cur.LeaseUntil = msTime(m.now().Add(ttl))
	case cur.Pending && cur.PendingTo > p.Next && o.Sub != 0:
		return cur, nil // a mark ahead of the progress: look again, the mark kept (not subscribed: owed nothing)
	case !cur.Pending || cur.PendingTo > 0:
		cur.Next, cur.HelloSent, cur.Truncated = p.Next, p.HelloSent, p.Truncated
		cur.Lease, cur.LeaseKind, cur.LeaseUntil, cur.Pending, cur.PendingTo, cur.Released = "", "", time.Time{}, false, 0, holder
	default: // a mark without a seq: cleared, the lease kept, so that the holder looks again
		cur.Next, cur.HelloSent, cur.Truncated = p.Next, p.HelloSent, p.Truncated
		cur.LeaseUntil, cur.Pending, cur.PendingTo = msTime(m.now().Add(floor)), false, 0
	}
	m.owners[key] = cur
	return cur, nil
}

func (m *memRecords) Checkpoint(_ context.Context, o connections.Owner, holder string, p connections.Progress, ttl time.Duration) (connections.Owner, error) {
	return m.write(o, holder, p, ttl, false)
}

func (m *memRecords) Release(_ context.Context, o connections.Owner, holder string, p connections.Progress) (connections.Owner, bool, error) {
	m.mu.Lock()
	hook := m.onRelease
	m.mu.Unlock()
	if hook != nil {
		hook()
	}
	cur, err := m.write(o, holder, p, 0, true)
	return cur, err == nil && cur.Lease == "", err
}

func (m *memRecords) Abandon(_ context.Context, o connections.Owner, holder string, p connections.Progress) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.owners[o.Key()]
	if !ok || cur.Lease != holder || cur.ConnID != o.ConnID {
		return nil
	}
	if cur.Sub == o.Sub {
		cur.Next, cur.HelloSent, cur.Truncated = p.Next, p.HelloSent, p.Truncated
	}
	cur.Lease, cur.LeaseKind, cur.LeaseUntil, cur.Released = "", "", time.Time{}, holder
	m.owners[o.Key()] = cur
	return nil
}

func (m *memRecords) ClaimWatch(_ context.Context, agentID, watcher string, until time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.owners[agentID]
	if !ok || !o.WatchUntil.IsZero() && lease.Live(o.WatchUntil, m.now()) && m.watchers[agentID] != watcher {
		return false, nil
	}
	o.WatchUntil = msTime(until)
	m.watchers[agentID] = watcher
	m.owners[agentID] = o
	return true, nil
}

func (m *memRecords) EndWatch(_ context.Context, seen connections.Owner, watcher string, force bool) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := seen.Key()
	o, ok := m.owners[key]
	if !ok || m.watchers[key] != watcher {
		return true, nil // not watcher's claim
	}
	if !force && (o.Pending || o.Lease != "" || o.Released != seen.Released) {
		return false, nil // moved since the watcher's look: the claim kept
	}
	o.WatchUntil = time.Time{}
	delete(m.watchers, key)
	m.owners[key] = o
	return true, nil
}

func (m *memRecords) SetState(_ context.Context, connID string, state connections.State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.conns[connID]; ok {
		c.State = state
		m.conns[connID] = c
	}
	return nil
}

func (m *memRecords) Departed(_ context.Context, connID string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.departed[connID], nil
}

// depart is connections.Store.Depart: $disconnect of a connection without a record.
func (m *memRecords) depart(connID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.departed[connID] = true
}

// Disown takes a seat key, as the store does: an observer's seat goes with its entry
// in the observer index.
func (m *memRecords) Disown(_ context.Context, agentID, connID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if connections.IsObserverSeat(agentID) {
		m.unindex(connections.SeatAgent(agentID), connID)
	}
	if o, ok := m.owners[agentID]; ok && o.ConnID == connID {
		delete(m.owners, agentID)
		delete(m.stamps, agentID)
		delete(m.watchers, agentID)
	}
	return nil
}

func (m *memRecords) Forget(ctx context.Context, connID, agentID string) error {
	m.mu.Lock()
	delete(m.conns, connID)
	m.mu.Unlock()
	if agentID == "" {
		return nil
	}
	return m.Disown(ctx, agentID, connID)
}

// msTime is t as the store keeps a lease's end: to the millisecond.
func msTime(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()) }

// memSlots never runs out of replay slots.
type memSlots struct{}

func (memSlots) Groups() int                                          { return 1 }
func (memSlots) TryAcquire(context.Context, string, int) (int, error) { return 0, nil }
func (memSlots) Release(context.Context, string, int) error           { return nil }

// memSocket records the frames posted to each connection. onPost, if set, runs after
// each post, outside the lock, on the poster's goroutine: a test's way to act at an
// exact point of a sender's work.
type memSocket struct {
	mu      sync.Mutex
	frames  map[string][][]byte
	deleted []string // the connections deleted, in order
	onPost  func(connID string, f frameSeen)
}

// frameSeen is a posted frame as a test looks at it.
type frameSeen struct {
	Type string `json:"type"`
	Seq  int64  `json:"seq"`
}

func (s *memSocket) PostToConnection(_ context.Context, in *apigatewaymanagementapi.PostToConnectionInput, _ ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error) {
	var f frameSeen
	if err := json.Unmarshal(in.Data, &f); err != nil {
		return nil, err
	}
	id := aws.ToString(in.ConnectionId)
	s.mu.Lock()
	if s.frames == nil {
		s.frames = map[string][][]byte{}
	}
	s.frames[id] = append(s.frames[id], in.Data)
	hook := s.onPost
	s.mu.Unlock()
	if hook != nil {
		hook(id, f)
	}
	return &apigatewaymanagementapi.PostToConnectionOutput{}, nil
}

func (s *memSocket) DeleteConnection(_ context.Context, in *apigatewaymanagementapi.DeleteConnectionInput, _ ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.DeleteConnectionOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleted = append(s.deleted, aws.ToString(in.ConnectionId))
	return &apigatewaymanagementapi.DeleteConnectionOutput{}, nil
}

// count returns how many frames connID was sent.
func (s *memSocket) count(connID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.frames[connID])
}

// seen returns what connID was sent: "hello", "replay_truncated", or an event's seq.
func (s *memSocket) seen(t *testing.T, connID string) []string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, b := range s.frames[connID] {
		var f frameSeen
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("frame %s: %v", b, err)
		}
		if f.Type == "note" {
			out = append(out, fmt.Sprint(f.Seq))
		} else {
			out = append(out, f.Type)
		}
	}
	return out
}

// seqs returns "hello" then the seqs from..to.
func seqs(from, to int64) []string {
	out := []string{}
	for s := from; s <= to; s++ {
		out = append(out, fmt.Sprint(s))
	}
	return out
}

// TestSenderInMemory runs the pump and sender algorithm against the in-memory doubles:
// whatever happens while a sender works — a resubscribe, an append that finds the lease
// held, a dead holder's expired lease — the frames the connection gets after the last
// subscribe's first event are that subscription's events, gapless, each once.
func TestSenderInMemory(t *testing.T) {
	t.Parallel()
	const agent, conn = "a", "c1"
	type env struct {
		d       *Deliverer
		log     *memLog
		records *memRecords
		socket  *memSocket
	}
	tests := []struct {
		name string
		// run subscribes and pumps. It returns the seq the last subscription starts at
		// and how many frames had been posted when it was made.
		run func(t *testing.T, e env) (from int64, mark int)
		// wantAll, if set, is every frame the connection gets, exactly.
		wantAll []string
	}{
		{
			name: "hello then replay",
			run: func(t *testing.T, e env) (int64, int) {
				subscribe(t, e.d, 0)
				pump(t, e.d, nil, wake{})
				return 0, 0
			},
			wantAll: append([]string{"hello"}, seqs(0, 9)...),
		},
		{
			name: "resubscribe mid-replay",
			run: func(t *testing.T, e env) (int64, int) {
				subscribe(t, e.d, 0)
				var once sync.Once
				mark := 0
				e.socket.onPost = func(_ string, f frameSeen) {
					if f.Type == "note" && f.Seq == 6 {
						once.Do(func() { mark = e.socket.count(conn); subscribe(t, e.d, 2) })
					}
				}
				pump(t, e.d, nil, wake{})
				return 2, mark
			},
		},
		{
			name: "append while the lease is held",
			run: func(t *testing.T, e env) (int64, int) {
				subscribe(t, e.d, 0)
				var once sync.Once
				e.socket.onPost = func(_ string, f frameSeen) {
					if f.Type == "note" && f.Seq == 4 {
						once.Do(func() {
							e.log.append(agent, 5)
							evs, _ := e.log.Read(context.Background(), agent, 10, 5)
							// A fast-path wake-up: it finds the lease held and marks it.
							if idle, err := e.d.pump(context.Background(), agent, evs, wake{}); err != nil || idle {
								t.Errorf("pump under a held lease = %v, %v; want a mark left", idle, err)
							}
						})
					}
				}
				pump(t, e.d, nil, wake{})
				return 0, 0
			},
			wantAll: append([]string{"hello"}, seqs(0, 14)...),
		},
		{
			name: "append as the sender lets go",
			run: func(t *testing.T, e env) (int64, int) {
				subscribe(t, e.d, 0)
				var once sync.Once
				e.records.onRelease = func() {
					once.Do(func() {
						e.log.append(agent, 5)
						evs, _ := e.log.Read(context.Background(), agent, 10, 5)
						if idle, err := e.d.pump(context.Background(), agent, evs, wake{}); err != nil || idle {
							t.Errorf("pump under a held lease = %v, %v; want a mark left", idle, err)
						}
					})
				}
				pump(t, e.d, nil, wake{})
				return 0, 0
			},
			wantAll: append([]string{"hello"}, seqs(0, 14)...),
		},
		{
			name: "dead holder's lease expired",
			run: func(t *testing.T, e env) (int64, int) {
				subscribe(t, e.d, 0)
				o, _ := e.records.Owner(context.Background(), agent)
				// A sender that recorded hello and 0..3 and died holding the lease.
				o.HelloSent, o.Next, o.Pending = true, 4, true
				o.Lease, o.LeaseKind, o.LeaseUntil = "xdead", connections.HolderOnce, time.Now().Add(-time.Second)
				e.records.set(o)
				pump(t, e.d, nil, wake{retried: true})
				return 4, 0
			},
			wantAll: seqs(4, 9),
		},
		{
			name: "hints next in line spare the read",
			run: func(t *testing.T, e env) (int64, int) {
				subscribe(t, e.d, 0)
				pump(t, e.d, nil, wake{})
				e.log.append(agent, 3)
				evs, _ := e.log.Read(context.Background(), agent, 10, 3)
				e.log.mu.Lock()
				before := e.log.reads
				e.log.mu.Unlock()
				// Hints out of order and repeated, as a stream batch may bring them.
				pump(t, e.d, []sessionlog.Event{evs[2], evs[0], evs[1], evs[0]}, wake{preRead: true})
				e.log.mu.Lock()
				defer e.log.mu.Unlock()
				if n := e.log.reads - before; n != 0 {
					t.Errorf("%d log reads for hints next in line; want 0", n)
				}
				return 0, 0
			},
			wantAll: append([]string{"hello"}, seqs(0, 12)...),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := env{log: &memLog{}, records: newMemRecords(), socket: &memSocket{}}
			e.log.append(agent, 10)
			e.records.claim(agent, conn)
			cfg := Config{CheckpointEvery: 4, ReplayPage: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			e.d = newDeliverer(cfg, e.log, e.records, memSlots{}, e.socket, nil)
			from, mark := tc.run(t, e)
			got := e.socket.seen(t, conn)
			tip, _ := e.log.Tip(context.Background(), agent)
			if tc.wantAll != nil {
				if !slices.Equal(got, tc.wantAll) {
					t.Fatalf("frames = %v\nwant %v", got, tc.wantAll)
				}
			} else {
				// Frames of the replaced subscription may still come after the subscribe
				// (mark); from the new one's first event on, exactly its events.
				if len(got) == 0 || got[0] != "hello" {
					t.Fatalf("frames = %v; want hello first", got)
				}
				i := slices.Index(got[mark:], fmt.Sprint(from))
				if want := seqs(from, tip); i < 0 || !slices.Equal(got[mark+i:], want) {
					t.Fatalf("frames = %v\nwant, from the first %d after frame %d on, %v", got, from, mark, want)
				}
			}
			o, err := e.records.Owner(context.Background(), agent)
			if err != nil || o.Lease != "" || o.Pending || o.Next != tip+1 {
				t.Fatalf("record after = %+v, %v; want the lease let go, no mark, cursor %d", o, err, tip+1)
			}
		})
	}
}

// subscribe subscribes the connection from fromSeq, stamped now.
func subscribe(t *testing.T, d *Deliverer, from int64) {
	t.Helper()
	ctx := protocol.WithStamp(context.Background(), protocol.Stamp{At: time.Now().UnixMilli()})
	if err := d.Subscribe(ctx, "a", "c1", from, false); err != nil {
		t.Fatalf("subscribe from %d: %v", from, err)
	}
}

// pump wakes the sender and wants no error.
func pump(t *testing.T, d *Deliverer, hints []sessionlog.Event, w wake) {
	t.Helper()
	if _, err := d.pump(context.Background(), "a", hints, w); err != nil {
		t.Fatalf("pump: %v", err)
	}
}
