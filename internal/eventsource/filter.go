package eventsource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// Sentinel errors of ParseFilter.
var (
	// ErrInvalidFilter is a pattern that is not a Lambda filter pattern at all.
	ErrInvalidFilter = errors.New("eventsource: invalid filter pattern")
	// ErrUnsupportedFilter is a valid Lambda filter pattern using an operator this
	// emulation does not implement (numeric, exists, suffix, …).
	ErrUnsupportedFilter = errors.New("eventsource: unsupported filter operator")
)

// Filter is one Lambda event filter (the Pattern of one FilterCriteria.Filters
// entry). The supported subset: nested objects whose leaves are arrays of exact
// values (strings, numbers, booleans, null), {"prefix": "..."} objects or
// {"anything-but": [strings]} objects (a string that is none of them), e.g.
//
//	{"eventName":["INSERT"]}
//	{"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"tokens#"}]}}}}
//
// A record matches when every leaf matches: the field at the leaf's path exists and
// equals one of the leaf's values (for an array field, any element does). The zero
// Filter has no leaves and matches every record; build filters with ParseFilter.
type Filter struct {
	pattern string
	root    map[string]*filterNode
}

type filterNode struct {
	children map[string]*filterNode // an object level, or
	values   []valueMatcher         // a leaf
}

type valueMatcher struct {
	prefix      bool
	anythingBut []string // a string other than these (when not nil)
	expected    any      // string, json.Number, bool or nil
}

// ParseFilter parses a Lambda filter pattern. Operators outside the supported subset
// are rejected with ErrUnsupportedFilter naming the operator; malformed patterns with
// ErrInvalidFilter.
func ParseFilter(pattern string) (Filter, error) {
	dec := json.NewDecoder(strings.NewReader(pattern))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return Filter{}, fmt.Errorf("%w: %v", ErrInvalidFilter, err)
	}
	if dec.More() {
		return Filter{}, fmt.Errorf("%w: trailing data after the pattern", ErrInvalidFilter)
	}
	obj, ok := doc.(map[string]any)
	if !ok || len(obj) == 0 {
		return Filter{}, fmt.Errorf("%w: a pattern is a non-empty JSON object", ErrInvalidFilter)
	}
	root, err := parseLevel(obj, "")
	if err != nil {
		return Filter{}, err
	}
	return Filter{pattern: pattern, root: root}, nil
}

// MustParseFilter is ParseFilter for patterns known at compile time; it panics on error.
func MustParseFilter(pattern string) Filter {
	f, err := ParseFilter(pattern)
	if err != nil {
		panic(err)
	}
	return f
}

func parseLevel(obj map[string]any, path string) (map[string]*filterNode, error) {
	level := make(map[string]*filterNode, len(obj))
	for key, v := range obj {
		p := joinPath(path, key)
		if strings.HasPrefix(key, "$") {
			return nil, fmt.Errorf("%w %q at %s", ErrUnsupportedFilter, key, p)
		}
		switch v := v.(type) {
		case map[string]any:
			if len(v) == 0 {
				return nil, fmt.Errorf("%w: empty object at %s", ErrInvalidFilter, p)
			}
			children, err := parseLevel(v, p)
			if err != nil {
				return nil, err
			}
			level[key] = &filterNode{children: children}
		case []any:
			values, err := parseValues(v, p)
			if err != nil {
				return nil, err
			}
			level[key] = &filterNode{values: values}
		default:
			return nil, fmt.Errorf("%w: the value at %s must be an array or an object", ErrInvalidFilter, p)
		}
	}
	return level, nil
}

func parseValues(arr []any, path string) ([]valueMatcher, error) {
	if len(arr) == 0 {
		return nil, fmt.Errorf("%w: empty array at %s", ErrInvalidFilter, path)
	}
	out := make([]valueMatcher, 0, len(arr))
	for _, v := range arr {
		switch v := v.(type) {
		case string, json.Number, bool, nil:
			out = append(out, valueMatcher{expected: v})
		case map[string]any:
			if len(v) != 1 {
				return nil, fmt.Errorf("%w: a matcher object at %s has exactly one operator", ErrInvalidFilter, path)
			}
			for op, arg := range v {
				if op == "anything-but" {
					m, err := parseAnythingBut(arg, path)
					if err != nil {
						return nil, err
					}
					out = append(out, m)
					continue
				}
				if op != "prefix" {
					return nil, fmt.Errorf("%w %q at %s (supported: exact values, prefix and anything-but over strings)", ErrUnsupportedFilter, op, path)
				}
				s, ok := arg.(string)
				if !ok {
					return nil, fmt.Errorf("%w: prefix at %s takes a string", ErrInvalidFilter, path)
				}
				out = append(out, valueMatcher{prefix: true, expected: s})
			}
		default:
			return nil, fmt.Errorf("%w: unexpected %T in the array at %s", ErrInvalidFilter, v, path)
		}
	}
	return out, nil
}

// parseAnythingBut reads anything-but's argument: a string or an array of strings
// (other forms of the operator are not emulated).
func parseAnythingBut(arg any, path string) (valueMatcher, error) {
	var list []string
	switch a := arg.(type) {
	case string:
		list = []string{a}
	case []any:
		for _, e := range a {
			s, ok := e.(string)
			if !ok {
				return valueMatcher{}, fmt.Errorf("%w anything-but over %T at %s (supported: strings)", ErrUnsupportedFilter, e, path)
			}
			list = append(list, s)
		}
	default:
		return valueMatcher{}, fmt.Errorf("%w anything-but over %T at %s (supported: strings)", ErrUnsupportedFilter, arg, path)
	}
	if len(list) == 0 {
		return valueMatcher{}, fmt.Errorf("%w: empty anything-but at %s", ErrInvalidFilter, path)
	}
	return valueMatcher{anythingBut: list}, nil
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// String returns the pattern the filter was parsed from.
func (f Filter) String() string { return f.pattern }

// Match reports whether the record, in its Lambda event JSON form, matches the filter.
func (f Filter) Match(rec events.DynamoDBEventRecord) bool {
	doc, err := recordDocument(rec)
	if err != nil {
		return false
	}
	return f.matchDocument(doc)
}

func (f Filter) matchDocument(doc map[string]any) bool {
	return matchLevel(f.root, doc)
}

func matchLevel(level map[string]*filterNode, doc map[string]any) bool {
	for key, n := range level {
		v, ok := doc[key]
		if !ok {
			return false
		}
		if n.children != nil {
			sub, ok := v.(map[string]any)
			if !ok || !matchLevel(n.children, sub) {
				return false
			}
			continue
		}
		if !matchLeaf(n.values, v) {
			return false
		}
	}
	return true
}

func matchLeaf(ms []valueMatcher, v any) bool {
	if arr, ok := v.([]any); ok {
		for _, e := range arr {
			if matchLeaf(ms, e) {
				return true
			}
		}
		return false
	}
	for _, m := range ms {
		if m.match(v) {
			return true
		}
	}
	return false
}

func (m valueMatcher) match(v any) bool {
	if m.anythingBut != nil {
		s, ok := v.(string)
		if !ok {
			return false
		}
		for _, no := range m.anythingBut {
			if s == no {
				return false
			}
		}
		return true
	}
	if m.prefix {
		s, ok := v.(string)
		return ok && strings.HasPrefix(s, m.expected.(string))
	}
	switch want := m.expected.(type) {
	case nil:
		return v == nil
	case json.Number:
		got, ok := v.(json.Number)
		if !ok {
			return false
		}
		wf, err1 := want.Float64()
		gf, err2 := got.Float64()
		return err1 == nil && err2 == nil && wf == gf
	default:
		return v == want
	}
}

// recordDocument is the record as Lambda's filtering sees it: its event JSON.
func recordDocument(rec events.DynamoDBEventRecord) (map[string]any, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// matchAny applies FilterCriteria: no filters pass everything, otherwise a record
// passes when any filter matches (Lambda ORs the filters).
func matchAny(filters []Filter, rec events.DynamoDBEventRecord) bool {
	if len(filters) == 0 {
		return true
	}
	doc, err := recordDocument(rec)
	if err != nil {
		return false
	}
	for _, f := range filters {
		if f.matchDocument(doc) {
			return true
		}
	}
	return false
}

// filterStrings lists patterns for logs, in a stable order.
func filterStrings(fs []Filter) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.pattern
	}
	sort.Strings(out)
	return out
}
