package connections

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
)

// An agent's observers (docs/architecture.md, "Observers") are found through one item
// beside the ownership record, the observer index "observers#<agent_id>": one attribute
// per observer connection, "o:<connection_id>" = "<connected ms> <token hash>", and a
// version "ver" that every connect bumps. A stream batch finds every observer seat of an
// agent with one read of it, whatever their number; each observer's delivery state is
// on its own seat (seat.go).
const (
	observersPrefix = "observers#"
	obsAttrPrefix   = "o:"
	attrObsVer      = "ver"
)

// DefaultMaxObservers is the default bound on an agent's observer connections.
const DefaultMaxObservers = 8

// Observer is one entry of an agent's observer index.
type Observer struct {
	ConnID      string
	TokenHash   string
	ConnectedAt time.Time
}

// Seat is the observer's seat key on agentID.
func (o Observer) Seat(agentID string) string { return ObserverSeat(agentID, o.ConnID) }

func observersKey(agentID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: s(observersPrefix + agentID)}
}

// Observers returns agentID's observer connections, oldest first, read strongly
// consistent: one read (1 read unit for up to 4 KB, which holds well over the default
// eight entries). Entries older than a connection can live are left out.
func (st *Store) Observers(ctx context.Context, agentID string) ([]Observer, error) {
	obs, _, err := st.observers(ctx, agentID)
	return obs, err
}

func (st *Store) observers(ctx context.Context, agentID string) ([]Observer, int64, error) {
	out, err := st.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(st.table), Key: observersKey(agentID), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, 0, fmt.Errorf("connections: get observers of %s: %w", agentID, err)
	}
	cutoff := st.now().Add(-connTTL)
	var obs []Observer
	for k, v := range out.Item {
		conn, ok := strings.CutPrefix(k, obsAttrPrefix)
		sv, isS := v.(*types.AttributeValueMemberS)
		if !ok || !isS {
			continue
		}
		ms, hash, _ := strings.Cut(sv.Value, " ")
		at, _ := strconv.ParseInt(ms, 10, 64)
		o := Observer{ConnID: conn, TokenHash: hash, ConnectedAt: time.UnixMilli(at)}
		if o.ConnectedAt.Before(cutoff) {
			continue
		}
		obs = append(obs, o)
	}
	sort.Slice(obs, func(i, j int) bool {
		if !obs[i].ConnectedAt.Equal(obs[j].ConnectedAt) {
			return obs[i].ConnectedAt.Before(obs[j].ConnectedAt)
		}
		return obs[i].ConnID < obs[j].ConnID
	})
	return obs, num(out.Item, attrObsVer), nil
}

// Items of Observe's transaction, by name (see txItem).
const (
	observeIndex    = "index"    // the observer index, conditional on its version as read
	observeSeat     = "seat"     // the new observer's seat
	observeReplaced = "replaced" // the oldest observer's seat, deleted
)

// Observe records connID as an observer connection of agentID — its conn# record (role
// observer), its seat obs#<agent>#<conn> and its entry in the observer index — in one
// transaction with tokenCheck (ErrTokenGone if the token went meanwhile), as Claim does
// for the driver. It never touches the ownership record: an observer neither supersedes
// the driver nor is superseded by it. With max observers or more already connected (more
// after the bound was lowered), the oldest one
// is superseded in the same transaction — its seat deleted, its conn# record marked
// superseded (unwelcomed, with its sender lease as closing lease, if its hello had not
// gone out) — and its seat as it stood is returned, for delivery to close exactly as a
// superseded driver (delivery.Deliverer.Welcome). Cost: 1 read of the index, the
// oldest's seat read at the cap, one transaction of 4 items (6 at the cap).
func (st *Store) Observe(ctx context.Context, agentID, connID, tokenHash string, tokenCheck *types.ConditionCheck, max int) (superseded Owner, err error) {
	if tokenCheck == nil {
		return Owner{}, fmt.Errorf("connections: observe %s for %s: no token check", agentID, connID)
	}
	if max <= 0 {
		max = DefaultMaxObservers
	}
	for attempt := 0; attempt < 30; attempt++ {
		obs, ver, err := st.observers(ctx, agentID)
		if err != nil {
			return Owner{}, err
		}
		now := st.now()
		names := map[string]string{"#n": obsAttrPrefix + connID, "#ver": attrObsVer}
		vals := map[string]types.AttributeValue{
			":entry": s(strconv.FormatInt(now.UnixMilli(), 10) + " " + tokenHash),
			":one":   n(1), ":ver": n(ver),
		}
		update := "SET #n = :entry ADD #ver :one"
		cond := "attribute_not_exists(#ver) OR #ver = :ver"
		var prev Owner
		var remove []string
		if len(obs) >= max {
			// The oldest only, even when a lowered bound leaves more above it: an entry
			// leaves the index only with its seat, so that no observer keeps a socket
			// that stream batches no longer reach. A lowered bound takes effect as
			// observers leave or are superseded one per connect.
			remove = append(remove, obs[0].ConnID)
		}
		if len(remove) > 0 {
			for i, c := range remove {
				names["#r"+strconv.Itoa(i)] = obsAttrPrefix + c
				if i == 0 {
					update = "SET #n = :entry REMOVE #r0 ADD #ver :one"
				} else {
					update = strings.Replace(update, " ADD", ", #r"+strconv.Itoa(i)+" ADD", 1)
				}
			}
			prev, err = st.Owner(ctx, ObserverSeat(agentID, remove[0]))
			if errors.Is(err, ErrNotFound) {
				prev, err = Owner{}, nil // gone already: its entry is only dropped
			}
			if err != nil {
				return Owner{}, err
			}
		}
		seat := map[string]types.AttributeValue{
			attrPK:        s(seatPK(ObserverSeat(agentID, connID))),
			attrConn:      s(connID),
			attrTokenHash: s(tokenHash),
			attrSub:       n(0),
			attrNext:      n(0),
			attrHello:     &types.AttributeValueMemberBOOL{Value: false},
			attrExpiresAt: n(now.Add(connTTL).Unix()),
		}
		items := []txItem{
			{claimToken, types.TransactWriteItem{ConditionCheck: tokenCheck}},
			{observeSeat, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(st.table), Item: seat,
				ConditionExpression: aws.String("attribute_not_exists(#pk)")}}},
			{claimConn, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(st.table),
				Item: st.connItem(Conn{ID: connID, AgentID: agentID, TokenHash: tokenHash, State: StateAuthorized, Role: RoleObserver})}}},
			{observeIndex, types.TransactWriteItem{Update: &types.Update{TableName: aws.String(st.table), Key: observersKey(agentID),
				UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
				ExpressionAttributeNames: names, ExpressionAttributeValues: vals}}},
		}
		if prev.ConnID != "" {
			del := &types.Delete{TableName: aws.String(st.table), Key: ownerKey(prev.Key()),
				ConditionExpression:       aws.String("#conn = :prev"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":prev": s(prev.ConnID)}}
			set := "SET #state = :sup, #expires_at = if_not_exists(#expires_at, :exp)"
			cvals := map[string]types.AttributeValue{":sup": s(string(StateSuperseded)), ":exp": n(now.Add(connTTL).Unix())}
			if !prev.HelloSent {
				// Closing it is owed, hello first: replace the seat only as read, as Claim does.
				del.ConditionExpression = aws.String("#conn = :prev AND #hello = :no AND (attribute_not_exists(#lease_until) OR #lease_until = :lu)")
				del.ExpressionAttributeValues[":no"] = &types.AttributeValueMemberBOOL{Value: false}
				del.ExpressionAttributeValues[":lu"] = n(prev.LeaseUntil.UnixMilli())
				if prev.LeaseUntil.IsZero() {
					del.ExpressionAttributeValues[":lu"] = n(0)
				}
				set += unwelcomedSet(prev, cvals)
			}
			del.ExpressionAttributeNames = exprNames(del.ConditionExpression)
			items = append(items,
				txItem{observeReplaced, types.TransactWriteItem{Delete: del}},
				txItem{claimReplaced, types.TransactWriteItem{Update: &types.Update{TableName: aws.String(st.table),
					Key: connKey(prev.ConnID), UpdateExpression: aws.String(set), ExpressionAttributeValues: cvals}}})
		}
		err = st.transact(ctx, items)
		if err == nil {
			return prev, nil
		}
		if !dynamoerr.TxCanceled(err) {
			return Owner{}, fmt.Errorf("connections: observe %s for %s: %w", agentID, connID, err)
		}
		if txCondFailed(err, items, claimToken) {
			return Owner{}, fmt.Errorf("%w: %s", ErrTokenGone, agentID)
		}
		time.Sleep(time.Duration(rand.N(min(attempt+1, 10)*20)) * time.Millisecond)
	}
	return Owner{}, fmt.Errorf("connections: observe %s for %s: too much contention", agentID, connID)
}

// unindex removes connID's entry from agentID's observer index. Cost: 1 write unit.
func (st *Store) unindex(ctx context.Context, agentID, connID string) error {
	_, err := st.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(st.table), Key: observersKey(agentID),
		UpdateExpression:          aws.String("REMOVE #n ADD #ver :one"),
		ConditionExpression:       aws.String("attribute_exists(#n)"),
		ExpressionAttributeNames:  map[string]string{"#n": obsAttrPrefix + connID, "#ver": attrObsVer},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1)},
	})
	if err != nil && !dynamoerr.CondFailed(err) {
		return fmt.Errorf("connections: unindex observer %s of %s: %w", connID, agentID, err)
	}
	return nil
}

// Seats reads the records of seats (seat keys: the driver's and observers') in one
// strongly consistent BatchGetItem — one request however many, 1 read unit per record
// of up to 4 KB — and returns those that exist, by key. A stream batch reads an
// agent's seats so, after the observer index: two requests per agent and batch,
// whatever its number of observers (docs/cost.md, "Observers").
func (st *Store) Seats(ctx context.Context, seats []string) (map[string]Owner, error) {
	out := map[string]Owner{}
	for start := 0; start < len(seats); start += 100 { // BatchGetItem's bound
		var keys []map[string]types.AttributeValue
		for _, seat := range seats[start:min(start+100, len(seats))] {
			keys = append(keys, ownerKey(seat))
		}
		req := map[string]types.KeysAndAttributes{st.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		for attempt := 0; len(req) > 0; attempt++ {
			res, err := st.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, fmt.Errorf("connections: read %d seats: %w", len(keys), err)
			}
			for _, item := range res.Responses[st.table] {
				o := decodeOwner(item)
				out[o.Key()] = o
			}
			req = res.UnprocessedKeys
			if len(req) > 0 {
				if attempt >= 10 {
					return nil, fmt.Errorf("connections: read %d seats: unprocessed keys after %d attempts", len(keys), attempt)
				}
				time.Sleep(time.Duration(rand.N((attempt+1)*20)) * time.Millisecond)
			}
		}
	}
	return out, nil
}
