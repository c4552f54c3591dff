package secret

import (
	"encoding/base64"
	"encoding/hex"
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
// request), in the forms a server may echo them: as written; base64 (standard and
// URL alphabets, padded or not, at any offset inside a longer encoded run such as an
// HTTP Basic credential); hex (either case); and any of those split by white space
// (a line break in a wrapped message). The zero Scrubber and a nil one remove nothing.
// It is safe for concurrent use.
type Scrubber struct {
	re *regexp.Regexp
}

// NewScrubber returns a Scrubber for secrets; empty ones are ignored. Building it
// compiles one regular expression; Scrub is one pass over the text.
func NewScrubber(secrets ...string) *Scrubber {
	seen := map[string]bool{}
	for _, s := range secrets {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		for _, f := range forms(s) {
			if len(f) >= minForm || f == s {
				seen[f] = true
			}
		}
	}
	if len(seen) == 0 {
		return &Scrubber{}
	}
	all := make([]string, 0, len(seen))
	for f := range seen {
		all = append(all, f)
	}
	// Longest first, so a form that contains another is removed whole.
	sort.Slice(all, func(i, j int) bool { return len(all[i]) > len(all[j]) || len(all[i]) == len(all[j]) && all[i] < all[j] })
	alts := make([]string, len(all))
	for i, f := range all {
		alts[i] = spaced(f)
	}
	return &Scrubber{re: regexp.MustCompile(strings.Join(alts, "|"))}
}

// Scrub returns text with every form of the secrets replaced by Redacted.
func (s *Scrubber) Scrub(text string) string {
	if s == nil || s.re == nil {
		return text
	}
	return s.re.ReplaceAllLiteralString(text, Redacted)
}

// forms lists the encodings of secret a server may echo.
func forms(secret string) []string {
	b := []byte(secret)
	out := []string{secret, hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b))}
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

// spaced is the pattern of f with any run of white space allowed between two of its
// characters.
func spaced(f string) string {
	var b strings.Builder
	for i, r := range f {
		if i > 0 {
			b.WriteString(`\s*`)
		}
		b.WriteString(regexp.QuoteMeta(string(r)))
	}
	return b.String()
}
