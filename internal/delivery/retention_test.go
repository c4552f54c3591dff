package delivery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/delivery"
)

// TestRetentionTruncates: a subscribe below the oldest retained event is pulled
// forward to it with replay_truncated, exactly as the replay cap pulls one forward,
// and the retained events follow in order. DynamoDB Local does not expire items, so
// the test does what TTL does: of the expired events 1–6, it deletes 1–3 and leaves
// 4–6 present, which every reader must treat as gone; 7 expires tomorrow and is
// retained, as are the events without a TTL. Seq 0 never expires, yet a subscribe
// from 0 is pulled forward too: the retained log has no gap.
func TestRetentionTruncates(t *testing.T) {
	t.Parallel()
	r := startRig(t, rigConfig{cfg: delivery.Config{ReplayLimit: 100, OutboundQueue: 64}})
	ctx := context.Background()
	const agent = "a"
	c := r.dial(t, agent, r.token(t, agent))
	c.hello(t)
	r.appendN(t, r.log, agent, 10, "e") // seqs 1–10
	past, future := time.Now().Add(-time.Hour).Unix(), time.Now().Add(24*time.Hour).Unix()
	for seq := int64(1); seq <= 7; seq++ {
		at := past
		if seq == 7 {
			at = future
		}
		if err := r.log.Expire(ctx, agent, seq, at); err != nil {
			t.Fatal(err)
		}
	}
	for seq := 1; seq <= 3; seq++ { // what TTL has deleted so far
		if _, err := r.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(r.names["LogTable"]),
			Key: map[string]types.AttributeValue{
				"session_id": &types.AttributeValueMemberS{Value: agent},
				"seq":        &types.AttributeValueMemberN{Value: strconv.Itoa(seq)},
			},
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		from      int64
		truncated bool // replay_truncated{requested from, from_seq 7} first
		first     int64
	}{
		{from: 0, truncated: true, first: 7},
		{from: 2, truncated: true, first: 7},  // deleted
		{from: 5, truncated: true, first: 7},  // expired, still present
		{from: 7, truncated: false, first: 7}, // the oldest retained
		{from: 9, truncated: false, first: 9},
	} {
		c.send(t, fmt.Sprintf(`{"type":"subscribe","from_seq":%d}`, tc.from))
		if tc.truncated {
			f, err := c.next(patience)
			var rt struct {
				Requested int64 `json:"requested_from_seq"`
			}
			if err == nil {
				err = json.Unmarshal([]byte(f.raw), &rt)
			}
			if err != nil || f.Type != "replay_truncated" || f.From != tc.first || rt.Requested != tc.from {
				t.Fatalf("subscribe from %d: frame %s (%v), want replay_truncated{requested_from_seq %d, from_seq %d}", tc.from, f.raw, err, tc.from, tc.first)
			}
		}
		for want := tc.first; want <= 10; want++ {
			f, err := c.next(patience)
			if err != nil || f.Seq == nil || *f.Seq != want {
				t.Fatalf("subscribe from %d: frame %s (%v), want seq %d", tc.from, f.raw, err, want)
			}
		}
	}
	// Retained itself, by the sessionlog's contract: from past the tip stays.
	for from, want := range map[int64]int64{0: 7, 4: 7, 8: 8, 11: 11} {
		if got, err := r.log.Retained(ctx, agent, from); err != nil || got != want {
			t.Errorf("Retained(%d) = %d, %v; want %d", from, got, err, want)
		}
	}
}
