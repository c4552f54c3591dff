package eventsource

import (
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// toEventRecord converts a DynamoDB Streams record to the record Lambda's event
// source mapping puts in a DynamoDBEvent. region replaces the record's awsRegion,
// because DynamoDB Local reports "ddblocal" there.
func toEventRecord(r types.Record, region, streamARN string) (events.DynamoDBEventRecord, error) {
	out := events.DynamoDBEventRecord{
		AWSRegion:      region,
		EventID:        aws.ToString(r.EventID),
		EventName:      string(r.EventName),
		EventSource:    "aws:dynamodb",
		EventVersion:   "1.1",
		EventSourceArn: streamARN,
	}
	if r.UserIdentity != nil {
		// Set on deletions by TTL: {"type":"Service","principalId":"dynamodb.amazonaws.com"}.
		out.UserIdentity = &events.DynamoDBUserIdentity{
			Type:        aws.ToString(r.UserIdentity.Type),
			PrincipalID: aws.ToString(r.UserIdentity.PrincipalId),
		}
	}
	sr := r.Dynamodb
	if sr == nil {
		return out, fmt.Errorf("eventsource: record %s has no dynamodb section", out.EventID)
	}
	var err error
	if out.Change.Keys, err = convertMap(sr.Keys); err != nil {
		return out, err
	}
	if out.Change.NewImage, err = convertMap(sr.NewImage); err != nil {
		return out, err
	}
	if out.Change.OldImage, err = convertMap(sr.OldImage); err != nil {
		return out, err
	}
	if sr.ApproximateCreationDateTime != nil {
		// Lambda delivers whole epoch seconds.
		out.Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: sr.ApproximateCreationDateTime.Truncate(time.Second)}
	}
	out.Change.SequenceNumber = aws.ToString(sr.SequenceNumber)
	out.Change.SizeBytes = aws.ToInt64(sr.SizeBytes)
	out.Change.StreamViewType = string(sr.StreamViewType)
	return out, nil
}

func convertMap(in map[string]types.AttributeValue) (map[string]events.DynamoDBAttributeValue, error) {
	if in == nil {
		return nil, nil
	}
	out := make(map[string]events.DynamoDBAttributeValue, len(in))
	for k, v := range in {
		c, err := convertValue(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", k, err)
		}
		out[k] = c
	}
	return out, nil
}

// convertValue maps every DynamoDB attribute type (S N B SS NS BS M L NULL BOOL) to
// aws-lambda-go's attribute value, whose JSON is DynamoDB JSON.
func convertValue(v types.AttributeValue) (events.DynamoDBAttributeValue, error) {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return events.NewStringAttribute(v.Value), nil
	case *types.AttributeValueMemberN:
		return events.NewNumberAttribute(v.Value), nil
	case *types.AttributeValueMemberB:
		return events.NewBinaryAttribute(v.Value), nil
	case *types.AttributeValueMemberSS:
		return events.NewStringSetAttribute(v.Value), nil
	case *types.AttributeValueMemberNS:
		return events.NewNumberSetAttribute(v.Value), nil
	case *types.AttributeValueMemberBS:
		return events.NewBinarySetAttribute(v.Value), nil
	case *types.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(v.Value), nil
	case *types.AttributeValueMemberNULL:
		return events.NewNullAttribute(), nil
	case *types.AttributeValueMemberM:
		m, err := convertMap(v.Value)
		if err != nil {
			return events.DynamoDBAttributeValue{}, err
		}
		if m == nil {
			m = map[string]events.DynamoDBAttributeValue{}
		}
		return events.NewMapAttribute(m), nil
	case *types.AttributeValueMemberL:
		l := make([]events.DynamoDBAttributeValue, len(v.Value))
		for i, e := range v.Value {
			c, err := convertValue(e)
			if err != nil {
				return events.DynamoDBAttributeValue{}, fmt.Errorf("element %d: %w", i, err)
			}
			l[i] = c
		}
		return events.NewListAttribute(l), nil
	default:
		return events.DynamoDBAttributeValue{}, fmt.Errorf("eventsource: unsupported attribute value %T", v)
	}
}
