package control

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// AttrConn is the agent state item's copy of the ownership record's owner connection:
// set by each connect's claim transaction (OwnerClaim), removed by a session reset or
// delete with every other runtime attribute. A client frame's inbox write is
// conditional on it naming the frame's connection.
const AttrConn = "conn"

// OwnerClaim is the write a connect adds to its claim transaction
// (connections.Store.Claim's also): the agent's state item (pk "agent#<id>", sk
// "state"), in table, names connID as its owner, in the same transaction that makes
// connID the ownership record's owner, so the two never disagree about who owns the
// agent. Cost: 2 write units (an item of a transaction). It is here, not beside the
// runtime that reads the attribute, so that connect carries none of the runtime.
func OwnerClaim(table, agentID, connID string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: aws.String(table),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "agent#" + agentID},
			"sk": &types.AttributeValueMemberS{Value: "state"},
		},
		UpdateExpression:          aws.String("SET #conn = :c"),
		ExpressionAttributeNames:  map[string]string{"#conn": AttrConn},
		ExpressionAttributeValues: map[string]types.AttributeValue{":c": &types.AttributeValueMemberS{Value: connID}},
	}}
}
