package agent

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/terret/terret-ws/internal/agent/control"
)

// Size bounds. An event envelope over sessionlog.MaxEnvelopeBytes (128 KiB) is
// refused by the log, so every producer of unbounded content cuts it first. The
// bounds count JSON-encoded bytes (escapes included), leaving room for the envelope
// and the payload's other fields.
const (
	MaxTextBytes   = control.MaxTextBytes // inject text (user/message, context/injected)
	MaxResultBytes = 64 << 10             // a tool result
	MaxArgsBytes   = 64 << 10             // a tool call's arguments (not cut: the call is refused)
	MaxChunkBytes  = 32 << 10             // one assistant/chunk's text; longer text is split
	MaxErrorBytes  = 8 << 10              // a tool result's error text
	MaxReasonBytes = 4 << 10              // turn/end and approval/resolved reasons
	MaxTitleRunes  = 80                   // session/titled
)

// encodedLen is how many bytes r takes inside a JSON string as the session log writes
// it: encoding/json without HTML escaping ("<", ">" and "&" are one byte each), so the
// bounds count what goes on the wire.
func encodedLen(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size == 1:
		return 6 // \ufffd
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t' || r == '\b' || r == '\f':
		return 2
	case r < 0x20 || r == '\u2028' || r == '\u2029':
		return 6
	}
	return size
}

// TextBytes is how many bytes s takes as a JSON string (quotes included) in an event
// of the session log: the measure of MaxTextBytes and the other bounds.
func TextBytes(s string) int {
	total := 2
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		total += encodedLen(r, size)
		i += size
	}
	return total
}

// boundText cuts s on a rune boundary so its JSON encoding (quotes included) is at
// most max bytes, and reports whether it cut.
func boundText(s string, max int) (string, bool) {
	total := 2
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		total += encodedLen(r, size)
		if total > max {
			return s[:i], true
		}
		i += size
	}
	return s, false
}

// splitText cuts s into pieces whose JSON-encoded lengths are at most max each. It
// always returns at least one piece (possibly empty).
func splitText(s string, max int) []string {
	var out []string
	for {
		piece, cut := boundText(s, max)
		if !cut || piece == "" {
			return append(out, s)
		}
		out = append(out, piece)
		s = s[len(piece):]
	}
}

// boundResult bounds a tool result. A result that is not valid JSON is kept as a
// JSON string of its text; one over MaxResultBytes becomes a JSON string of its first
// bytes, and truncated is reported so the event carries "truncated": true.
func boundResult(raw json.RawMessage) (json.RawMessage, bool) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return json.RawMessage("null"), false
	}
	if json.Valid(raw) {
		if enc, err := compact(raw); err == nil && len(enc) <= MaxResultBytes {
			return enc, false
		}
	}
	text, cut := boundText(string(raw), MaxResultBytes)
	return quote(text), cut
}

// boundArgs checks a tool call's arguments: a JSON object of at most MaxArgsBytes.
// Arguments are never cut — a cut call would run with other arguments on resume — so
// over-large or malformed arguments are logged as {} with the reason, and the call
// gets an error result instead of running.
func boundArgs(raw json.RawMessage) (args json.RawMessage, argsErr string, truncated bool) {
	trimmed := strings.TrimSpace(string(raw))
	if trimmed == "" || trimmed == "null" {
		return json.RawMessage("{}"), "", false
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(trimmed), &obj); err != nil || obj == nil {
		return json.RawMessage("{}"), ErrTextArgsBad, false
	}
	enc, err := compact(json.RawMessage(trimmed))
	if err != nil {
		return json.RawMessage("{}"), ErrTextArgsBad, false
	}
	if len(enc) > MaxArgsBytes {
		return json.RawMessage("{}"), ErrTextArgsTooBig, true
	}
	return enc, "", false
}

// compact is json.Marshal of raw JSON without HTML escaping, as the log writes it.
func compact(raw json.RawMessage) (json.RawMessage, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// quote encodes s as a JSON string without HTML escaping.
func quote(s string) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// boundTitle makes a session title: the first non-empty line, at most MaxTitleRunes.
func boundTitle(s string) string {
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if utf8.RuneCountInString(line) > MaxTitleRunes {
			line = string([]rune(line)[:MaxTitleRunes])
		}
		return line
	}
	return ""
}
