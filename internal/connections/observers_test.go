package connections_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/connections"
)

// TestObserve: observer connections get their own seat beside the ownership record,
// never touching it; at the bound the oldest is superseded (its seat gone, its conn#
// record superseded) and returned; a driver's claim supersedes no observer; Seats reads
// every seat in one request; Forget of an observer takes its seat and index entry; a
// revoked token makes Observe fail with ErrTokenGone.
func TestObserve(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	const agent = "watched"
	drvTok := f.connect(t, agent, "drv")
	obsTok, err := f.tokens.CreateRole(ctx, agent, 0, auth.RoleObserver)
	if err != nil {
		t.Fatal(err)
	}
	h := auth.Hash(obsTok)
	observe := func(conn string) connections.Owner {
		t.Helper()
		prev, err := f.conns.Observe(ctx, agent, conn, h, f.tokens.Condition(agent, h).ConditionCheck, 3)
		if err != nil {
			t.Fatalf("observe %s: %v", conn, err)
		}
		return prev
	}
	for i := range 3 {
		if prev := observe(fmt.Sprintf("o%d", i)); prev.ConnID != "" {
			t.Fatalf("observer o%d superseded %s below the bound", i, prev.ConnID)
		}
		time.Sleep(2 * time.Millisecond) // connected_at is in ms: the order is the connects'
	}
	if o, err := f.conns.Owner(ctx, agent); err != nil || o.ConnID != "drv" || o.Observer {
		t.Fatalf("ownership record after observers: %+v, %v", o, err)
	}
	obs, err := f.conns.Observers(ctx, agent)
	if err != nil || len(obs) != 3 || obs[0].ConnID != "o0" || obs[2].ConnID != "o2" || obs[0].TokenHash != h {
		t.Fatalf("observers %+v, %v", obs, err)
	}
	c, err := f.conns.Conn(ctx, "o1")
	if err != nil || c.Role != connections.RoleObserver || c.Key() != connections.ObserverSeat(agent, "o1") {
		t.Fatalf("observer's conn# record %+v, %v", c, err)
	}

	// The fourth supersedes the oldest.
	prev := observe("o3")
	if prev.ConnID != "o0" || !prev.Observer || prev.AgentID != agent {
		t.Fatalf("fourth observer superseded %+v, want o0's seat", prev)
	}
	if c, err := f.conns.Conn(ctx, "o0"); err != nil || c.State != connections.StateSuperseded {
		t.Fatalf("o0 after the fourth: %+v, %v", c, err)
	}
	if _, err := f.conns.Owner(ctx, connections.ObserverSeat(agent, "o0")); !errors.Is(err, connections.ErrNotFound) {
		t.Fatalf("o0's seat after the fourth: %v", err)
	}

	// A new driver supersedes the driver only.
	if prevDrv, err := f.claim(t, agent, "drv2", drvTok); err != nil || prevDrv != "drv" {
		t.Fatalf("driver claim: superseded %q, %v", prevDrv, err)
	}
	seats := []string{agent, connections.ObserverSeat(agent, "o1"), connections.ObserverSeat(agent, "o2"), connections.ObserverSeat(agent, "o3"), connections.ObserverSeat(agent, "o0")}
	read, err := f.conns.Seats(ctx, seats)
	if err != nil || len(read) != 4 || read[agent].ConnID != "drv2" || read[seats[3]].ConnID != "o3" || !read[seats[3]].Observer {
		t.Fatalf("seats %+v, %v", read, err)
	}

	// Forget takes the observer's seat and index entry.
	if err := f.conns.Forget(ctx, "o2", connections.ObserverSeat(agent, "o2")); err != nil {
		t.Fatal(err)
	}
	if obs, err := f.conns.Observers(ctx, agent); err != nil || len(obs) != 2 || obs[0].ConnID != "o1" || obs[1].ConnID != "o3" {
		t.Fatalf("observers after o2 left: %+v, %v", obs, err)
	}

	// A revoked token connects nothing.
	if err := f.tokens.Revoke(ctx, agent); err != nil {
		t.Fatal(err)
	}
	if _, err := f.conns.Observe(ctx, agent, "o9", h, f.tokens.Condition(agent, h).ConditionCheck, 3); !errors.Is(err, connections.ErrTokenGone) {
		t.Fatalf("observe with a revoked token: %v, want ErrTokenGone", err)
	}
}

// TestTokenRole: a token's role is stored with it; tokens without one are drivers.
func TestTokenRole(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, tc := range []struct{ role, want string }{{"", auth.RoleDriver}, {auth.RoleDriver, auth.RoleDriver}, {auth.RoleObserver, auth.RoleObserver}} {
		tok, err := f.tokens.CreateRole(ctx, "a", 0, tc.role)
		if err != nil {
			t.Fatal(err)
		}
		if _, role, err := f.tokens.CheckRole(ctx, "a", tok); err != nil || role != tc.want {
			t.Fatalf("role %q: checked %q, %v; want %q", tc.role, role, err, tc.want)
		}
	}
	if _, err := f.tokens.CreateRole(ctx, "a", 0, "admin"); !errors.Is(err, auth.ErrBadRole) {
		t.Fatalf("role admin: %v, want ErrBadRole", err)
	}
}
