package sessionlog

import (
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// FromImage decodes a log item as a DynamoDB stream record carries it (NewImage): the
// stream's attribute values are turned into the SDK's, and FromItem, the one decoder of
// a log item, reads them. It returns ErrInvalid as FromItem does, and for an attribute
// of a type no log item has.
func FromImage(img map[string]events.DynamoDBAttributeValue) (Event, error) {
	item := make(map[string]types.AttributeValue, len(img))
	for name, v := range img {
		switch v.DataType() {
		case events.DataTypeString:
			item[name] = &types.AttributeValueMemberS{Value: v.String()}
		case events.DataTypeNumber:
			item[name] = &types.AttributeValueMemberN{Value: v.Number()}
		default:
			return Event{}, fmt.Errorf("%w: attribute %q is neither a string nor a number", ErrInvalid, name)
		}
	}
	return FromItem(item)
}
