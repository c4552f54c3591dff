// Package auth issues, checks and revokes the bearer tokens that open an agent's
// socket. Tokens are scoped to one agent id and stored only as SHA-256 hashes, in one
// item per agent (pk "tokens#<agent_id>") of the connections table, so that rotation is
// one write and its stream record tells the deliver function which hashes were dropped.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/dynamoerr"
)

// Errors returned by this package.
var (
	ErrUnauthorized = errors.New("auth: unauthorized")
	ErrBadAgentID   = errors.New("auth: invalid agent id")
	ErrBadTTL       = errors.New("auth: invalid token ttl")
)

// TokenPrefix starts every token, so that a leaked one is easy to recognise.
const TokenPrefix = "tt_"

// ValidAgentID reports whether id may name an agent: 1–128 of [A-Za-z0-9._-]. A loop
// over the bytes rather than a regexp: `{1,128}` compiles to a program of 128 copies,
// built at every function's cold start.
func ValidAgentID(id string) bool {
	if len(id) < 1 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Key is the pk of an agent's token item.
func Key(agentID string) string { return "tokens#" + agentID }

// AgentFromKey returns the agent id of a token item's pk, or "" if pk is not one.
func AgentFromKey(pk string) string {
	if id, ok := strings.CutPrefix(pk, "tokens#"); ok {
		return id
	}
	return ""
}

// Hash is the stored form of a token: hex SHA-256.
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// BearerToken extracts the token of an Authorization header value ("Bearer <token>",
// scheme case-insensitive). It returns "" when there is none.
func BearerToken(header string) string {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// Subprotocol is the WebSocket subprotocol of the Terret Socket Protocol v1. A browser,
// which cannot set an Authorization header, offers it together with the token as
// "terret.bearer.<token>"; the server answers with Subprotocol alone, never echoing the
// token.
const (
	Subprotocol       = "terret.v1"
	SubprotocolBearer = "terret.bearer."
)

// SubprotocolToken finds the token in a Sec-WebSocket-Protocol header value (a comma
// separated list). found is false when no "terret.bearer." entry is offered.
func SubprotocolToken(header string) (token string, found bool) {
	for _, p := range strings.Split(header, ",") {
		if tok, ok := strings.CutPrefix(strings.TrimSpace(p), SubprotocolBearer); ok {
			return tok, true
		}
	}
	return "", false
}

// OffersSubprotocol reports whether a Sec-WebSocket-Protocol header value offers
// Subprotocol.
func OffersSubprotocol(header string) bool {
	for _, p := range strings.Split(header, ",") {
		if strings.TrimSpace(p) == Subprotocol {
			return true
		}
	}
	return false
}

// API is the part of the DynamoDB client the token store uses.
type API interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Store keeps token hashes in the connections table.
type Store struct {
	api   API
	table string
	now   func() time.Time
}

// New returns a Store over the connections table.
func New(api API, table string) *Store { return &Store{api: api, table: table, now: time.Now} }

func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// Create issues one more token for agentID, which never expires; earlier tokens stay
// valid. It returns ErrBadAgentID for an id ValidAgentID refuses.
func (s *Store) Create(ctx context.Context, agentID string) (string, error) {
	return s.CreateExpiring(ctx, agentID, 0)
}

// CreateExpiring is Create for a token that expires ttl from now (0: never). An expired
// token is refused like a revoked one, and Sweep revokes it so that a connection holding
// it is closed. Besides the token item it writes the expiry's sweep bucket and cursor
// (see Sweep): three writes instead of one.
func (s *Store) CreateExpiring(ctx context.Context, agentID string, ttl time.Duration) (string, error) {
	return s.CreateRole(ctx, agentID, ttl, RoleDriver)
}

// Roles a token may have (docs/security.md, "Roles").
const (
	RoleDriver   = "driver"   // reads the log and sends every frame: the default
	RoleObserver = "observer" // reads the log and nothing else
)

// ErrBadRole: a role other than RoleDriver or RoleObserver.
var ErrBadRole = errors.New("auth: invalid token role")

// roleAttr is the attribute of the token item holding the role of the token with hash
// h; absent for a driver token (every token made before roles is one).
func roleAttr(h string) string { return "role#" + h }

// CreateRole is CreateExpiring for a token of role: RoleDriver (the default, "" too)
// or RoleObserver, stored beside the token's hash in the same write.
func (s *Store) CreateRole(ctx context.Context, agentID string, ttl time.Duration, role string) (string, error) {
	if role == "" {
		role = RoleDriver
	}
	if role != RoleDriver && role != RoleObserver {
		return "", fmt.Errorf("%w: %q (driver or observer)", ErrBadRole, role)
	}
	if !ValidAgentID(agentID) {
		return "", fmt.Errorf("%w: %q", ErrBadAgentID, agentID)
	}
	if ttl < 0 || ttl > MaxTTL {
		return "", fmt.Errorf("%w: %v is not within 0..%v", ErrBadTTL, ttl, MaxTTL)
	}
	tok := newToken()
	h := Hash(tok)
	at := s.now()
	now := &types.AttributeValueMemberN{Value: strconv.FormatInt(at.Unix(), 10)}
	names := map[string]string{"#h": h}
	values := map[string]types.AttributeValue{":t": now}
	setExpiry := ""
	if ttl > 0 {
		expires := at.Add(ttl)
		// The bucket first: a token must never exist unseen by the sweep.
		if err := s.scheduleExpiry(ctx, agentID, expires); err != nil {
			return "", err
		}
		names["#e"] = expiryAttr(h)
		values[":e"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(expires.Unix(), 10)}
		setExpiry = ", #e = :e"
	}
	if role == RoleObserver {
		names["#r"] = roleAttr(h)
		values[":r"] = &types.AttributeValueMemberS{Value: role}
		setExpiry += ", #r = :r"
	}
	// Adding a key to a map needs the map to exist; creating the map must not wipe one
	// that a concurrent Create made. Two conditional writes cover both cases.
	for {
		_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.table),
			Key:                       key(agentID),
			UpdateExpression:          aws.String("SET hashes.#h = :t" + setExpiry),
			ConditionExpression:       aws.String("attribute_exists(hashes)"),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
		})
		if err == nil {
			return tok, nil
		}
		if !dynamoerr.CondFailed(err) {
			return "", fmt.Errorf("auth: create token for %s: %w", agentID, err)
		}
		mvalues := map[string]types.AttributeValue{
			":m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{h: now}},
		}
		mnames := map[string]string(nil)
		if ttl > 0 {
			mvalues[":e"], mnames = values[":e"], map[string]string{"#e": names["#e"]}
		}
		if role == RoleObserver {
			if mnames == nil {
				mnames = map[string]string{}
			}
			mvalues[":r"], mnames["#r"] = values[":r"], names["#r"]
		}
		_, err = s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(s.table),
			Key:                       key(agentID),
			UpdateExpression:          aws.String("SET hashes = :m" + setExpiry),
			ConditionExpression:       aws.String("attribute_not_exists(hashes)"),
			ExpressionAttributeNames:  mnames,
			ExpressionAttributeValues: mvalues,
		})
		if err == nil {
			return tok, nil
		}
		if !dynamoerr.CondFailed(err) {
			return "", fmt.Errorf("auth: create token for %s: %w", agentID, err)
		}
	}
}

// Rotate replaces every token of agentID with one new token and returns it. Live
// connections that presented a dropped token are closed by the deliver function, which
// sees the change on the table's stream.
func (s *Store) Rotate(ctx context.Context, agentID string) (string, error) {
	if !ValidAgentID(agentID) {
		return "", fmt.Errorf("%w: %q", ErrBadAgentID, agentID)
	}
	tok := newToken()
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(s.table),
		Key:              key(agentID),
		UpdateExpression: aws.String("SET hashes = :m"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				Hash(tok): &types.AttributeValueMemberN{Value: strconv.FormatInt(s.now().Unix(), 10)},
			}},
		},
	})
	if err != nil {
		return "", fmt.Errorf("auth: rotate tokens of %s: %w", agentID, err)
	}
	return tok, nil
}

// Revoke drops every token of agentID without issuing a new one.
func (s *Store) Revoke(ctx context.Context, agentID string) error {
	if !ValidAgentID(agentID) {
		return fmt.Errorf("%w: %q", ErrBadAgentID, agentID)
	}
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(s.table),
		Key:              key(agentID),
		UpdateExpression: aws.String("SET revoked_at = :t REMOVE hashes"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":t": &types.AttributeValueMemberN{Value: strconv.FormatInt(s.now().Unix(), 10)},
		},
	})
	if err != nil {
		return fmt.Errorf("auth: revoke tokens of %s: %w", agentID, err)
	}
	return nil
}

// Check returns the hash of token if it is a current token of agentID, read strongly
// consistent; otherwise ErrUnauthorized (also for an empty token or a bad agent id).
func (s *Store) Check(ctx context.Context, agentID, token string) (string, error) {
	h, _, err := s.CheckRole(ctx, agentID, token)
	return h, err
}

// CheckRole is Check that also returns the token's role (RoleDriver or RoleObserver),
// read in the same request.
func (s *Store) CheckRole(ctx context.Context, agentID, token string) (hash, role string, err error) {
	if token == "" || !ValidAgentID(agentID) {
		return "", "", ErrUnauthorized
	}
	h := Hash(token)
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                aws.String(s.table),
		Key:                      key(agentID),
		ProjectionExpression:     aws.String("hashes.#h, #e, #r"),
		ExpressionAttributeNames: map[string]string{"#h": h, "#e": expiryAttr(h), "#r": roleAttr(h)},
		ConsistentRead:           aws.Bool(true),
	})
	if err != nil {
		return "", "", fmt.Errorf("auth: check token of %s: %w", agentID, err)
	}
	if m, ok := out.Item["hashes"].(*types.AttributeValueMemberM); !ok || m.Value[h] == nil {
		return "", "", ErrUnauthorized
	}
	if exp, ok := unix(out.Item[expiryAttr(h)]); ok && !s.now().Before(exp) {
		return "", "", ErrUnauthorized // expired: refused like a revoked token
	}
	role = RoleDriver
	if r, ok := out.Item[roleAttr(h)].(*types.AttributeValueMemberS); ok && r.Value == RoleObserver {
		role = RoleObserver
	}
	return h, role, nil
}

// Condition is a transaction item that holds only while hash is a current, unexpired
// token of agentID, so a write in the same transaction cannot outlive a concurrent
// rotation or the token's expiry.
func (s *Store) Condition(agentID, hash string) types.TransactWriteItem {
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                 aws.String(s.table),
		Key:                       key(agentID),
		ConditionExpression:       aws.String("attribute_exists(hashes.#h) AND (attribute_not_exists(#e) OR #e > :now)"),
		ExpressionAttributeNames:  map[string]string{"#h": hash, "#e": expiryAttr(hash)},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(s.now().Unix(), 10)}},
	}}
}

// Dropped returns the hashes present in before and absent from after: the tokens a
// rotation or revocation invalidated. before and after are the "hashes" map keys.
func Dropped(before, after []string) []string {
	keep := map[string]bool{}
	for _, h := range after {
		keep[h] = true
	}
	var out []string
	for _, h := range before {
		if !keep[h] {
			out = append(out, h)
		}
	}
	return out
}

func key(agentID string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: Key(agentID)}}
}
