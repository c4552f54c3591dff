package auth_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/dynamotest"
)

func newStore(t *testing.T) *auth.Store {
	t.Helper()
	names := dynamotest.CreateTables(t)
	return auth.New(dynamotest.Client(t), names["ConnectionsTable"])
}

func TestTokensLifecycle(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := context.Background()
	a, err := st.Create(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a, auth.TokenPrefix) || len(a) < 40 {
		t.Fatalf("token %q is not a prefixed 256-bit token", a)
	}
	b, err := st.Create(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := st.Create(ctx, "a2")
	if err != nil {
		t.Fatal(err)
	}
	check := func(agent, tok string, want error) {
		t.Helper()
		h, err := st.Check(ctx, agent, tok)
		if !errors.Is(err, want) {
			t.Fatalf("Check(%s, %.8s…) = %v, want %v", agent, tok, err, want)
		}
		if want == nil && h != auth.Hash(tok) {
			t.Fatalf("Check returned hash %s, want %s", h, auth.Hash(tok))
		}
	}
	check("a1", a, nil)
	check("a1", b, nil) // create adds, it does not replace
	check("a2", other, nil)
	check("a1", other, auth.ErrUnauthorized) // scoped per agent
	check("a1", "", auth.ErrUnauthorized)
	check("a1", "garbage", auth.ErrUnauthorized)
	check("nobody", a, auth.ErrUnauthorized)
	check("bad id!", a, auth.ErrUnauthorized)

	c, err := st.Rotate(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	check("a1", a, auth.ErrUnauthorized)
	check("a1", b, auth.ErrUnauthorized)
	check("a1", c, nil)
	check("a2", other, nil) // rotation is per agent

	if err := st.Revoke(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	check("a1", c, auth.ErrUnauthorized)
	d, err := st.Create(ctx, "a1") // a revoked agent can be given a token again
	if err != nil {
		t.Fatal(err)
	}
	check("a1", d, nil)
}

func TestCreateConcurrentKeepsEveryToken(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	var wg sync.WaitGroup
	toks := make([]string, 8)
	for i := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, err := st.Create(context.Background(), "race")
			if err != nil {
				t.Error(err)
			}
			toks[i] = tok
		}()
	}
	wg.Wait()
	for _, tok := range toks {
		if _, err := st.Check(context.Background(), "race", tok); err != nil {
			t.Fatalf("a token created concurrently was lost: %v", err)
		}
	}
}

func TestBadAgentID(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	for _, id := range []string{"", "a/b", "a b", strings.Repeat("x", 129), "ü"} {
		if _, err := st.Create(context.Background(), id); !errors.Is(err, auth.ErrBadAgentID) {
			t.Errorf("Create(%q) = %v, want ErrBadAgentID", id, err)
		}
	}
	for _, id := range []string{"a", "agent-1", "A.b_c", strings.Repeat("x", 128)} {
		if !auth.ValidAgentID(id) {
			t.Errorf("ValidAgentID(%q) = false", id)
		}
	}
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"Bearer tt_abc":   "tt_abc",
		"bearer  tt_abc ": "tt_abc",
		"Basic dXNlcg==":  "",
		"tt_abc":          "",
		"":                "",
		"Bearer":          "",
	}
	for in, want := range tests {
		if got := auth.BearerToken(in); got != want {
			t.Errorf("BearerToken(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDropped(t *testing.T) {
	t.Parallel()
	got := auth.Dropped([]string{"a", "b", "c"}, []string{"b", "d"})
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("Dropped = %v, want [a c]", got)
	}
	if got := auth.Dropped(nil, []string{"x"}); len(got) != 0 {
		t.Fatalf("Dropped(nil, …) = %v", got)
	}
}

func TestSubprotocolToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header, want string
		found        bool
	}{
		{"terret.v1, terret.bearer.tt_abc", "tt_abc", true},
		{"terret.bearer.tt_x-y_z", "tt_x-y_z", true},
		{"terret.v1", "", false},
		{"", "", false},
		{"chat, superchat", "", false},
	}
	for _, tc := range tests {
		got, found := auth.SubprotocolToken(tc.header)
		if got != tc.want || found != tc.found {
			t.Errorf("SubprotocolToken(%q) = %q, %v; want %q, %v", tc.header, got, found, tc.want, tc.found)
		}
	}
}
