package main

import (
	"context"
	"fmt"
	"time"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/connections"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// connectFloor is what n connects at once cost the store alone: the DynamoDB requests
// an accepted driver's $connect makes, in its order — the token's read
// (auth.Store.CheckRole), the log's create (refused: the log exists, as on a
// reconnect), the claim (connections.Store.Claim: the owner's read and the transaction
// with the token's check and the agent's owner claim, superseding a previous owner)
// and the token's last use — for n agents of their own at once, through the floor's
// clients (the latency profile's, when set), with no Lambda, no gateway and no kick.
// Its p50 is the floor under the storm's dial → hello p50: hello can come no sooner
// than the connect that earns it.
//
// The agents are fresh ("connfloor-NNN"), each with a token, a log and an owner made
// beforehand, so that the storm's own records are not touched.
func (b *bench) connectFloor(ctx context.Context, n int) (p50, most time.Duration, err error) {
	db := b.floor.db
	tokens := auth.New(db, b.st.tables["ConnectionsTable"])
	conns := connections.New(db, b.st.tables["ConnectionsTable"])
	log := sessionlog.New(db, b.st.cfg.LogTable)
	agents, toks := make([]string, n), make([]string, n)
	claim := func(ctx context.Context, i int, connID, hash string) error {
		_, err := conns.Claim(ctx, agents[i], connID, hash, tokens.Condition(agents[i], hash).ConditionCheck,
			control.OwnerClaim(b.st.cfg.AgentsTable, agents[i], connID))
		return err
	}
	if err := parallel(8, n, func(i int) error {
		agents[i] = fmt.Sprintf("connfloor-%03d", i)
		tok, err := b.st.tokens.Create(ctx, agents[i])
		if err != nil {
			return err
		}
		toks[i] = tok
		if _, err := log.Create(ctx, agents[i]); err != nil {
			return err
		}
		return claim(ctx, i, fmt.Sprintf("connfloor-old-%03d", i), auth.Hash(tok))
	}); err != nil {
		return 0, 0, fmt.Errorf("connect floor: prepare: %w", err)
	}
	took := make([]time.Duration, n)
	if err := parallel(n, n, func(i int) error {
		t0 := time.Now()
		hash, _, err := tokens.CheckRole(ctx, agents[i], toks[i])
		if err != nil {
			return err
		}
		if created, err := log.Create(ctx, agents[i]); err != nil || created {
			return fmt.Errorf("%s: create the log: created %v, %v (want refused)", agents[i], created, err)
		}
		if err := claim(ctx, i, fmt.Sprintf("connfloor-new-%03d", i), hash); err != nil {
			return err
		}
		if err := tokens.Used(ctx, agents[i], hash); err != nil {
			return err
		}
		took[i] = time.Since(t0)
		return nil
	}); err != nil {
		return 0, 0, fmt.Errorf("connect floor: %w", err)
	}
	return percentile(took, 50), percentile(took, 100), nil
}
