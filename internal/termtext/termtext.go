// Package termtext makes text from others safe to print on a terminal. A terminal acts on
// control characters in what it prints: ESC starts a sequence that can set the window
// title, erase or rewrite lines, move the cursor, or write the clipboard (OSC 52); BEL
// rings; a carriage return overwrites the line; C1 controls (U+0080–U+009F, such as CSI
// U+009B and OSC U+009D) act like ESC sequences on terminals that honour them; and
// bidirectional overrides reorder what is shown. Everything `terret dev` and the CLI
// print that came from a client, a web page, the model or a tool goes through Line or
// Text first.
//
// Each such character becomes the visible six characters \u00XX (\u202e for an
// override): JSON's own escape, so a JSON line stays valid JSON. A byte that is not
// UTF-8 becomes \xNN.
package termtext

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Line escapes every control character of s, newline and tab included: s prints as one
// line.
func Line(s string) string { return escape(s, false) }

// Text escapes every control character of s but newline and tab: s may span lines, but
// no line of it can act on the terminal.
func Text(s string) string { return escape(s, true) }

// Safe reports whether s prints as is on a line (Line(s) == s).
func Safe(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || control(r) {
			return false
		}
	}
	return true
}

func escape(s string, keepLines bool) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 || control(r) && !(keepLines && (r == '\n' || r == '\t')) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case control(r) && !(keepLines && (r == '\n' || r == '\t')):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// control reports whether a terminal may act on r instead of showing it: C0 controls
// and DEL, C1 controls, and the bidirectional marks, embeddings, overrides and isolates.
func control(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// Writer returns a writer that passes each Write of whole lines through Text; the
// console's JSON log lines and similar whole-record writers use it.
func Writer(w io.Writer) *TextWriter { return &TextWriter{w: w} }

// TextWriter is Writer's writer.
type TextWriter struct {
	w io.Writer
}

// Write writes Text(b) and reports len(b) written when all of it was.
func (t *TextWriter) Write(b []byte) (int, error) {
	s := Text(string(b))
	if _, err := t.w.Write([]byte(s)); err != nil {
		return 0, err
	}
	return len(b), nil
}
