package auth_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/dynamoerr"
	"github.com/terret/terret-ws/internal/dynamotest"
)

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

type fixture struct {
	st    *auth.Store
	db    *dynamodb.Client
	table string
	clk   *clock
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	names := dynamotest.CreateTables(t)
	db := dynamotest.Client(t)
	clk := &clock{t: time.Date(2026, 12, 1, 8, 0, 30, 0, time.UTC)}
	return fixture{st: auth.New(db, names["ConnectionsTable"]).WithClock(clk.now), db: db, table: names["ConnectionsTable"], clk: clk}
}

func (f fixture) checkOK(t *testing.T, agent, tok string, want bool) {
	t.Helper()
	_, err := f.st.Check(context.Background(), agent, tok)
	if want && err != nil || !want && !errors.Is(err, auth.ErrUnauthorized) {
		t.Fatalf("at %v Check(%s) = %v, want accepted %v", f.clk.now(), agent, err, want)
	}
}

// conditionHolds runs the claim transaction's token condition alone.
func (f fixture) conditionHolds(t *testing.T, agent, tok string) bool {
	t.Helper()
	_, err := f.db.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{f.st.Condition(agent, auth.Hash(tok))},
	})
	if dynamoerr.TxCanceled(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func (f fixture) hasHash(t *testing.T, agent, tok string) bool {
	t.Helper()
	out, err := f.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(f.table), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: auth.Key(agent)}}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := out.Item["hashes"].(*types.AttributeValueMemberM)
	return m != nil && m.Value[auth.Hash(tok)] != nil
}

// TestTokenExpiry: an expiring token is accepted until its expiry and refused from then
// on, by Check and by the claim's transaction condition; Sweep removes exactly the
// expired tokens from the token item (the write a rotation makes), leaves the others,
// and costs nothing more once done.
func TestTokenExpiry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	t0 := f.clk.now()
	short, err := f.st.CreateExpiring(ctx, "a1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	long, err := f.st.CreateExpiring(ctx, "a1", 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	forever, err := f.st.Create(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := f.st.CreateExpiring(ctx, "a2", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []time.Duration{-time.Second, auth.MaxTTL + time.Second} {
		if _, err := f.st.CreateExpiring(ctx, "a1", bad); !errors.Is(err, auth.ErrBadTTL) {
			t.Fatalf("ttl %v: %v, want ErrBadTTL", bad, err)
		}
	}

	f.clk.set(t0.Add(time.Hour - time.Second))
	f.checkOK(t, "a1", short, true)
	if !f.conditionHolds(t, "a1", short) {
		t.Fatal("claim condition fails before the expiry")
	}
	if n, err := f.st.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("sweep before any expiry = %d, %v; want 0", n, err)
	}

	f.clk.set(t0.Add(time.Hour))
	f.checkOK(t, "a1", short, false) // expired: refused like a revoked token, before any sweep
	if f.conditionHolds(t, "a1", short) {
		t.Fatal("claim condition holds for an expired token")
	}
	f.checkOK(t, "a1", long, true)
	n, err := f.st.Sweep(ctx)
	if err != nil || n != 1 {
		t.Fatalf("sweep at the expiry = %d, %v; want 1", n, err)
	}
	if f.hasHash(t, "a1", short) || !f.hasHash(t, "a1", long) || !f.hasHash(t, "a1", forever) || !f.hasHash(t, "a2", other) {
		t.Fatal("sweep removed the wrong hashes")
	}
	if n, err := f.st.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("second sweep = %d, %v; want 0", n, err)
	}

	// A stalled sweep catches up: both remaining expiring tokens go.
	f.clk.set(t0.Add(49 * time.Hour))
	total := 0
	for i := 0; i < 3; i++ {
		n, err := f.st.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != 2 || f.hasHash(t, "a1", long) || f.hasHash(t, "a2", other) || !f.hasHash(t, "a1", forever) {
		t.Fatalf("catch-up sweeps revoked %d, want 2 and the never-expiring token kept", total)
	}
	f.checkOK(t, "a1", forever, true)
}

// TestTokenList: List shows every current token with its creation, expiry and last use,
// oldest first, and neither the token nor its hash.
func TestTokenList(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	t0 := f.clk.now()
	a, err := f.st.CreateExpiring(ctx, "a1", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f.clk.set(t0.Add(time.Minute))
	b, err := f.st.Create(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	f.clk.set(t0.Add(2 * time.Minute))
	if err := f.st.Used(ctx, "a1", auth.Hash(b)); err != nil {
		t.Fatal(err)
	}
	list, err := f.st.List(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	want := []auth.TokenInfo{
		{ID: auth.ID(auth.Hash(a)), Created: t0.Truncate(time.Second), Expires: t0.Add(24 * time.Hour).Truncate(time.Second)},
		{ID: auth.ID(auth.Hash(b)), Created: t0.Add(time.Minute).Truncate(time.Second), LastUsed: t0.Add(2 * time.Minute).Truncate(time.Second)},
	}
	if len(list) != len(want) {
		t.Fatalf("List = %+v, want %+v", list, want)
	}
	for i := range want {
		g, w := list[i], want[i]
		if g.ID != w.ID || !g.Created.Equal(w.Created) || !g.Expires.Equal(w.Expires) || !g.LastUsed.Equal(w.LastUsed) {
			t.Errorf("List[%d] = %+v, want %+v", i, g, w)
		}
		for _, secret := range []string{a, b, auth.Hash(a), auth.Hash(b)} {
			if strings.Contains(g.ID, secret) || strings.Contains(secret, g.ID) {
				t.Errorf("List[%d] id %s is part of a token or hash", i, g.ID)
			}
		}
	}
	if empty, err := f.st.List(ctx, "nobody"); err != nil || len(empty) != 0 {
		t.Fatalf("List(nobody) = %v, %v", empty, err)
	}
	if _, err := f.st.List(ctx, "bad id"); !errors.Is(err, auth.ErrBadAgentID) {
		t.Fatalf("List(bad id) = %v, want ErrBadAgentID", err)
	}
}
