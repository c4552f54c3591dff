package connections

// The items as stored: encoding and decoding of connection and ownership records, and
// the one reading of a failed condition.

import (
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func (st *Store) connItem(c Conn) map[string]types.AttributeValue {
	now := st.now()
	item := map[string]types.AttributeValue{
		attrPK:          s(connPrefix + c.ID),
		attrAgent:       s(c.AgentID),
		attrState:       s(string(c.State)),
		attrConnectedAt: n(now.UnixMilli()),
		attrExpiresAt:   n(now.Add(connTTL).Unix()),
	}
	if c.TokenHash != "" {
		item[attrTokenHash] = s(c.TokenHash)
	}
	if c.Role == RoleObserver {
		item[attrRole] = s(c.Role)
	}
	return item
}

func decodeConn(item map[string]types.AttributeValue) Conn {
	c := Conn{
		ID:          strings.TrimPrefix(str(item, attrPK), connPrefix),
		AgentID:     str(item, attrAgent),
		TokenHash:   str(item, attrTokenHash),
		State:       State(str(item, attrState)),
		ConnectedAt: time.UnixMilli(num(item, attrConnectedAt)),
		Order:       num(item, attrOrder),
		Role:        str(item, attrRole),
	}
	decodeWelcome(&c, item)
	return c
}

func decodeOwner(item map[string]types.AttributeValue) Owner {
	if item == nil {
		return Owner{}
	}
	o := Owner{
		AgentID:   strings.TrimPrefix(str(item, attrPK), ownerPrefix),
		Observer:  strings.HasPrefix(str(item, attrPK), observerPrefix),
		ConnID:    str(item, attrConn),
		TokenHash: str(item, attrTokenHash),
		Sub:       num(item, attrSub),
		Next:      num(item, attrNext),
		From:      num(item, attrFrom),
		Requested: num(item, attrRequested),
		Truncated: boolean(item, attrTruncated),
		ReplayEnd: num(item, attrReplayEnd),
		HelloSent: boolean(item, attrHello),
		Lease:     str(item, attrLease),
		LeaseKind: kindOf(str(item, attrLease), str(item, attrLeaseKind)),
		Batch:     boolean(item, attrBatch),
		Replies:   replies(item),
		Released:  str(item, attrReleased),
	}
	if o.Observer {
		o.AgentID = SeatAgent(strings.TrimPrefix(str(item, attrPK), observerPrefix))
	}
	switch v := item[attrPending].(type) {
	case *types.AttributeValueMemberBOOL:
		o.Pending = v.Value
	case *types.AttributeValueMemberN:
		o.Pending, o.PendingTo = true, num(item, attrPending)+1
	}
	if ms := num(item, attrLeaseUntil); ms > 0 {
		o.LeaseUntil = time.UnixMilli(ms)
	}
	if ms := num(item, attrWatchUntil); ms > 0 && str(item, attrWatch) != "" {
		o.WatchUntil = time.UnixMilli(ms)
	}
	return o
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func str(item map[string]types.AttributeValue, k string) string {
	if v, ok := item[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func num(item map[string]types.AttributeValue, k string) int64 {
	if v, ok := item[k].(*types.AttributeValueMemberN); ok {
		i, _ := strconv.ParseInt(v.Value, 10, 64)
		return i
	}
	return 0
}

func boolean(item map[string]types.AttributeValue, k string) bool {
	v, ok := item[k].(*types.AttributeValueMemberBOOL)
	return ok && v.Value
}
