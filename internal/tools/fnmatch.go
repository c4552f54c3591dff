package tools

// Fnmatch reports whether name matches pattern exactly as Ruby's
//
//	File.fnmatch(pattern, name, File::FNM_EXTGLOB)
//
// does: FNM_EXTGLOB on, FNM_PATHNAME, FNM_DOTMATCH, FNM_NOESCAPE and FNM_CASEFOLD off.
// It is a port of Ruby's dir.c (fnmatch_helper, bracket, ruby_brace_expand), working
// on runes. What that means for a tool name:
//
//   - `*` matches any run of characters, "/" included (FNM_PATHNAME is off); `**` is
//     just two `*`.
//   - `?` matches exactly one character.
//   - `[a-z]` matches one character in the set; `[!x]` and `[^x]` negate it; `\`
//     escapes inside a set. A reversed range `[z-a]` matches only its two ends. A set
//     that is never closed (`[ab`) makes the pattern match nothing; `[]` matches
//     nothing and `[!]` matches any one character.
//   - `\c` matches c literally; a trailing `\` matches nothing (it is dropped).
//   - `{a,b}` matches a or b (FNM_EXTGLOB): braces are expanded before matching,
//     nest, and may hold empty alternatives (`{a,}`); `\{` is a literal brace. A `{`
//     that is never closed makes the pattern match nothing.
//   - A name beginning with "." matches only a pattern beginning with a literal "."
//     (FNM_DOTMATCH is off): `*` does not match ".hidden".
//   - Matching is case-sensitive.
func Fnmatch(pattern, name string) bool {
	s := []rune(name)
	return braceExpand([]rune(pattern), func(p []rune) bool { return fnmatch(p, s) })
}

// braceExpand calls match with every expansion of the braces of p, stopping at the
// first that returns true, and reports whether one did (ruby_brace_expand).
func braceExpand(p []rune, match func([]rune) bool) bool {
	lbrace, rbrace := -1, -1
	nest := 0
	for i := 0; i < len(p); i++ {
		if p[i] == '{' {
			if nest == 0 {
				lbrace = i
			}
			nest++
		}
		if p[i] == '}' && lbrace >= 0 {
			nest--
			if nest == 0 {
				rbrace = i
				break
			}
		}
		if p[i] == '\\' {
			i++
			if i >= len(p) {
				break
			}
		}
	}
	switch {
	case lbrace >= 0 && rbrace >= 0:
		i := lbrace
		for i < rbrace {
			i++
			t := i
			depth := 0
			for i < rbrace && !(p[i] == ',' && depth == 0) {
				if p[i] == '{' {
					depth++
				}
				if p[i] == '}' {
					depth--
				}
				if p[i] == '\\' {
					i++
					if i == rbrace {
						break
					}
				}
				i++
			}
			alt := make([]rune, 0, len(p))
			alt = append(alt, p[:lbrace]...)
			alt = append(alt, p[t:i]...)
			alt = append(alt, p[rbrace+1:]...)
			if braceExpand(alt, match) {
				return true
			}
		}
		return false
	case lbrace < 0:
		return match(p)
	default: // an unclosed brace: Ruby calls nothing, so nothing matches
		return false
	}
}

// fnmatch is Ruby's fnmatch_helper without FNM_PATHNAME: one pass with backtracking
// to the last `*`.
func fnmatch(p, s []rune) bool {
	unescape := func(i int) int {
		if i < len(p) && p[i] == '\\' {
			return i + 1
		}
		return i
	}
	if len(s) > 0 && s[0] == '.' {
		if j := unescape(0); j >= len(p) || p[j] != '.' {
			return false
		}
	}
	pi, si := 0, 0
	ptmp, stmp := -1, -1
	for {
		failed := false
		special := pi < len(p) && (p[pi] == '*' || p[pi] == '?' || p[pi] == '[')
		switch {
		case special && p[pi] == '*':
			for pi < len(p) && p[pi] == '*' {
				pi++
			}
			if unescape(pi) >= len(p) {
				return true
			}
			if si >= len(s) {
				return false
			}
			ptmp, stmp = pi, si
			continue
		case special && p[pi] == '?':
			if si >= len(s) {
				return false
			}
			pi++
			si++
			continue
		case special && p[pi] == '[':
			if si >= len(s) {
				return false
			}
			if next, ok := bracket(p, pi+1, s[si]); ok {
				pi = next
				si++
				continue
			}
			failed = true
		}
		if !failed {
			pi = unescape(pi)
			if si >= len(s) {
				return pi >= len(p)
			}
			if pi < len(p) && p[pi] == s[si] {
				pi++
				si++
				continue
			}
		}
		if ptmp >= 0 {
			pi = ptmp
			stmp++
			si = stmp
			continue
		}
		return false
	}
}

// bracket matches c against the set starting at p[i] (just after "["). It returns
// the index after the closing "]" and whether c is in the set; a malformed set never
// matches (Ruby's bracket returning NULL).
func bracket(p []rune, i int, c rune) (int, bool) {
	if i >= len(p) {
		return 0, false
	}
	not := false
	if p[i] == '!' || p[i] == '^' {
		not = true
		i++
	}
	ok := false
	for {
		if i >= len(p) {
			return 0, false
		}
		if p[i] == ']' {
			break
		}
		t1 := i
		if p[t1] == '\\' {
			t1++
		}
		if t1 >= len(p) {
			return 0, false
		}
		i = t1 + 1
		if i >= len(p) {
			return 0, false
		}
		if p[i] == '-' && (i+1 >= len(p) || p[i+1] != ']') {
			t2 := i + 1
			if t2 < len(p) && p[t2] == '\\' {
				t2++
			}
			if t2 >= len(p) {
				return 0, false
			}
			i = t2 + 1
			if ok {
				continue
			}
			lo, hi := p[t1], p[t2]
			if c == lo || c == hi || (c >= lo && c <= hi) {
				ok = true
			}
			continue
		}
		if !ok && p[t1] == c {
			ok = true
		}
	}
	if ok == not {
		return 0, false
	}
	return i + 1, true
}

// Policy is an agent's tool allow list: the patterns of the newest policy/updated
// event. The zero Policy (no policy/updated yet) allows every tool; a policy with no
// patterns allows none.
type Policy struct {
	Patterns []string
	Set      bool
}

// Allows reports whether a call of tool name is inside the policy: some pattern
// matches it under Fnmatch.
func (p Policy) Allows(name string) bool {
	if !p.Set {
		return true
	}
	for _, pat := range p.Patterns {
		if Fnmatch(pat, name) {
			return true
		}
	}
	return false
}
