package sessionlog_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/sessionlog"
)

// TestFromImage: a log item read from a stream record decodes exactly as the same item
// read from the table (FromItem), stamp and expiry included, and a missing or mistyped
// attribute is ErrInvalid in both.
func TestFromImage(t *testing.T) {
	full := sessionlog.Event{SessionID: "a1", Seq: 7, ID: "e7", At: "2026-01-01T00:00:00.000000Z",
		Type: "user/message", Payload: json.RawMessage(`{"text":"hi"}`), Stamp: "k1", Expires: 1767225600}
	plain := full
	plain.Stamp, plain.Expires = "", 0
	without := func(ev sessionlog.Event, name string) map[string]types.AttributeValue {
		item := ev.Item()
		delete(item, name)
		return item
	}
	with := func(ev sessionlog.Event, name string, v types.AttributeValue) map[string]types.AttributeValue {
		item := ev.Item()
		item[name] = v
		return item
	}
	tests := []struct {
		name    string
		item    map[string]types.AttributeValue
		invalid bool
	}{
		{"every attribute", full.Item(), false},
		{"no stamp, no expiry", plain.Item(), false},
		{"no payload", without(plain, "payload"), true},
		{"no payload, an expiry", without(full, "payload"), true},
		{"no seq", without(plain, "seq"), true},
		{"seq a string", with(plain, "seq", &types.AttributeValueMemberS{Value: "7"}), true},
		{"type a number", with(plain, "type", &types.AttributeValueMemberN{Value: "1"}), true},
		{"expiry not a number", with(plain, sessionlog.ExpiresAttr, &types.AttributeValueMemberN{Value: "soon"}), true},
	}
	for _, tc := range tests {
		fromItem, itemErr := sessionlog.FromItem(tc.item)
		fromImage, imageErr := sessionlog.FromImage(image(t, tc.item))
		if errors.Is(itemErr, sessionlog.ErrInvalid) != tc.invalid || errors.Is(imageErr, sessionlog.ErrInvalid) != tc.invalid {
			t.Errorf("%s: FromItem error %v, FromImage error %v; want invalid %v", tc.name, itemErr, imageErr, tc.invalid)
			continue
		}
		if !reflect.DeepEqual(fromItem, fromImage) {
			t.Errorf("%s: FromImage = %+v, FromItem = %+v", tc.name, fromImage, fromItem)
		}
	}
	if ev, err := sessionlog.FromItem(full.Item()); err != nil || !reflect.DeepEqual(ev, full) {
		t.Errorf("FromItem(Item()) = %+v, %v; want %+v", ev, err, full)
	}
	img := image(t, plain.Item())
	img["extra"] = events.NewBooleanAttribute(true)
	if _, err := sessionlog.FromImage(img); !errors.Is(err, sessionlog.ErrInvalid) {
		t.Errorf("FromImage with a boolean attribute = %v, want ErrInvalid", err)
	}
}

// image is item as a stream record's NewImage carries it.
func image(t *testing.T, item map[string]types.AttributeValue) map[string]events.DynamoDBAttributeValue {
	t.Helper()
	img := make(map[string]events.DynamoDBAttributeValue, len(item))
	for name, v := range item {
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			img[name] = events.NewStringAttribute(v.Value)
		case *types.AttributeValueMemberN:
			img[name] = events.NewNumberAttribute(v.Value)
		default:
			t.Fatalf("attribute %q: %T", name, v)
		}
	}
	return img
}
