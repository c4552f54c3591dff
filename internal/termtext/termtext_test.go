package termtext_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/terret/terret-ws/internal/termtext"
)

func TestEscape(t *testing.T) {
	tests := []struct {
		name, in, line, text string
	}{
		{"plain", "hello, wörld ✓", "hello, wörld ✓", "hello, wörld ✓"},
		{"empty", "", "", ""},
		{"ESC alone", "a\x1bb", `a\u001bb`, `a\u001bb`},
		{"CSI erase line", "ok\x1b[2K\x1b[1Gforged", `ok\u001b[2K\u001b[1Gforged`, `ok\u001b[2K\u001b[1Gforged`},
		{"OSC 0 window title, BEL", "\x1b]0;pwned\x07", `\u001b]0;pwned\u0007`, `\u001b]0;pwned\u0007`},
		{"OSC 52 clipboard write, ST", "\x1b]52;c;Y3VybCBldmlsfHNo\x1b\\", `\u001b]52;c;Y3VybCBldmlsfHNo\u001b\`, `\u001b]52;c;Y3VybCBldmlsfHNo\u001b\`},
		{"BEL", "ding\a", `ding\u0007`, `ding\u0007`},
		{"carriage return", "safe\rEVIL", `safe\u000dEVIL`, `safe\u000dEVIL`},
		{"backspace", "rm\b\b", `rm\u0008\u0008`, `rm\u0008\u0008`},
		{"DEL", "a\x7fb", `a\u007fb`, `a\u007fb`},
		{"C1 CSI U+009B", "a\u009b2Kb", `a\u009b2Kb`, `a\u009b2Kb`},
		{"C1 OSC U+009D and ST U+009C", "\u009d52;c;eA==\u009c", `\u009d52;c;eA==\u009c`, `\u009d52;c;eA==\u009c`},
		{"C1 NEL U+0085", "a\u0085b", `a\u0085b`, `a\u0085b`},
		{"raw C1 byte, not UTF-8", "a\x9b2Kb", `a\x9b2Kb`, `a\x9b2Kb`},
		{"right-to-left override", "file\u202Etxt.exe", `file\u202etxt.exe`, `file\u202etxt.exe`},
		{"newline and tab", "one\ntwo\tthree", `one\u000atwo\u0009three`, "one\ntwo\tthree"},
		{"NUL", "a\x00b", `a\u0000b`, `a\u0000b`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := termtext.Line(tt.in); got != tt.line {
				t.Errorf("Line(%q) = %q, want %q", tt.in, got, tt.line)
			}
			if got := termtext.Text(tt.in); got != tt.text {
				t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.text)
			}
			if got, want := termtext.Safe(tt.in), tt.line == tt.in; got != want {
				t.Errorf("Safe(%q) = %v, want %v", tt.in, got, want)
			}
			for _, out := range []string{termtext.Line(tt.in), termtext.Text(tt.in)} {
				for _, c := range []byte(out) {
					if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
						t.Errorf("output %q holds control byte %#x", out, c)
					}
				}
			}
		})
	}
}

// TestWriterKeepsJSON: a JSON line with DEL and C1 controls raw in its strings (what
// encoding/json and slog leave unescaped) prints escaped and still decodes to the same
// value.
func TestWriterKeepsJSON(t *testing.T) {
	in := map[string]string{"msg": "frame", "text": "a\u009b2K\x7f\u202eb"}
	line, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := termtext.Writer(&out).Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
	if !termtext.Safe(string(bytes.TrimSuffix(out.Bytes(), []byte("\n")))) {
		t.Fatalf("written line holds controls: %q", out.String())
	}
	var back map[string]string
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back["text"] != in["text"] {
		t.Fatalf("decoded %q, %v; want %q", back, err, in)
	}
}
