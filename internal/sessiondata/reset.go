package sessiondata

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/dynamoerr"
)

// ResetAttr is the attribute of an agent's token item (pk "tokens#<id>") a reset
// writes, a new random value each time: its change on the connections table's stream
// tells the deliver function to close the agent's live connection with
// error{internal} (docs/protocol.md, "Session reset").
const ResetAttr = "reset"

// ResetConnAttr is written with ResetAttr: the connection that owned the agent when the
// marker was written, after the new log's seq 0 ("" when none did). Only that
// connection can have been sent a hello of the old log — one that claims the agent
// later reads the new epoch for its hello — so the deliver function closes the owner
// only while it is still that connection, never one that connected after the reset.
const ResetConnAttr = "reset_conn"

// Reset starts agentID's session over: a new log from seq 0 (session/created, a new
// epoch), the runtime state cleared (inbox, open turn, cancel marks, policy claim,
// model roles, checkpoint: every state item attribute but the profile and the usage
// and quota counters, and every other item of the agent), tokens and profile kept. A
// running turn stops: the reset takes the runner lease and waits out the one it took
// over (at most agent.DefaultLeaseDuration) before it erases the log. The live
// connection is closed last, through the deliver function, with error{internal}:
// its client reconnects and finds a new epoch in hello. Idempotent: an interrupted
// reset is finished by running it again.
//
// Cost: per event of the old log 1 write unit (its delete) and a share of a Query
// page; 1 write unit per other item; about 8 more write units and 4 read units.
func (st *Store) Reset(ctx context.Context, agentID string) (epoch string, err error) {
	lg := st.o.Logger.With("agent_id", agentID, "operation", "reset")
	f, until, err := st.takeFence(ctx, agentID)
	if err != nil {
		return "", err
	}
	if !until.IsZero() {
		lg.InfoContext(ctx, "waiting for the running turn's lease to run out", "lease_until", until.UTC())
		st.progress("stopping the running turn (its lease runs out at %s)", until.UTC().Format("15:04:05.000"))
	}
	if err := waitLease(ctx, until, st.now()); err != nil {
		return "", err
	}
	e := st.newEraser()
	if err := st.eraseLog(ctx, e, agentID); err != nil {
		return "", err
	}
	if err := st.keep(ctx, agentID, f); err != nil {
		return "", err
	}
	if err := st.eraseAgentItems(ctx, e, agentID); err != nil {
		return "", err
	}
	st.log.Forget(agentID)
	if _, err := st.log.Create(ctx, agentID); err != nil {
		return "", err
	}
	if epoch, err = st.log.Epoch(ctx, agentID); err != nil {
		return "", err
	}
	if err := st.strip(ctx, agentID, f, keptOnReset); err != nil {
		return "", err
	}
	if err := st.closeLive(ctx, agentID, epoch); err != nil {
		return "", err
	}
	lg.InfoContext(ctx, "session reset", "erased_items", e.erased, "epoch", epoch)
	return epoch, nil
}

// closeLive writes the reset marker on agentID's token item, if it has one (without
// a token nobody can be connected), naming the connection that owns the agent now
// (ResetConnAttr). Cost: 1 read unit (the ownership record's owner, strongly
// consistent: it must see a claim made before the new seq 0), 1 write unit.
func (st *Store) closeLive(ctx context.Context, agentID, epoch string) error {
	conn, _, err := st.ownerConn(ctx, agentID) // "": nobody connected
	if err != nil {
		return err
	}
	_, err = st.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(st.t.Connections),
		Key:                       map[string]types.AttributeValue{"pk": str(auth.Key(agentID))},
		UpdateExpression:          aws.String("SET #r = :e, #rc = :c"),
		ConditionExpression:       aws.String("attribute_exists(pk)"),
		ExpressionAttributeNames:  map[string]string{"#r": ResetAttr, "#rc": ResetConnAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":e": str(epoch), ":c": str(conn)},
	})
	if dynamoerr.CondFailed(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sessiondata: close live connection of %s: %w", agentID, err)
	}
	return nil
}
