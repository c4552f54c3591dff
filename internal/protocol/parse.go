package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// maxEchoedChars bounds how much of a client-supplied value (an unknown frame
// type) is echoed back in an error message.
const maxEchoedChars = 64

// Parse decodes one client text frame.
//
// On success it returns one of [Subscribe], [Inject], [Cancel], [Approve],
// [Deny], [SetModel] or [SetPolicy] as a value, and a nil error. Otherwise it
// returns a nil frame and a [*BadFrameError] (errors.Is(err, ErrBadFrame)
// holds) whose Message names the problem for the client. Checks, in order:
//
//  1. len(data) ≤ [MaxFrameBytes], checked before anything else is read.
//  2. data is valid UTF-8 and valid JSON, the JSON value is an object, and no
//     \u escape names a lone UTF-16 surrogate (which would decode to U+FFFD).
//  3. No top-level field name occurs twice (names compare after unescaping,
//     case-sensitively).
//  4. "type" is present, is a string, and names a frame of the closed set.
//  5. The frame's fields: required ones present with the right JSON type,
//     optional ones of the right type when present; null for an optional
//     field counts as absent, null for a required field is a wrong type.
//     Integers (from_seq) must be written as plain JSON integers: no
//     fraction or exponent (so 1.0 and 1e2 are rejected), within int64.
//  6. Value rules: from_seq ≥ 0; call_id and role non-empty; spec per
//     [ValidModelSpec]; set_policy bounds. Pattern lengths are counted in
//     characters (code points) of the decoded string, so "\u00e9" is one
//     character; set_policy messages name a pattern by its zero-based index
//     in the array ("pattern 0" is the first).
//
// Unknown top-level fields are ignored, whatever their value. Parse never
// panics and does not retain data.
func Parse(data []byte) (ClientFrame, error) {
	f, _, err := parse(data, MaxFrameBytes)
	return f, err
}

// ParseOrdered is Parse that also returns the frame's order field ([FieldOrder]):
// a positive integer, or 0 when the frame has none. The order is returned even
// when the frame is rejected for another reason, as long as it is a JSON object
// whose order field is valid, so that a turnstile counting the connection's frames
// can count a bad frame too. An order field that is present but not a positive
// integer is itself a bad_frame (order 0).
func ParseOrdered(data []byte) (ClientFrame, int64, error) {
	f, m, err := parseMeta(data, MaxFrameBytes)
	return f, m.Order, err
}

// parse is ParseOrdered with the size bound as a parameter, so tests can re-parse
// encodings that grew past MaxFrameBytes (see ClientFrame).
func parse(data []byte, maxBytes int) (ClientFrame, int64, error) {
	f, m, err := parseMeta(data, maxBytes)
	return f, m.Order, err
}

// parseMeta is ParseMeta with the size bound as a parameter.
func parseMeta(data []byte, maxBytes int) (ClientFrame, Meta, error) {
	frame, order, fields, err := parseOrderedFields(data, maxBytes)
	m := Meta{Order: order}
	if err != nil {
		return nil, m, err
	}
	if m.ClientID, err = clientIDOf(frame, fields); err != nil {
		return nil, m, err
	}
	return frame, m, nil
}

// parseOrderedFields is the frame, its order and its top-level fields.
func parseOrderedFields(data []byte, maxBytes int) (ClientFrame, int64, map[string]json.RawMessage, error) {
	if len(data) > maxBytes {
		return nil, 0, nil, badFrame("frame is %d bytes, at most %d allowed", len(data), maxBytes)
	}
	if !utf8.Valid(data) {
		return nil, 0, nil, badFrame("frame is not valid UTF-8")
	}
	var whole json.RawMessage
	if err := json.Unmarshal(data, &whole); err != nil {
		return nil, 0, nil, syntaxProblem(err)
	}
	if at := loneSurrogate(data); at >= 0 {
		// encoding/json would decode it to U+FFFD: text the client never wrote.
		return nil, 0, nil, badFrame("frame is not valid UTF-8: \\u escape of a lone surrogate at byte %d", at)
	}
	if k := kindOf(whole); k != "object" {
		return nil, 0, nil, badFrame("frame is not a JSON object, got %s", k)
	}
	fields, err := objectFields(whole)
	if err != nil {
		return nil, 0, nil, err
	}
	var order int64
	if _, ok := fields[FieldOrder]; ok {
		r := fieldReader{frameType: "frame", fields: fields}
		if _, present := r.lookup(FieldOrder, true); present {
			n, err := r.nonNegInt(FieldOrder)
			if err == nil && n == 0 {
				err = badField("frame", FieldOrder, "must be at least 1")
			}
			if err != nil {
				return nil, 0, nil, err
			}
			order = n
		}
	}
	frame, err := parseFields(fields)
	return frame, order, fields, err
}

// loneSurrogate returns the offset of the first \u escape in valid JSON data that
// names a UTF-16 surrogate not part of a high-low pair, or -1. Such an escape is no
// character (RFC 8259 §8.2), so a frame holding one is not UTF-8 text.
func loneSurrogate(data []byte) int {
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString:
			if i+1 < len(data) && data[i+1] != 'u' {
				i++ // a one-character escape, \" included
				continue
			}
			r := hex4(data, i+2)
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return i
			case r >= 0xD800 && r <= 0xDBFF:
				if i+7 >= len(data) || data[i+6] != '\\' || data[i+7] != 'u' {
					return i
				}
				if lo := hex4(data, i+8); lo < 0xDC00 || lo > 0xDFFF {
					return i
				}
				i += 11 // the pair
				continue
			}
			i += 5
		}
	}
	return -1
}

// hex4 is the value of the four hex digits at data[i:], or -1.
func hex4(data []byte, i int) int {
	if i+4 > len(data) {
		return -1
	}
	n, err := strconv.ParseUint(string(data[i:i+4]), 16, 16)
	if err != nil {
		return -1
	}
	return int(n)
}

// parseFields reads the frame named by the "type" of a frame's top-level fields.
func parseFields(fields map[string]json.RawMessage) (ClientFrame, error) {

	rawType, ok := fields["type"]
	if !ok {
		return nil, badFrame(`frame has no "type" field`)
	}
	if k := kindOf(rawType); k != "string" {
		return nil, badFrame(`field "type" must be a string, got %s`, k)
	}
	var frameType string
	if err := json.Unmarshal(rawType, &frameType); err != nil {
		return nil, badFrame(`field "type" must be a string`)
	}

	f := fieldReader{frameType: frameType, fields: fields}
	switch frameType {
	case TypeSubscribe:
		return f.subscribe()
	case TypeInject:
		return f.inject()
	case TypeCancel:
		return f.cancel()
	case TypeApprove:
		return f.approve()
	case TypeDeny:
		return f.deny()
	case TypeSetModel:
		return f.setModel()
	case TypeSetPolicy:
		return f.setPolicy()
	}
	return nil, badFrame("unknown frame type %q", truncate(frameType, maxEchoedChars))
}

// syntaxProblem turns a decoding error of the whole frame into a bad frame
// error. encoding/json syntax errors describe only the JSON text (e.g.
// "invalid character 'x' looking for beginning of value"), never Go types.
func syntaxProblem(err error) *BadFrameError {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		unit := "bytes"
		if se.Offset == 1 {
			unit = "byte"
		}
		return badFrame("frame is not valid JSON: %s (after reading %d %s)", se.Error(), se.Offset, unit)
	}
	return badFrame("frame is not valid JSON")
}

// objectFields splits a JSON object (already known to be valid) into its
// top-level fields, rejecting duplicate names.
func objectFields(obj json.RawMessage) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, badFrame("frame is not a JSON object")
	}
	fields := make(map[string]json.RawMessage)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, badFrame("frame is not valid JSON")
		}
		name, ok := tok.(string)
		if !ok {
			return nil, badFrame("frame is not valid JSON")
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, badFrame("frame is not valid JSON")
		}
		if _, dup := fields[name]; dup {
			return nil, badFrame("frame has duplicate field %q", truncate(name, maxEchoedChars))
		}
		fields[name] = bytes.TrimSpace(value)
	}
	return fields, nil
}

// kindOf names the JSON kind of a valid JSON value, for messages.
func kindOf(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// truncate shortens s to at most n characters, marking the cut with "…".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n {
			break
		}
		count++
	}
	return s[:i] + "…"
}

// fieldReader reads the fields of one frame of a known type, producing
// messages prefixed with that type.
type fieldReader struct {
	frameType string
	fields    map[string]json.RawMessage
}

// lookup returns the raw value of field name. With optional set, a null
// value counts as absent.
func (f fieldReader) lookup(name string, optional bool) (json.RawMessage, bool) {
	raw, ok := f.fields[name]
	if !ok || (optional && kindOf(raw) == "null") {
		return nil, false
	}
	return raw, true
}

func (f fieldReader) missing(name string) *BadFrameError {
	return badField(f.frameType, name, "is required")
}

func (f fieldReader) wrongKind(name, want string, raw json.RawMessage) *BadFrameError {
	return badField(f.frameType, name, fmt.Sprintf("must be %s, got %s", want, kindOf(raw)))
}

// str reads a string field. Absent optional fields yield "".
func (f fieldReader) str(name string, optional bool) (string, error) {
	raw, ok := f.lookup(name, optional)
	if !ok {
		if optional {
			return "", nil
		}
		return "", f.missing(name)
	}
	if kindOf(raw) != "string" {
		return "", f.wrongKind(name, "a string", raw)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", f.wrongKind(name, "a string", raw)
	}
	return s, nil
}

// nonEmptyStr reads a required string field that must not be empty.
func (f fieldReader) nonEmptyStr(name string) (string, error) {
	s, err := f.str(name, false)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", badField(f.frameType, name, "must not be empty")
	}
	return s, nil
}

// boolean reads a required boolean field.
func (f fieldReader) boolean(name string) (bool, error) {
	raw, ok := f.lookup(name, false)
	if !ok {
		return false, f.missing(name)
	}
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, f.wrongKind(name, "a boolean", raw)
}

// optionalBool reads an optional boolean field: absent or null is false.
func (f fieldReader) optionalBool(name string) (bool, error) {
	if _, ok := f.lookup(name, true); !ok {
		return false, nil
	}
	return f.boolean(name)
}

// nonNegInt reads a required integer field that must be ≥ 0 and fit int64.
func (f fieldReader) nonNegInt(name string) (int64, error) {
	raw, ok := f.lookup(name, false)
	if !ok {
		return 0, f.missing(name)
	}
	if k := kindOf(raw); k != "number" {
		return 0, f.wrongKind(name, "an integer", raw)
	}
	digits := raw
	negative := false
	if len(digits) > 0 && digits[0] == '-' {
		negative = true
		digits = digits[1:]
	}
	if len(digits) == 0 {
		return 0, badField(f.frameType, name, "must be an integer")
	}
	nonZero := false
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, badField(f.frameType, name, "must be an integer, got a fraction or exponent")
		}
		if c != '0' {
			nonZero = true
		}
	}
	if negative && nonZero {
		return 0, badField(f.frameType, name, "must not be negative")
	}
	n, err := strconv.ParseInt(string(digits), 10, 64)
	if err != nil {
		return 0, badField(f.frameType, name, fmt.Sprintf("is too large, at most %d allowed", int64(1<<63-1)))
	}
	return n, nil
}

// expectSeq reads the optional expect_seq precondition (FieldExpectSeq): an integer
// ≥ 0; absent or null is nil.
func (f fieldReader) expectSeq() (*int64, error) {
	if _, ok := f.lookup(FieldExpectSeq, true); !ok {
		return nil, nil
	}
	n, err := f.nonNegInt(FieldExpectSeq)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

func (f fieldReader) subscribe() (ClientFrame, error) {
	n, err := f.nonNegInt("from_seq")
	if err != nil {
		return nil, err
	}
	batch, err := f.optionalBool("batch")
	if err != nil {
		return nil, err
	}
	return Subscribe{FromSeq: n, Batch: batch}, nil
}

func (f fieldReader) inject() (ClientFrame, error) {
	text, err := f.str("text", false)
	if err != nil {
		return nil, err
	}
	wake, err := f.boolean("wake")
	if err != nil {
		return nil, err
	}
	expect, err := f.expectSeq()
	if err != nil {
		return nil, err
	}
	return Inject{Text: text, Wake: wake, ExpectSeq: expect}, nil
}

func (f fieldReader) cancel() (ClientFrame, error) {
	reason, err := f.str("reason", true)
	if err != nil {
		return nil, err
	}
	expect, err := f.expectSeq()
	if err != nil {
		return nil, err
	}
	return Cancel{Reason: reason, ExpectSeq: expect}, nil
}

func (f fieldReader) approve() (ClientFrame, error) {
	id, err := f.nonEmptyStr("call_id")
	if err != nil {
		return nil, err
	}
	expect, err := f.expectSeq()
	if err != nil {
		return nil, err
	}
	return Approve{CallID: id, ExpectSeq: expect}, nil
}

func (f fieldReader) deny() (ClientFrame, error) {
	id, err := f.nonEmptyStr("call_id")
	if err != nil {
		return nil, err
	}
	reason, err := f.str("reason", true)
	if err != nil {
		return nil, err
	}
	expect, err := f.expectSeq()
	if err != nil {
		return nil, err
	}
	return Deny{CallID: id, Reason: reason, ExpectSeq: expect}, nil
}

func (f fieldReader) setModel() (ClientFrame, error) {
	role, err := f.nonEmptyStr("role")
	if err != nil {
		return nil, err
	}
	spec, err := f.str("spec", false)
	if err != nil {
		return nil, err
	}
	if problem := modelSpecProblem(spec); problem != "" {
		return nil, badField(f.frameType, "spec", problem)
	}
	return SetModel{Role: role, Spec: spec}, nil
}

func (f fieldReader) setPolicy() (ClientFrame, error) {
	const name = "patterns"
	raw, ok := f.lookup(name, false)
	if !ok {
		return nil, f.missing(name)
	}
	if kindOf(raw) != "array" {
		return nil, f.wrongKind(name, "an array of strings", raw)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, f.wrongKind(name, "an array of strings", raw)
	}
	if len(items) > MaxPolicyPatterns {
		return nil, &BadFrameError{
			FrameType: f.frameType,
			Field:     name,
			Message:   fmt.Sprintf("%s: %d patterns, at most %d allowed", f.frameType, len(items), MaxPolicyPatterns),
		}
	}
	patterns := make([]string, 0, len(items))
	for i, item := range items {
		item = bytes.TrimSpace(item)
		var p string
		if kindOf(item) != "string" || json.Unmarshal(item, &p) != nil {
			return nil, &BadFrameError{
				FrameType: f.frameType,
				Field:     name,
				Message:   fmt.Sprintf("%s: pattern %d must be a string, got %s", f.frameType, i, kindOf(item)),
			}
		}
		if n := utf8.RuneCountInString(p); n > MaxPatternChars {
			return nil, &BadFrameError{
				FrameType: f.frameType,
				Field:     name,
				Message:   fmt.Sprintf("%s: pattern %d is %d characters, at most %d allowed", f.frameType, i, n, MaxPatternChars),
			}
		}
		patterns = append(patterns, p)
	}
	expect, err := f.expectSeq()
	if err != nil {
		return nil, err
	}
	return SetPolicy{Patterns: patterns, ExpectSeq: expect}, nil
}
