package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/dynamotest"
)

// TestTokenListAndTTL: `token create --ttl` issues an expiring token and `token list`
// shows id, created, expires and last used for each token, never a token or its hash;
// a bad --ttl is a usage error naming the flag.
func TestTokenListAndTTL(t *testing.T) {
	t.Parallel()
	names := dynamotest.CreateTables(t)
	ctx := context.Background()
	store := []string{"--dynamodb-endpoint", dynamotest.Endpoint(t), "--connections-table", names["ConnectionsTable"]}
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := runToken(ctx, append(args, store...), &out, &errOut)
		return out.String(), err
	}
	expiring, err := run("create", "--agent", "a1", "--ttl", "24h")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := run("create", "--agent", "a1")
	if err != nil {
		t.Fatal(err)
	}
	expiring, plain = strings.TrimSpace(expiring), strings.TrimSpace(plain)
	out, err := run("list", "--agent", "a1")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "ID CREATED EXPIRES LAST USED" {
		t.Fatalf("token list =\n%s\nwant a header and two tokens", out)
	}
	var sawExpiry, sawNever bool
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 4 || f[3] != "never" {
			t.Fatalf("row %q: want id, created, expires, last used (never)", l)
		}
		switch f[0] {
		case auth.ID(auth.Hash(expiring)):
			sawExpiry = f[2] != "never"
		case auth.ID(auth.Hash(plain)):
			sawNever = f[2] == "never"
		}
	}
	if !sawExpiry || !sawNever {
		t.Fatalf("token list =\n%s\nwant the 24h token with an expiry and the other without", out)
	}
	for _, secret := range []string{expiring, plain, auth.Hash(expiring), auth.Hash(plain)} {
		if strings.Contains(out, secret) {
			t.Fatalf("token list prints a token or hash:\n%s", out)
		}
	}
	for _, bad := range []string{"-1h", "800h", "soon"} {
		if _, err := run("create", "--agent", "a1", "--ttl", bad); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "ttl") {
			t.Errorf("--ttl %s: %v, want a usage error naming --ttl", bad, err)
		}
	}
}
