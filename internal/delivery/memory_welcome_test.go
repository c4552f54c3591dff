package delivery

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/lease"
	"github.com/terret/terret-ws/internal/protocol"
)

// The hello-first records of memRecords (connections.Store's OweReply, TakeReplies,
// TakeClose and ClearOwed). A connection is owed closing when claim supersedes it before
// its hello was recorded.

func (m *memRecords) OweReply(_ context.Context, agentID, connID string, r connections.Reply) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.owners[agentID]
	switch {
	case !ok || o.ConnID != connID:
		return connections.ErrNotOwner
	case o.HelloSent:
		return connections.ErrHelloSent
	case len(o.Replies) >= connections.MaxReplies:
		return connections.ErrRepliesFull
	}
	o.Replies = append(slices.Clone(o.Replies), r)
	m.owners[agentID] = o
	return nil
}

func (m *memRecords) TakeReplies(_ context.Context, agentID, connID string) ([]connections.Reply, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.owners[agentID]
	if !ok || o.ConnID != connID {
		return nil, nil
	}
	taken := o.Replies
	o.Replies = nil
	m.owners[agentID] = o
	return taken, nil
}

func (m *memRecords) TakeClose(_ context.Context, connID, holder string, ttl time.Duration, helloPosted bool) (connections.Conn, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	c, ok := m.conns[connID]
	switch {
	case !ok:
		return connections.Conn{}, false, connections.ErrNotFound
	case !c.Unwelcomed, c.Closer != "" && c.Closer != holder && lease.Live(c.CloserUntil, now):
		return c, false, nil
	}
	c.Closer, c.CloserUntil = holder, msTime(now.Add(ttl))
	c.HelloPosted = c.HelloPosted || helloPosted
	m.conns[connID] = c
	return c, true, nil
}

func (m *memRecords) ClearOwed(_ context.Context, connID, holder string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.conns[connID]
	if !ok || c.Closer != holder {
		return connections.ErrLeaseLost
	}
	c.Unwelcomed, c.Closer, c.CloserUntil, c.HelloPosted = false, "", time.Time{}, false
	m.conns[connID] = c
	return nil
}

// TestReplyAfterHelloInMemory: an error reply (Reply) reaches the connection after
// hello, whenever it is made — before any sender is at work, while a sender is posting
// hello, after hello is recorded — and nobody waits for hello; a connection that no
// longer owns its agent gets none.
func TestReplyAfterHelloInMemory(t *testing.T) {
	t.Parallel()
	const agent, conn = "a", "c1"
	reply := protocol.NewError(protocol.CodeBadFrame, "bad")
	tests := []struct {
		name string
		run  func(t *testing.T, d *Deliverer, s *memSocket)
		to   string // the connection replied to
		want []string
	}{
		{"before any sender", func(t *testing.T, d *Deliverer, _ *memSocket) {
			replyTo(t, d, conn, reply)
		}, conn, []string{"hello", "error"}},
		{"while hello is posted, not yet recorded", func(t *testing.T, d *Deliverer, s *memSocket) {
			var once sync.Once
			s.onPost = func(_ string, f frameSeen) {
				if f.Type == "hello" {
					once.Do(func() { replyTo(t, d, conn, reply) })
				}
			}
			pump(t, d, nil, wake{})
		}, conn, []string{"hello", "error"}},
		{"after hello is recorded", func(t *testing.T, d *Deliverer, _ *memSocket) {
			pump(t, d, nil, wake{})
			replyTo(t, d, conn, reply)
		}, conn, []string{"hello", "error"}},
		{"to a connection that no longer owns the agent", func(t *testing.T, d *Deliverer, _ *memSocket) {
			replyTo(t, d, "c0", reply)
		}, "c0", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log, records, socket := &memLog{}, newMemRecords(), &memSocket{}
			log.append(agent, 1)
			records.claim(agent, conn)
			d := newDeliverer(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, log, records, memSlots{}, socket, nil)
			tc.run(t, d, socket)
			if got := socket.seen(t, tc.to); !slices.Equal(got, tc.want) {
				t.Fatalf("frames to %s = %v, want %v", tc.to, got, tc.want)
			}
			o, _ := records.Owner(context.Background(), agent)
			if len(o.Replies) != 0 || o.Lease != "" {
				t.Fatalf("record after: %d replies owed, lease %q; want none, let go", len(o.Replies), o.Lease)
			}
		})
	}
}

func replyTo(t *testing.T, d *Deliverer, connID string, frame protocol.Error) {
	t.Helper()
	if err := d.Reply(context.Background(), connections.Conn{ID: connID, AgentID: "a"}, frame); err != nil {
		t.Errorf("reply to %s: %v", connID, err)
	}
}
