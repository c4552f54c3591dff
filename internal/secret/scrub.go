package secret

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Redacted is what Scrubber.Scrub puts in place of a secret.
const Redacted = "[redacted]"

// minForm is the shortest encoded form of a secret Scrub looks for: a shorter run
// (the base64 of a short key at an odd offset) would match ordinary text.
const minForm = 8

// Scrubber removes secrets from text a server sent back (an error body echoing the
// request), in the forms a server may echo them: as written, in any case
// (upper-cased), percent-encoded in whole or in part (%XX in either case), cut short
// or cut in pieces (any piece of at least minPiece characters, so a truncated echo or
// each part of one split by other text); base64 (standard and URL alphabets, padded or
// not, at any offset inside a longer encoded run such as an HTTP Basic credential);
// hex (either case); and any of those split by white space or JSON-escaped line
// breaks (a wrapped message). The zero Scrubber and a nil one remove nothing. It is
// safe for concurrent use.
type Scrubber struct {
	re *regexp.Regexp
}

// minPiece is the shortest piece of a secret Scrub removes on its own (a truncated
// echo, or one part of a split one): 12 characters, or half of a shorter secret, but
// never under minForm.
func minPiece(secret string) int {
	return min(len(secret), max(minForm, min(12, len(secret)/2)))
}

// NewScrubber returns a Scrubber for secrets; empty ones are ignored. Building it
// compiles one regular expression; Scrub is one pass over the text.
func NewScrubber(secrets ...string) *Scrubber {
	seen := map[string]bool{}
	var pieces []string
	for _, s := range secrets {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		pieces = append(pieces, piecesOf(s)...)
		for _, f := range forms(s) {
			if len(f) >= minForm {
				seen[f] = true
			}
		}
	}
	if len(seen) == 0 && len(pieces) == 0 {
		return &Scrubber{}
	}
	all := make([]string, 0, len(seen))
	for f := range seen {
		all = append(all, f)
	}
	// Longest first, so a form that contains another is removed whole.
	sort.Slice(all, func(i, j int) bool { return len(all[i]) > len(all[j]) || len(all[i]) == len(all[j]) && all[i] < all[j] })
	alts := make([]string, 0, len(all)+1)
	if len(pieces) > 0 {
		alts = append(alts, "(?i:"+strings.Join(pieces, "|")+")")
	}
	for _, f := range all {
		alts = append(alts, spaced(f))
	}
	return &Scrubber{re: regexp.MustCompile(strings.Join(alts, "|"))}
}

// piecesOf is the patterns of the secret as written — each matching, from one start
// on, at least minPiece characters and as many more of the secret as follow — in any
// case, each character as itself or percent-encoded, split by white space.
func piecesOf(secret string) []string {
	chars := []string{}
	for _, r := range secret {
		chars = append(chars, charPattern(string(r)))
	}
	k := minPiece(secret)
	if k < 1 {
		return nil
	}
	runes := []rune(secret)
	k = min(k, len(runes))
	var out []string
	for i := 0; i+k <= len(runes); i++ {
		var b strings.Builder
		for j := i; j < i+k; j++ {
			if j > i {
				b.WriteString(gap)
			}
			b.WriteString(chars[j])
		}
		// The rest of the secret, each next character optional once the one before
		// matched: (?:gap c1(?:gap c2(?:…)?)?)?
		for j := i + k; j < len(runes); j++ {
			b.WriteString("(?:" + gap + chars[j])
		}
		b.WriteString(strings.Repeat(")?", len(runes)-i-k))
		out = append(out, b.String())
	}
	return out
}

// charPattern matches the character c as itself or percent-encoded (each byte %XX).
func charPattern(c string) string {
	var enc strings.Builder
	for _, b := range []byte(c) {
		enc.WriteString(fmt.Sprintf("%%%02X", b))
	}
	return "(?:" + regexp.QuoteMeta(c) + "|" + enc.String() + ")"
}

// gap is what may stand between two characters of an echoed secret: white space, and
// the JSON escapes of line breaks.
const gap = `(?:\s|\\[nrt])*`

// Scrub returns text with every form of the secrets replaced by Redacted.
func (s *Scrubber) Scrub(text string) string {
	if s == nil || s.re == nil {
		return text
	}
	return s.re.ReplaceAllLiteralString(text, Redacted)
}

// forms lists the encodings of secret a server may echo (the secret as written is
// piecesOf's).
func forms(secret string) []string {
	b := []byte(secret)
	out := []string{hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b))}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		raw := enc.WithPadding(base64.NoPadding)
		// At offset o inside a longer run, the characters wholly made of the secret's
		// bits are the same whatever surrounds it: characters ⌈8o/6⌉ to ⌊8(o+n)/6⌋.
		for o := range 3 {
			e := raw.EncodeToString(append(make([]byte, o), b...))
			from, to := (8*o+5)/6, 8*(o+len(b))/6
			if to > from {
				out = append(out, e[from:to])
			}
		}
	}
	return out
}

// spaced is the pattern of f with a gap allowed between two of its characters.
func spaced(f string) string {
	var b strings.Builder
	for i, r := range f {
		if i > 0 {
			b.WriteString(gap)
		}
		b.WriteString(regexp.QuoteMeta(string(r)))
	}
	return b.String()
}
