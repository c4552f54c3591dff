package config

import (
	"os"
	"testing"
)

func TestLookupKey(t *testing.T) {
	t.Chdir(t.TempDir())
	env := "# keys\nexport A_KEY=from-dotenv\nB_KEY = 'quoted value'\nC_KEY=\"dq\"\nBROKEN LINE\n"
	if err := os.WriteFile(".env", []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("C_KEY", "from-env")
	for _, c := range []struct {
		name   string
		dotenv bool
		want   string
		ok     bool
	}{
		{"A_KEY", true, "from-dotenv", true},
		{"B_KEY", true, "quoted value", true},
		{"C_KEY", true, "from-env", true}, // the environment wins
		{"A_KEY", false, "", false},       // in Lambda .env is not read
		{"D_KEY", true, "", false},
	} {
		got, ok := LookupKey(c.name, c.dotenv)
		if got != c.want || ok != c.ok {
			t.Errorf("LookupKey(%s, %t) = %q, %t; want %q, %t", c.name, c.dotenv, got, ok, c.want, c.ok)
		}
	}
}
