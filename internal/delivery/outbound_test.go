package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/protocol"
)

// outboundRig is one case's deliverer on in-memory records, socket and invoker: agent
// "a", owned by "c0" until a case claims it for "c1".
type outboundRig struct {
	d       *Deliverer
	records *memRecords
	socket  *memSocket
	kicks   *kickLog
}

// newOutboundRig returns a rig whose deliverer reads records through wrap (nil: as they are).
func newOutboundRig(wrap func(Records) Records) *outboundRig {
	r := &outboundRig{records: newMemRecords(), socket: &memSocket{}, kicks: &kickLog{}}
	log := &memLog{}
	log.append("a", 2)
	var rec Records = r.records
	if wrap != nil {
		rec = wrap(rec)
	}
	r.d = newDeliverer(Config{DeliverFunction: "deliver", Logger: discardLogger()}, log, rec, memSlots{}, r.socket, r.kicks)
	return r
}

// helloTo makes connID the owner of "a" and sends it hello.
func (r *outboundRig) helloTo(t *testing.T, connID string) {
	t.Helper()
	r.records.claim("a", connID)
	pump(t, r.d, nil, wake{})
}

// supersede claims "a" for "c1" and returns the record the claim replaced.
func (r *outboundRig) supersede(t *testing.T) connections.Owner {
	t.Helper()
	prev, err := r.records.Owner(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	r.records.claim("a", "c1")
	return prev
}

// sent is what connID was sent: "hello", "error:<code>", or an event's seq.
func (r *outboundRig) sent(t *testing.T, connID string) []string {
	t.Helper()
	r.socket.mu.Lock()
	defer r.socket.mu.Unlock()
	var out []string
	for _, b := range r.socket.frames[connID] {
		var f struct {
			Type string `json:"type"`
			Code string `json:"code"`
			Seq  int64  `json:"seq"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("frame %s: %v", b, err)
		}
		switch f.Type {
		case "error":
			out = append(out, "error:"+f.Code)
		case "note":
			out = append(out, fmt.Sprint(f.Seq))
		default:
			out = append(out, f.Type)
		}
	}
	return out
}

// failConn is records whose connection reads fail (DynamoDB unreachable).
type failConn struct{ Records }

var errUnreachable = errors.New("records unreachable")

func (failConn) Conn(context.Context, string) (connections.Conn, error) {
	return connections.Conn{}, errUnreachable
}

// TestOutbound: each of the routes' outbound calls (socket.Outbound) makes the client
// receive, in order, what the protocol says — hello first, an error frame before the
// close — and hands to an asynchronous deliver invocation what a route cannot post.
func TestOutbound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lambdaDown := errors.New("lambda unreachable")
	type want struct {
		sent    map[string][]string // frames per connection; a connection not named got none
		deleted []string
		kicks   []Kick
		err     bool
	}
	tests := []struct {
		name string
		wrap func(Records) Records
		run  func(t *testing.T, r *outboundRig) error
		want want
	}{
		{"welcome, nobody superseded", nil, func(t *testing.T, r *outboundRig) error {
			r.records.claim("a", "c1")
			return r.d.Welcome(ctx, "a", connections.Owner{})
		}, want{kicks: []Kick{{Kind: KickPump, AgentID: "a"}}}},
		{"welcome superseding a connection after its hello", nil, func(t *testing.T, r *outboundRig) error {
			r.helloTo(t, "c0")
			return r.d.Welcome(ctx, "a", r.supersede(t))
		}, want{sent: map[string][]string{"c0": {"hello", "error:superseded"}}, deleted: []string{"c0"},
			kicks: []Kick{{Kind: KickPump, AgentID: "a"}}}},
		{"welcome superseding a connection before its hello", nil, func(t *testing.T, r *outboundRig) error {
			r.records.claim("a", "c0")
			return r.d.Welcome(ctx, "a", r.supersede(t))
		}, want{kicks: []Kick{
			{Kind: KickDrop, AgentID: "a", ConnectionID: "c0", Code: protocol.CodeSuperseded, Hello: true},
			{Kind: KickPump, AgentID: "a"},
		}}},
		{"welcome with Lambda unreachable", nil, func(t *testing.T, r *outboundRig) error {
			r.records.claim("a", "c1")
			r.kicks.err = lambdaDown
			return r.d.Welcome(ctx, "a", connections.Owner{})
		}, want{err: true}},
		{"turn away", nil, func(t *testing.T, r *outboundRig) error {
			return r.d.TurnAway(ctx, "cx")
		}, want{kicks: []Kick{{Kind: KickDrop, ConnectionID: "cx", Code: protocol.CodeUnauthorized}}}},
		{"turn away with Lambda unreachable", nil, func(t *testing.T, r *outboundRig) error {
			r.kicks.err = lambdaDown
			return r.d.TurnAway(ctx, "cx")
		}, want{err: true}},
		{"subscribe frame", nil, func(t *testing.T, r *outboundRig) error {
			r.records.claim("a", "c1")
			recorded := 0
			r.socket.onPost = func(string, frameSeen) {
				if recorded != 1 {
					t.Errorf("a frame posted with recorded called %d times; want once, before any post", recorded)
				}
			}
			err := r.d.SubscribeFrame(ctx, connections.Conn{ID: "c1", AgentID: "a"}, protocol.Subscribe{FromSeq: 0}, func() { recorded++ })
			if recorded != 1 {
				t.Errorf("recorded called %d times; want 1", recorded)
			}
			return err
		}, want{sent: map[string][]string{"c1": {"hello", "0", "1"}}}},
		{"subscribe frame from a connection that no longer owns the agent", nil, func(t *testing.T, r *outboundRig) error {
			r.records.claim("a", "c1")
			err := r.d.SubscribeFrame(ctx, connections.Conn{ID: "c0", AgentID: "a"}, protocol.Subscribe{}, func() { t.Error("recorded called") })
			if !errors.Is(err, connections.ErrNotOwner) {
				t.Errorf("err = %v; want ErrNotOwner", err)
			}
			return nil
		}, want{}},
		{"reply after hello", nil, func(t *testing.T, r *outboundRig) error {
			r.helloTo(t, "c1")
			return r.d.Reply(ctx, connections.Conn{ID: "c1", AgentID: "a"}, protocol.NewError(protocol.CodeBadFrame, "bad"))
		}, want{sent: map[string][]string{"c1": {"hello", "error:bad_frame"}}}},
		{"refuse a connection superseded after its hello", nil, func(t *testing.T, r *outboundRig) error {
			r.helloTo(t, "c0")
			r.supersede(t)
			return r.d.Refuse(ctx, "c0", protocol.CodeSuperseded)
		}, want{sent: map[string][]string{"c0": {"hello", "error:superseded"}}, deleted: []string{"c0"}}},
		{"refuse a connection superseded before its hello", nil, func(t *testing.T, r *outboundRig) error {
			r.records.claim("a", "c0")
			r.supersede(t)
			return r.d.Refuse(ctx, "c0", protocol.CodeSuperseded)
		}, want{sent: map[string][]string{"c0": {"hello", "error:superseded"}}, deleted: []string{"c0"}}},
		{"refuse an unknown connection", nil, func(t *testing.T, r *outboundRig) error {
			return r.d.Refuse(ctx, "cx", protocol.CodeUnauthorized)
		}, want{sent: map[string][]string{"cx": {"error:unauthorized"}}, deleted: []string{"cx"}}},
		{"fail after hello", nil, func(t *testing.T, r *outboundRig) error {
			r.helloTo(t, "c1")
			return r.d.Fail(ctx, "c1")
		}, want{sent: map[string][]string{"c1": {"hello", "error:internal"}}, deleted: []string{"c1"}}},
		{"fail with the records unreachable: handed to a fail invocation", func(rec Records) Records { return failConn{rec} }, func(t *testing.T, r *outboundRig) error {
			r.records.claim("a", "c1")
			return r.d.Fail(ctx, "c1")
		}, want{kicks: []Kick{{Kind: KickFail, ConnectionID: "c1"}}}},
		{"fail with the records and Lambda unreachable", func(rec Records) Records { return failConn{rec} }, func(t *testing.T, r *outboundRig) error {
			r.records.claim("a", "c1")
			r.kicks.err = lambdaDown
			return r.d.Fail(ctx, "c1")
		}, want{err: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newOutboundRig(tc.wrap)
			err := tc.run(t, r)
			if (err != nil) != tc.want.err {
				t.Fatalf("err = %v; want error %v", err, tc.want.err)
			}
			for _, c := range []string{"c0", "c1", "cx"} {
				if got := r.sent(t, c); !slices.Equal(got, tc.want.sent[c]) {
					t.Errorf("sent to %s: %v; want %v", c, got, tc.want.sent[c])
				}
			}
			if !slices.Equal(r.socket.deleted, tc.want.deleted) {
				t.Errorf("deleted %v; want %v", r.socket.deleted, tc.want.deleted)
			}
			if !slices.Equal(r.kicks.kicks, tc.want.kicks) {
				t.Errorf("kicks %+v; want %+v", r.kicks.kicks, tc.want.kicks)
			}
		})
	}
}
