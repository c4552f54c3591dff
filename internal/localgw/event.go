package localgw

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// bodyMark stands in for a message's body while the rest of its event is encoded;
// encoded, it is `"body":"\u0000"`, which no other field can contain (every quote inside
// a JSON string is escaped).
const bodyMark = "\x00"

// messageEvent is the JSON event of a $default message whose body is body: the event
// encoded by encoding/json, with the body written once into a buffer of its exact
// encoded size. encoding/json would grow its buffer by doubling and then copy it, about
// 7× the encoded body, which is up to 6× the frame (a control character is \u00XX);
// this costs the encoded body once.
func messageEvent(ev any, body string) ([]byte, error) {
	head, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	mark := []byte(`"body":"\u0000"`)
	i := bytes.Index(head, mark)
	if i < 0 {
		return nil, fmt.Errorf("localgw: event has no body field")
	}
	at := i + len(`"body":`)
	out := make([]byte, 0, len(head)-len(`"\u0000"`)+quotedLen(body))
	out = append(out, head[:at]...)
	out = appendQuoted(out, body)
	return append(out, head[at+len(`"\u0000"`):]...), nil
}

// quotedLen is the length of appendQuoted's encoding of s.
func quotedLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case b == '"' || b == '\\' || b == '\n' || b == '\r' || b == '\t':
				n += 2
			case b < 0x20:
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// appendQuoted appends s as a JSON string: quotes, backslashes and control characters
// escaped, invalid UTF-8 replaced by U+FFFD (as encoding/json does), U+2028 and U+2029
// escaped for JavaScript readers.
func appendQuoted(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case b == '"' || b == '\\':
				dst = append(dst, '\\', b)
			case b == '\n':
				dst = append(dst, '\\', 'n')
			case b == '\r':
				dst = append(dst, '\\', 'r')
			case b == '\t':
				dst = append(dst, '\\', 't')
			case b < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
			default:
				dst = append(dst, b)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, `\ufffd`...)
		case r == '\u2028':
			dst = append(dst, `\u2028`...)
		case r == '\u2029':
			dst = append(dst, `\u2029`...)
		default:
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
