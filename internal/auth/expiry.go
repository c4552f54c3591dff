package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
)

// Token expiry. A token created with a ttl has, on its agent's token item, a top-level
// attribute exp_<hash> holding its expiry (unix seconds); a top-level attribute needs no
// enclosing map, so adding one is the same single write as adding the hash.
//
// Sweep finds expired tokens without scanning: CreateExpiring adds the agent to the
// bucket of the expiry's minute, item "tokexp#<unix minute>" (attribute agents, a string
// set), and adds that minute to the number set "pending" of the item "tokexp#next".
// Sweep reads that set, then the buckets of the minutes due, removes the expired hashes
// from each listed agent's token item — the same write shape as a rotation, so the
// deliver function's stream consumer closes a connection that presented one with
// unauthorized — and deletes the past buckets and their minutes from the set. A ttl is
// at most MaxTTL, which bounds the set (one number per minute with an expiry) well
// within DynamoDB's 400 KB item. Run every minute (template.yaml's schedule on deliver; `terret dev` runs it on
// a ticker), a live connection is dropped within about a minute of its token's expiry;
// a connect with an expired token is refused at once by Check.

const (
	sweepPrefix = "tokexp#"
	cursorKey   = sweepPrefix + "next"
	usedPrefix  = "tokuse#"
	expPrefix   = "exp_"
	// sweepBuckets bounds the buckets one Sweep reads, so a long-stalled sweep catches
	// up over several runs rather than in one long invocation.
	sweepBuckets = 1000
	// bucketRetention is how long a bucket outlives its minute should Sweep never delete
	// it (TTL on expires_at).
	bucketRetention = 7 * 24 * time.Hour
)

// MaxTTL is the longest token lifetime CreateExpiring accepts. Longer-lived access is a
// token without expiry, rotated by the operator.
const MaxTTL = 30 * 24 * time.Hour

// WithClock returns s reading the time from now (tests; the sweep of `terret dev`).
func (s *Store) WithClock(now func() time.Time) *Store {
	c := *s
	c.now = now
	return &c
}

// expiryAttr names the attribute that holds the expiry of the token with hash h.
func expiryAttr(h string) string { return expPrefix + h }

// ID is the short identifier `terret token list` shows for the token with hash h: the
// first 12 hex digits of SHA-256 of the hash, so neither the token nor its stored hash
// appears in any output.
func ID(hash string) string {
	sum := sha256.Sum256([]byte("terret-token-id:" + hash))
	return hex.EncodeToString(sum[:])[:12]
}

func unix(v types.AttributeValue) (time.Time, bool) {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(sec, 0).UTC(), true
}

func num(v int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func pkOf(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}
}

func bucketKey(minute int64) string { return sweepPrefix + strconv.FormatInt(minute, 10) }

// scheduleExpiry puts agentID in the bucket of expires' minute and that minute in the
// cursor's set of pending minutes.
func (s *Store) scheduleExpiry(ctx context.Context, agentID string, expires time.Time) error {
	minute := expires.Unix() / 60
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(s.table),
		Key:              pkOf(bucketKey(minute)),
		UpdateExpression: aws.String("ADD agents :a SET expires_at = :gc"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":a":  &types.AttributeValueMemberSS{Value: []string{agentID}},
			":gc": num(expires.Add(bucketRetention).Unix()),
		},
	})
	if err != nil {
		return fmt.Errorf("auth: schedule expiry of %s: %w", agentID, err)
	}
	_, err = s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       pkOf(cursorKey),
		UpdateExpression:          aws.String("ADD pending :m"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":m": &types.AttributeValueMemberNS{Value: []string{strconv.FormatInt(minute, 10)}}},
	})
	if err != nil {
		return fmt.Errorf("auth: schedule expiry of %s: pending minutes: %w", agentID, err)
	}
	return nil
}

// Sweep revokes every token that has expired by now, reading only the buckets of
// minutes that hold expiring tokens (see the top of this file). It returns how many
// tokens it revoked. With nothing due it costs one strongly consistent read of the
// cursor item; otherwise also one read per due bucket (batched), a read and a write per
// agent in them, one delete per past bucket and one cursor write.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	now := s.now()
	cur, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            pkOf(cursorKey),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return 0, fmt.Errorf("auth: sweep: read pending minutes: %w", err)
	}
	set, _ := cur.Item["pending"].(*types.AttributeValueMemberNS)
	if set == nil {
		return 0, nil
	}
	nowMinute := now.Unix() / 60
	var due []int64
	for _, v := range set.Value {
		if m, err := strconv.ParseInt(v, 10, 64); err == nil && m <= nowMinute {
			due = append(due, m)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i] < due[j] })
	if len(due) > sweepBuckets {
		due = due[:sweepBuckets] // the rest next time
	}
	revoked := 0
	var done []string
	for lo := 0; lo < len(due); lo += 100 {
		chunk := due[lo:min(lo+100, len(due))]
		keys := make([]map[string]types.AttributeValue, 0, len(chunk))
		for _, m := range chunk {
			keys = append(keys, pkOf(bucketKey(m)))
		}
		buckets, err := s.batchGet(ctx, keys)
		if err != nil {
			return revoked, err
		}
		agents := map[string]bool{}
		for _, b := range buckets {
			if ss, ok := b["agents"].(*types.AttributeValueMemberSS); ok {
				for _, a := range ss.Value {
					agents[a] = true
				}
			}
		}
		for _, a := range sortedKeys(agents) {
			n, err := s.expire(ctx, a, now)
			revoked += n
			if err != nil {
				return revoked, err
			}
		}
		// A past minute's tokens have all expired: its bucket is done. The current
		// minute's stays pending for the next sweep.
		for _, m := range chunk {
			if m >= nowMinute {
				continue
			}
			if _, err := s.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: pkOf(bucketKey(m))}); err != nil {
				return revoked, fmt.Errorf("auth: sweep: delete bucket %d: %w", m, err)
			}
			done = append(done, strconv.FormatInt(m, 10))
		}
	}
	if len(done) > 0 {
		_, err = s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.table),
			Key:                       pkOf(cursorKey),
			UpdateExpression:          aws.String("DELETE pending :done"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":done": &types.AttributeValueMemberNS{Value: done}},
		})
		if err != nil {
			return revoked, fmt.Errorf("auth: sweep: clear pending minutes: %w", err)
		}
	}
	return revoked, nil
}

func (s *Store) batchGet(ctx context.Context, keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	req := map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
	for attempt := 0; len(req) > 0 && len(req[s.table].Keys) > 0; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 50 * time.Millisecond) // unprocessed keys: back off
		}
		res, err := s.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return nil, fmt.Errorf("auth: sweep: read buckets: %w", err)
		}
		out = append(out, res.Responses[s.table]...)
		req = res.UnprocessedKeys
	}
	return out, nil
}

// expire removes agentID's tokens whose expiry is not after now, in one conditional
// write (the stream record then closes a connection that holds one). It returns how
// many it removed.
func (s *Store) expire(ctx context.Context, agentID string, now time.Time) (int, error) {
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key(agentID), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, fmt.Errorf("auth: sweep: read tokens of %s: %w", agentID, err)
	}
	hashes, _ := out.Item["hashes"].(*types.AttributeValueMemberM)
	var removes, conds []string
	names := map[string]string{}
	values := map[string]types.AttributeValue{}
	n := 0
	for attr, v := range out.Item {
		h, ok := strings.CutPrefix(attr, expPrefix)
		if !ok {
			continue
		}
		exp, ok := unix(v)
		if !ok || now.Before(exp) {
			continue
		}
		i := strconv.Itoa(len(names))
		names["#e"+i] = attr
		values[":e"+i] = v
		removes = append(removes, "#e"+i)
		conds = append(conds, "#e"+i+" = :e"+i)
		if hashes != nil && hashes.Value[h] != nil {
			names["#h"+i] = h
			removes = append(removes, "hashes.#h"+i)
			n++
		}
	}
	if len(removes) == 0 {
		return 0, nil
	}
	if hashes != nil && n == len(hashes.Value) {
		// Every token goes: drop the map itself, as Revoke does, rather than leave an
		// empty one (which the local stream reader cannot convert).
		var kept []string
		for _, r := range removes {
			if !strings.HasPrefix(r, "hashes.") {
				kept = append(kept, r)
			}
		}
		removes = append(kept, "hashes")
		for k := range names {
			if strings.HasPrefix(k, "#h") {
				delete(names, k)
			}
		}
	}
	_, err = s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       key(agentID),
		UpdateExpression:          aws.String("REMOVE " + strings.Join(removes, ", ")),
		ConditionExpression:       aws.String(strings.Join(conds, " AND ")),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	})
	if dynamoerr.CondFailed(err) {
		return 0, nil // rotated or revoked meanwhile; the next sweep looks again
	}
	if err != nil {
		return 0, fmt.Errorf("auth: sweep: expire tokens of %s: %w", agentID, err)
	}
	return n, nil
}

// Used records that the token with hash h of agentID opened a connection now, on the
// item "tokuse#<agent id>" (one write; kept off the token item so that it wakes no
// revocation consumer).
func (s *Store) Used(ctx context.Context, agentID, h string) error {
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       pkOf(usedPrefix + agentID),
		UpdateExpression:          aws.String("SET #h = :t"),
		ExpressionAttributeNames:  map[string]string{"#h": h},
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": num(s.now().Unix())},
	})
	if err != nil {
		return fmt.Errorf("auth: record use of a token of %s: %w", agentID, err)
	}
	return nil
}

// TokenInfo describes one current token; it holds neither the token nor its hash.
type TokenInfo struct {
	ID       string    // ID(hash)
	Created  time.Time // UTC
	Expires  time.Time // zero: never
	LastUsed time.Time // zero: never (or before last use was recorded)
}

// List returns agentID's current tokens, oldest first. Expired tokens the sweep has not
// removed yet are listed with their expiry.
func (s *Store) List(ctx context.Context, agentID string) ([]TokenInfo, error) {
	if !ValidAgentID(agentID) {
		return nil, fmt.Errorf("%w: %q", ErrBadAgentID, agentID)
	}
	tok, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key(agentID), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("auth: list tokens of %s: %w", agentID, err)
	}
	used, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: pkOf(usedPrefix + agentID), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, fmt.Errorf("auth: list tokens of %s: last use: %w", agentID, err)
	}
	hashes, _ := tok.Item["hashes"].(*types.AttributeValueMemberM)
	if hashes == nil {
		return nil, nil
	}
	out := make([]TokenInfo, 0, len(hashes.Value))
	for h, v := range hashes.Value {
		ti := TokenInfo{ID: ID(h)}
		ti.Created, _ = unix(v)
		ti.Expires, _ = unix(tok.Item[expiryAttr(h)])
		ti.LastUsed, _ = unix(used.Item[h])
		out = append(out, ti)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
