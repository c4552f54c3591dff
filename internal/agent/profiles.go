package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
)

// Agents' own profiles, for the command line (`terret agent`), which has only a table
// and a client. A profile is stored as JSON in the "profile" attribute of the agent's
// state item; the runner reads it when it takes the agent's lease, so the agent's next
// turn runs with it. The caller checks a profile before storing it.

// PutProfile stores profileJSON as agentID's own profile.
func PutProfile(ctx context.Context, db DB, agentsTable, agentID, profileJSON string) error {
	return (&store{db: db, table: agentsTable}).setAttr(ctx, agentID, attrProfile, profileJSON)
}

// GetProfile returns agentID's own profile, "" if it has none.
func GetProfile(ctx context.Context, db DB, agentsTable, agentID string) (string, error) {
	st, err := (&store{db: db, table: agentsTable}).getState(ctx, agentID, attrProfile)
	if err != nil {
		return "", err
	}
	return st.Profile, nil
}

// DeleteProfile removes agentID's own profile (the default profile applies again). It
// reports whether there was one.
func DeleteProfile(ctx context.Context, db DB, agentsTable, agentID string) (bool, error) {
	_, err := (&store{db: db, table: agentsTable}).update(ctx, agentID, &dynamodb.UpdateItemInput{
		UpdateExpression:         aws.String("REMOVE #p"),
		ConditionExpression:      aws.String("attribute_exists(#p)"),
		ExpressionAttributeNames: map[string]string{"#p": attrProfile},
	})
	if dynamoerr.CondFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("agent: delete profile of %s: %w", agentID, err)
	}
	return true, nil
}

// Scanner is the part of the DynamoDB client ListProfiles uses.
type Scanner interface {
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

var _ Scanner = (*dynamodb.Client)(nil)

// ListProfiles returns the ids of the agents that have their own profile, sorted. It
// scans the agents table (one read of every item: a command-line operation, not a
// hot path).
func ListProfiles(ctx context.Context, db Scanner, agentsTable string) ([]string, error) {
	var ids []string
	in := &dynamodb.ScanInput{
		TableName:                 aws.String(agentsTable),
		FilterExpression:          aws.String("sk = :s AND attribute_exists(#p)"),
		ProjectionExpression:      aws.String("pk"),
		ExpressionAttributeNames:  map[string]string{"#p": attrProfile},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": s(skState)},
	}
	for {
		out, err := db.Scan(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("agent: list profiles: %w", err)
		}
		for _, it := range out.Items {
			if v, ok := it["pk"].(*types.AttributeValueMemberS); ok {
				ids = append(ids, strings.TrimPrefix(v.Value, agentPrefix))
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	sort.Strings(ids)
	return ids, nil
}
