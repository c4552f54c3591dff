package tools_test

import (
	"testing"

	"github.com/terret/terret-ws/internal/tools"
)

// TestFnmatchMatchesRuby is the policy glob table. Every row's want is what Ruby
// 3.1 answers for File.fnmatch(pattern, name, File::FNM_EXTGLOB): FNM_EXTGLOB on,
// FNM_PATHNAME / FNM_DOTMATCH / FNM_NOESCAPE / FNM_CASEFOLD off.
func TestFnmatchMatchesRuby(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"*", "echo", true},
		{"*", ".hidden", false},
		{".*", ".hidden", true},
		{"\\.*", ".hidden", true},
		{"*", "mcp/server/tool", true},
		{"mcp/*", "mcp/server/tool", true},
		{"mcp/*/tool", "mcp/server/tool", true},
		{"**", "mcp/a/b", true},
		{"**/tool", "mcp/a/tool", true},
		{"ech?", "echo", true},
		{"ech?", "ech", false},
		{"ech?", "echoo", false},
		{"?", "", false},
		{"*", "", true},
		{"", "", true},
		{"[a-z]cho", "echo", true},
		{"[a-z]cho", "Echo", false},
		{"[!e]cho", "echo", false},
		{"[!e]cho", "acho", true},
		{"[^e]cho", "acho", true},
		{"[e-]cho", "-cho", true},
		{"[]", "a", false},
		{"[]a]", "a", false},
		{"[!]", "a", true},
		{"[!]", "ab", false},
		{"[z-a]", "m", false},
		{"[z-a]", "z", true},
		{"[z-a]", "a", true},
		{"[ab", "a", false},
		{"[a\\]]", "]", true},
		{"[a\\]]x", "]x", true},
		{"\\*", "*", true},
		{"\\*", "a", false},
		{"e\\cho", "echo", true},
		{"echo\\", "echo", true},
		{"echo\\", "echo\\", false},
		{"{echo,sleep}", "sleep", true},
		{"{echo,sleep}", "clock", false},
		{"{echo,sleep}", "{echo,sleep}", false},
		{"\\{echo,sleep}", "{echo,sleep}", true},
		{"{a,}x", "x", true},
		{"{a,}x", "ax", true},
		{"{}x", "x", true},
		{"{a,{b,c}}d", "cd", true},
		{"{a,{b,c}}d", "ad", true},
		{"{a", "{a", false},
		{"a}", "a}", true},
		{"guarded_*", "guarded_echo", true},
		{"*_echo", "guarded_echo", true},
		{"*echo*", "guarded_echo_x", true},
		{"s*p", "sleep", true},
		{"s*p", "sp", true},
		{"s*p", "slee", false},
		{"*.*", "a.b", true},
		{"a*b*c", "abxbc", true},
		{"a*b*c", "abxbcx", false},
		{"[[]", "[", true},
		{"[\\\\]", "\\", true},
		{"[-a]", "-", true},
	}
	for _, c := range cases {
		if got := tools.Fnmatch(c.pattern, c.name); got != c.want {
			t.Errorf("Fnmatch(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
}

func TestPolicyAllows(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		policy tools.Policy
		tool   string
		want   bool
	}{
		{"no policy allows all", tools.Policy{}, "anything", true},
		{"empty policy allows none", tools.Policy{Set: true}, "echo", false},
		{"any pattern may match", tools.Policy{Set: true, Patterns: []string{"sleep", "ech?"}}, "echo", true},
		{"none matches", tools.Policy{Set: true, Patterns: []string{"sleep", "clock"}}, "echo", false},
		{"braces", tools.Policy{Set: true, Patterns: []string{"{echo,clock}"}}, "clock", true},
	}
	for _, c := range cases {
		if got := c.policy.Allows(c.tool); got != c.want {
			t.Errorf("%s: Allows(%q) = %v, want %v", c.name, c.tool, got, c.want)
		}
	}
}
