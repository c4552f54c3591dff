package mcptool

import (
	"strings"
	"testing"
)

// TestNamedLines: every complete line gets the prefix once, whatever the writes' cuts;
// an unfinished line waits for its end.
func TestNamedLines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"one line", []string{"started\n"}, "mcp orders: started\n"},
		{"two in one write", []string{"a\nb\n"}, "mcp orders: a\nmcp orders: b\n"},
		{"cut mid-line", []string{"looku", "p 1042\nnext"}, "mcp orders: lookup 1042\n"},
		{"empty line", []string{"\n"}, "mcp orders: \n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			w := &namedLines{w: &out, prefix: "mcp orders: "}
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", s, n, err)
				}
			}
			if out.String() != tc.want {
				t.Fatalf("wrote %q, want %q", out.String(), tc.want)
			}
		})
	}
}
