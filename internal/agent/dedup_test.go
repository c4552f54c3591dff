package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/auth"
)

// TestInjectOnce: an inject with a client_id queues its text once, however often and
// however concurrently it comes, short texts (queued on the state item) and long ones
// (inbox items of their own) alike. With a guard (a frame posted over HTTP: its token
// still current) an inject whose token was revoked queues nothing, is ErrTokenGone,
// and leaves its client_id unused: the same id with a current token applies.
func TestInjectOnce(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", agent.InlineTextBytes+1)
	for _, text := range []string{"hi", long} {
		t.Run(map[bool]string{true: "short", false: "long"}[text == "hi"], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, opts{})
			table := e.names["AgentsTable"]
			tokens := auth.New(e.db, e.names["ConnectionsTable"])
			tok, err := tokens.Create(e.ctx, e.agentID)
			if err != nil {
				t.Fatal(err)
			}
			guard := tokens.Condition(e.agentID, auth.Hash(tok))
			framed := control.WithFrame(e.ctx, control.Frame{ClientID: "k-1", Guard: &guard})

			// Concurrent deliveries of one frame: each answers nil, one queues.
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = e.svc.InjectFrom(framed, e.agentID, text, false, "") }()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("delivery %d: %v", i, err)
				}
			}
			if got := queuedTexts(t, e.ctx, e.db, table, e.agentID); got != 1 {
				t.Fatalf("%d texts queued by 8 deliveries of one client_id, want 1", got)
			}

			// A revoked token's frame applies nothing, and burns no id.
			if err := tokens.Revoke(e.ctx, e.agentID); err != nil {
				t.Fatal(err)
			}
			revoked := control.WithFrame(e.ctx, control.Frame{ClientID: "k-2", Guard: &guard})
			if err := e.svc.InjectFrom(revoked, e.agentID, text, false, ""); !errors.Is(err, control.ErrTokenGone) {
				t.Fatalf("inject with a revoked token: %v, want ErrTokenGone", err)
			}
			if got := queuedTexts(t, e.ctx, e.db, table, e.agentID); got != 1 {
				t.Fatalf("%d texts queued after the revoked token's inject, want 1", got)
			}
			tok2, err := tokens.Create(e.ctx, e.agentID)
			if err != nil {
				t.Fatal(err)
			}
			guard2 := tokens.Condition(e.agentID, auth.Hash(tok2))
			current := control.WithFrame(e.ctx, control.Frame{ClientID: "k-2", Guard: &guard2})
			if err := e.svc.InjectFrom(current, e.agentID, text, false, ""); err != nil {
				t.Fatalf("the same client_id with a current token: %v", err)
			}
			if got := queuedTexts(t, e.ctx, e.db, table, e.agentID); got != 2 {
				t.Fatalf("%d texts queued, want 2 (k-1, k-2)", got)
			}
		})
	}
}

// TestOnceFrames: a frame other than inject is applied once per client_id; one that
// was refused did not use its id up (a repeat is refused again, not taken as applied);
// the events carry the client_id.
func TestOnceFrames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, opts{})
	ctx := func(id string) context.Context { return control.WithFrame(e.ctx, control.Frame{ClientID: id}) }
	for i := range 2 {
		if err := e.svc.Cancel(ctx("c-1"), e.agentID, ""); !errors.Is(err, agent.ErrNotRunning) {
			t.Fatalf("cancel %d with no turn: %v, want ErrNotRunning", i, err)
		}
	}
	for i := range 3 {
		if err := e.svc.SetPolicy(ctx("p-1"), e.agentID, []string{"echo"}); err != nil {
			t.Fatalf("set_policy %d: %v", i, err)
		}
	}
	evs := e.events()
	if got := ofType(evs, agent.TypePolicyUpdated); len(got) != 1 || string(got[0].Payload) != `{"patterns":["echo"],"client_id":"p-1"}` {
		t.Fatalf("policy/updated %s, want one carrying client_id p-1", dump(evs))
	}
	// An inject's events carry its client_id.
	if err := e.svc.InjectFrom(ctx("i-1"), e.agentID, "hello", true, ""); err != nil {
		t.Fatal(err)
	}
	evs = e.waitTurnEnds(1)
	if um := ofType(evs, agent.TypeUserMessage); len(um) != 1 || str(um[0], "client_id") != "i-1" {
		t.Fatalf("user/message %s, want one carrying client_id i-1", dump(evs))
	}
}
