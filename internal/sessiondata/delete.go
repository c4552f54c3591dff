package sessiondata

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/auth"
)

// The connections table's per-agent items (internal/connections, internal/auth).
const (
	ownerPrefix     = "agent#"     // the ownership record: owner connection, delivery cursor
	ownerConnAttr   = "conn"       // the ownership record's owner connection id
	tokenUsePrefx   = "tokuse#"    // the tokens' last use
	observersPrefix = "observers#" // the observer index (connections.Store.Observers)
)

// Delete erases everything the service keeps about agentID: its tokens first (the
// token item's removal makes the deliver function close the live connection with
// unauthorized, and no new connection can open), its log, every item of the agent in
// the agents table and its state item but for the usage and quota counters
// (docs/security.md, "Deleting a session"), and its ownership record. A running turn
// stops as in Reset. A later connect with a new token creates a fresh session (a new
// epoch). Bounded memory at any log length (one page of keys at a time), at most
// Options.Rate deletes a second; idempotent, so an interrupted delete is resumed by
// running it again. It reports the items erased in batches.
//
// Cost: 1 write unit per event and per other item, plus a share of the Query pages
// that list them; about 8 more write units and 3 read units.
func (st *Store) Delete(ctx context.Context, agentID string) (erased int, err error) {
	lg := st.o.Logger.With("agent_id", agentID, "operation", "delete")
	f, until, err := st.takeFence(ctx, agentID)
	if err != nil {
		return 0, err
	}
	for _, pk := range []string{auth.Key(agentID), tokenUsePrefx + agentID} {
		if err := st.deleteConnItem(ctx, pk); err != nil {
			return 0, err
		}
	}
	if err := waitLease(ctx, until, st.now()); err != nil {
		return 0, err
	}
	e := st.newEraser()
	if err := st.eraseLog(ctx, e, agentID); err != nil {
		return e.erased, err
	}
	if err := st.keep(ctx, agentID, f); err != nil {
		return e.erased, err
	}
	if err := st.eraseAgentItems(ctx, e, agentID); err != nil {
		return e.erased, err
	}
	st.log.Forget(agentID)
	if err := st.strip(ctx, agentID, f, keptOnDelete); err != nil {
		return e.erased, err
	}
	if err := st.dropOwner(ctx, agentID); err != nil {
		return e.erased, err
	}
	// The observer index: its observers were closed with the token item (deliver's
	// revoke), each taking its entry with it; an entry left by a lost close goes here.
	if err := st.deleteConnItem(ctx, observersPrefix+agentID); err != nil {
		return e.erased, err
	}
	lg.InfoContext(ctx, "session deleted", "erased_items", e.erased)
	return e.erased, nil
}

func (st *Store) deleteConnItem(ctx context.Context, pk string) error {
	_, err := st.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: aws.String(st.t.Connections), Key: map[string]types.AttributeValue{"pk": str(pk)},
	})
	if err != nil {
		return fmt.Errorf("sessiondata: delete %s: %w", pk, err)
	}
	return nil
}

// ownerConn reads agentID's ownership record (strongly consistent, 1 read unit): the
// connection that owns the agent ("" for none), and whether the record exists.
func (st *Store) ownerConn(ctx context.Context, agentID string) (conn string, found bool, err error) {
	out, err := st.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(st.t.Connections),
		Key:                      map[string]types.AttributeValue{"pk": str(ownerPrefix + agentID)},
		ProjectionExpression:     aws.String("#c"),
		ExpressionAttributeNames: map[string]string{"#c": ownerConnAttr},
		ConsistentRead:           aws.Bool(true),
	})
	if err != nil {
		return "", false, fmt.Errorf("sessiondata: read the owner of %s: %w", agentID, err)
	}
	if c, ok := out.Item[ownerConnAttr].(*types.AttributeValueMemberS); ok {
		conn = c.Value
	}
	return conn, out.Item != nil, nil
}

// dropOwner removes agentID's ownership record once the deliver function has closed
// the live connection (which removes it too), waiting for that at most
// Options.OwnerWait, looking with a growing pause; past it, it removes the record
// itself (the connection, if still open, is then served nothing and its record expires
// within 3 hours). Cost: 1 read unit per look, 1 write unit.
func (st *Store) dropOwner(ctx context.Context, agentID string) error {
	deadline := st.now().Add(st.o.OwnerWait)
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		conn, found, err := st.ownerConn(ctx, agentID)
		if err != nil {
			return err
		}
		if !found {
			return nil
		}
		if conn == "" || !st.now().Before(deadline) {
			break
		}
		if err := sleep(ctx, pause); err != nil {
			return errors.Join(fmt.Errorf("sessiondata: wait for the connection of %s to close", agentID), err)
		}
	}
	return st.deleteConnItem(ctx, ownerPrefix+agentID)
}
