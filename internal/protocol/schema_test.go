package protocol_test

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/protocol"
	"github.com/terret/terret-ws/internal/sessionlog"
)

// commonFields are the fields every client frame may carry. They are parsed apart from
// each frame's own fields (protocol.ParseOrdered), so no Go frame type has them.
var commonFields = map[string]bool{protocol.FieldOrder: true, protocol.FieldClientID: true}

type schemaField struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Required bool   `json:"required"`
	Enum     string `json:"enum"`
	Doc      string `json:"doc"`
}

type schemaFrame struct {
	Type   string        `json:"type"`
	Doc    string        `json:"doc"`
	Fields []schemaField `json:"fields"`
}

type schemaDoc struct {
	Comment           string              `json:"$comment"`
	Proto             int                 `json:"proto"`
	Subprotocol       string              `json:"subprotocol"`
	SubprotocolBearer string              `json:"subprotocol_bearer"`
	MaxFrameBytes     int                 `json:"max_frame_bytes"`
	Enums             map[string][]string `json:"enums"`
	Codes             []struct {
		Code   string `json:"code"`
		Closes bool   `json:"closes"`
		Doc    string `json:"doc"`
	} `json:"codes"`
	ClientFrameFields []schemaField            `json:"client_frame_fields"`
	ClientFrames      []schemaFrame            `json:"client_frames"`
	ServerFrames      []schemaFrame            `json:"server_frames"`
	Envelope          []schemaField            `json:"envelope"`
	Types             map[string][]schemaField `json:"types"`
	Events            []schemaFrame            `json:"events"`
}

func loadSchema(t *testing.T) schemaDoc {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(protocol.SchemaV1())))
	dec.DisallowUnknownFields()
	var s schemaDoc
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("schema/v1.json: %v", err)
	}
	return s
}

// goField is one JSON field of a Go type: its name, whether it is omitted when empty,
// and its schema type.
type goField struct {
	name     string
	optional bool
	typ      string
}

// reflectFields lists the JSON fields of struct type v, skipping "type" (the frame's
// own type key) and "-".
func reflectFields(t *testing.T, v any) []goField {
	t.Helper()
	rt := reflect.TypeOf(v)
	var out []goField
	for i := range rt.NumField() {
		f := rt.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" || name == "-" || name == "type" {
			continue
		}
		out = append(out, goField{name: name, optional: strings.Contains(opts, "omitempty"), typ: reflectType(t, f.Type)})
	}
	return out
}

var rawMessage = reflect.TypeOf(json.RawMessage(nil))

func reflectType(t *testing.T, rt reflect.Type) string {
	t.Helper()
	switch {
	case rt == rawMessage:
		return "json"
	case rt.Kind() == reflect.String:
		return "string"
	case rt.Kind() == reflect.Bool:
		return "boolean"
	case rt.Kind() >= reflect.Int && rt.Kind() <= reflect.Int64:
		return "integer"
	case rt.Kind() == reflect.Pointer && rt.Elem().Kind() == reflect.Int64:
		return "integer" // an optional integer whose zero is a value (expect_seq)
	case rt.Kind() == reflect.Slice && rt.Elem().Kind() == reflect.String:
		return "string[]"
	}
	t.Fatalf("Go type %s has no schema type", rt)
	return ""
}

// compareFields checks that the schema's fields and the Go type's fields agree on names,
// optionality and types. Schema fields named in allowMissing may be absent from Go.
func compareFields(t *testing.T, what string, schema []schemaField, gofs []goField) {
	t.Helper()
	byName := map[string]goField{}
	for _, g := range gofs {
		byName[g.name] = g
	}
	seen := map[string]bool{}
	for _, f := range schema {
		if seen[f.Name] {
			t.Errorf("%s: schema field %q listed twice", what, f.Name)
		}
		seen[f.Name] = true
		g, ok := byName[f.Name]
		if !ok {
			t.Errorf("%s: schema field %q is not in the Go type (Go has %v)", what, f.Name, names(gofs))
			continue
		}
		if g.optional == f.Required {
			t.Errorf("%s.%s: schema required=%v, Go omitempty=%v; want required exactly when not omitempty", what, f.Name, f.Required, g.optional)
		}
		if g.typ != f.Type {
			t.Errorf("%s.%s: schema type %q, Go type %q", what, f.Name, f.Type, g.typ)
		}
	}
	for _, g := range gofs {
		if !seen[g.name] {
			t.Errorf("%s: Go field %q (%s) is missing from the schema", what, g.name, g.typ)
		}
	}
}

func names(fs []goField) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name
	}
	return out
}

func TestSchemaConstants(t *testing.T) {
	s := loadSchema(t)
	if s.Proto != protocol.ProtoVersion {
		t.Errorf("proto %d, want %d", s.Proto, protocol.ProtoVersion)
	}
	if s.Subprotocol != auth.Subprotocol || s.SubprotocolBearer != auth.SubprotocolBearer {
		t.Errorf("subprotocols %q, %q; want %q, %q", s.Subprotocol, s.SubprotocolBearer, auth.Subprotocol, auth.SubprotocolBearer)
	}
	if s.MaxFrameBytes != protocol.MaxFrameBytes {
		t.Errorf("max_frame_bytes %d, want %d", s.MaxFrameBytes, protocol.MaxFrameBytes)
	}
	var codes []protocol.Code
	for _, c := range s.Codes {
		codes = append(codes, protocol.Code(c.Code))
		if got := protocol.Code(c.Code).Closes(); got != c.Closes {
			t.Errorf("code %s: schema closes=%v, Go Closes()=%v", c.Code, c.Closes, got)
		}
		if c.Doc == "" {
			t.Errorf("code %s has no doc", c.Code)
		}
	}
	if !slices.Equal(codes, protocol.Codes()) {
		t.Errorf("codes %v, want %v (protocol.Codes, in order)", codes, protocol.Codes())
	}
}

// clientFrames maps each client frame type to its Go type.
var clientFrames = map[string]protocol.ClientFrame{
	protocol.TypeSubscribe: protocol.Subscribe{},
	protocol.TypeInject:    protocol.Inject{},
	protocol.TypeCancel:    protocol.Cancel{},
	protocol.TypeApprove:   protocol.Approve{},
	protocol.TypeDeny:      protocol.Deny{},
	protocol.TypeSetModel:  protocol.SetModel{},
	protocol.TypeSetPolicy: protocol.SetPolicy{},
}

// sample returns a valid value of a schema field for a frame the parser accepts.
func sample(f schemaField) any {
	switch f.Type {
	case "string":
		if f.Name == "spec" {
			return protocol.ModelSpecScripted
		}
		return "x"
	case "integer":
		return 1
	case "boolean":
		return true
	case "string[]":
		return []string{"echo"}
	}
	return map[string]any{}
}

func TestSchemaClientFrames(t *testing.T) {
	s := loadSchema(t)
	var types []string
	for _, fr := range s.ClientFrames {
		types = append(types, fr.Type)
	}
	if !slices.Equal(types, protocol.ClientTypes()) {
		t.Fatalf("client frames %v, want %v (protocol.ClientTypes, in order)", types, protocol.ClientTypes())
	}
	var common []string
	for _, f := range s.ClientFrameFields {
		common = append(common, f.Name)
		if !commonFields[f.Name] {
			t.Errorf("schema field %q of every client frame is not one the parser reads apart (%v)", f.Name, commonFields)
		}
	}
	if len(common) != len(commonFields) {
		t.Errorf("schema fields of every client frame %v, want %v", common, commonFields)
	}
	for _, fr := range s.ClientFrames {
		t.Run(fr.Type, func(t *testing.T) {
			goType := clientFrames[fr.Type]
			if goType.FrameType() != fr.Type {
				t.Fatalf("Go type %T has frame type %q", goType, goType.FrameType())
			}
			fields := append(slices.Clone(s.ClientFrameFields), fr.Fields...)
			compareFields(t, fr.Type, fr.Fields, reflectFields(t, goType))
			// The order field of a whole frame comes back from ParseOrdered.
			withOrder, _ := json.Marshal(map[string]any{"type": fr.Type, protocol.FieldOrder: 7, "from_seq": 0, "text": "x", "wake": true, "call_id": "c", "role": "main", "spec": "scripted", "patterns": []string{}})
			if _, order, err := protocol.ParseOrdered(withOrder); err != nil || order != 7 {
				t.Errorf("%s: ParseOrdered(%s) = order %d, %v; want 7", fr.Type, withOrder, order, err)
			}
			// The client_id of a control frame comes back from ParseMeta; on subscribe it is
			// an unknown field, ignored.
			withID, _ := json.Marshal(map[string]any{"type": fr.Type, protocol.FieldClientID: "k-1", "from_seq": 0, "text": "x", "wake": true, "call_id": "c", "role": "main", "spec": "scripted", "patterns": []string{}})
			wantID := "k-1"
			if fr.Type == protocol.TypeSubscribe {
				wantID = ""
			}
			if _, meta, err := protocol.ParseMeta(withID); err != nil || meta.ClientID != wantID {
				t.Errorf("%s: ParseMeta(%s) = client_id %q, %v; want %q", fr.Type, withID, meta.ClientID, err, wantID)
			}

			// The parser agrees: the whole frame (common fields included) parses, and so
			// does one without its optional fields; one without a required field does not.
			full := map[string]any{"type": fr.Type}
			for _, f := range fields {
				full[f.Name] = sample(f)
			}
			parse(t, full, nil)
			minimal := map[string]any{"type": fr.Type}
			for _, f := range fields {
				if f.Required {
					minimal[f.Name] = sample(f)
				}
			}
			parse(t, minimal, nil)
			for _, f := range fields {
				if !f.Required {
					continue
				}
				without := maps(full)
				delete(without, f.Name)
				parse(t, without, protocol.ErrBadFrame)
			}
		})
	}
}

func maps(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func parse(t *testing.T, frame map[string]any, want error) {
	t.Helper()
	b, err := json.Marshal(frame)
	if err != nil {
		t.Fatal(err)
	}
	_, err = protocol.Parse(b)
	if (want == nil) != (err == nil) || (want != nil && !errors.Is(err, want)) {
		t.Errorf("Parse(%s) = %v, want %v", b, err, want)
	}
}

func TestSchemaServerFrames(t *testing.T) {
	s := loadSchema(t)
	goFrames := map[string]protocol.ServerFrame{
		protocol.TypeHello:           protocol.NewHello("s1", 3, "e1").WithRole(protocol.RoleDriver),
		protocol.TypeReplayTruncated: protocol.NewReplayTruncated(0, 5),
		protocol.TypeError:           protocol.NewError(protocol.CodeBadFrame, "m"),
	}
	var types []string
	for _, fr := range s.ServerFrames {
		types = append(types, fr.Type)
	}
	if want := []string{protocol.TypeHello, protocol.TypeReplayTruncated, protocol.TypeError}; !slices.Equal(types, want) {
		t.Fatalf("server frames %v, want %v", types, want)
	}
	for _, fr := range s.ServerFrames {
		goFrame := goFrames[fr.Type]
		compareFields(t, fr.Type, fr.Fields, reflectFields(t, goFrame))
		// The wire form carries exactly the schema's keys and "type".
		var wire map[string]any
		if err := json.Unmarshal(protocol.Marshal(goFrame), &wire); err != nil {
			t.Fatal(err)
		}
		want := []string{"type"}
		for _, f := range fr.Fields {
			want = append(want, f.Name)
		}
		var got []string
		for k := range wire {
			got = append(got, k)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s on the wire has keys %v, want %v", fr.Type, got, want)
		}
		for _, f := range fr.Fields {
			if f.Enum != "" && f.Enum != "Code" && s.Enums[f.Enum] == nil {
				t.Errorf("%s.%s: unknown enum %q", fr.Type, f.Name, f.Enum)
			}
		}
	}
}

func TestSchemaEnvelope(t *testing.T) {
	s := loadSchema(t)
	var fs []goField
	rt := reflect.TypeOf(sessionlog.Event{})
	for i := range rt.NumField() { // "type" is an envelope field here, not a frame key
		f := rt.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" { // stored with the item, never on the wire (Event.Stamp)
			continue
		}
		fs = append(fs, goField{name: name, optional: strings.Contains(opts, "omitempty"), typ: reflectType(t, f.Type)})
	}
	compareFields(t, "envelope", s.Envelope, fs)
}

// eventSource is the file the runtime's payload types are declared in. They are
// unexported, so the test reads them from the source.
var eventSource = filepath.Join("..", "agent", "events.go")

// devProfileFields are the payload fields the dev profile ("Event payload fields that
// clients rely on") promises; the schema must hold each.
var devProfileFields = map[string][]string{
	"session/created":    nil,
	"user/message":       {"text"},
	"context/injected":   {"text"},
	"turn/start":         {"turn_id"},
	"turn/end":           {"turn_id", "status", "reason"},
	"assistant/chunk":    {"text"},
	"tool/call":          {"id", "name", "args"},
	"tool/result":        {"call_id", "result", "error"},
	"approval/requested": {"call_id", "name", "args"},
	"approval/resolved":  {"call_id", "verdict", "reason"},
	"policy/updated":     {"patterns"},
}

// goSource is what the test reads from events.go: the string constants and the struct
// types, with their JSON fields.
type goSource struct {
	consts  map[string]string    // constant name → value
	structs map[string][]goField // type name → fields
}

func readEvents(t *testing.T) goSource {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), eventSource, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	src := goSource{consts: map[string]string{}, structs: map[string][]goField{}}
	for _, decl := range file.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range gd.Specs {
			switch sp := spec.(type) {
			case *ast.ValueSpec:
				for i, n := range sp.Names {
					if i < len(sp.Values) {
						if lit, ok := sp.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							src.consts[n.Name] = v
						}
					}
				}
			case *ast.TypeSpec:
				st, ok := sp.Type.(*ast.StructType)
				if !ok {
					continue
				}
				var fs []goField
				for _, f := range st.Fields.List {
					if f.Tag == nil {
						continue
					}
					tag, _ := strconv.Unquote(f.Tag.Value)
					name, opts, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
					fs = append(fs, goField{name: name, optional: strings.Contains(opts, "omitempty"), typ: astType(t, f.Type)})
				}
				src.structs[sp.Name.Name] = fs
			}
		}
	}
	return src
}

func astType(t *testing.T, e ast.Expr) string {
	t.Helper()
	switch x := e.(type) {
	case *ast.StarExpr:
		return astType(t, x.X)
	case *ast.Ident:
		switch x.Name {
		case "string":
			return "string"
		case "bool":
			return "boolean"
		case "int", "int64", "int32":
			return "integer"
		}
		return exported(x.Name) // a struct of this file: the schema's object type
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok && id.Name == "json" && x.Sel.Name == "RawMessage" {
			return "json"
		}
	case *ast.ArrayType:
		if id, ok := x.Elt.(*ast.Ident); ok && id.Name == "string" && x.Len == nil {
			return "string[]"
		}
	}
	t.Fatalf("%s: field type %T has no schema type", eventSource, e)
	return ""
}

func exported(name string) string {
	r := []rune(name)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}

func unexported(name string) string {
	r := []rune(name)
	r[0] = unicode.ToLower(r[0])
	return string(r)
}

func TestSchemaEvents(t *testing.T) {
	s := loadSchema(t)
	src := readEvents(t)

	// Every event type the runtime declares (TypeUserMessage = "user/message", …) and
	// session/created, each once; its payload is the struct named after the constant
	// (TypeUserMessage → userMessage).
	want := map[string]string{sessionlog.TypeSessionCreated: ""}
	for name, v := range src.consts {
		if rest, ok := strings.CutPrefix(name, "Type"); ok {
			want[v] = unexported(rest)
		}
	}
	got := map[string]bool{}
	for _, ev := range s.Events {
		if got[ev.Type] {
			t.Errorf("event %s listed twice", ev.Type)
		}
		got[ev.Type] = true
		goStruct, ok := want[ev.Type]
		if !ok {
			t.Errorf("schema event %s is not declared in %s", ev.Type, eventSource)
			continue
		}
		var fs []goField
		if goStruct != "" {
			if fs, ok = src.structs[goStruct]; !ok {
				t.Errorf("event %s: no struct %s in %s", ev.Type, goStruct, eventSource)
				continue
			}
		}
		compareFields(t, ev.Type, ev.Fields, fs)
		for _, f := range ev.Fields {
			if tf, ok := s.Types[f.Type]; ok {
				gs, ok := src.structs[unexported(f.Type)]
				if !ok {
					gs, ok = src.structs[f.Type]
				}
				if !ok {
					t.Errorf("%s.%s: type %s has no struct in %s", ev.Type, f.Name, f.Type, eventSource)
					continue
				}
				compareFields(t, ev.Type+"."+f.Name, tf, gs)
			}
			if f.Enum != "" && s.Enums[f.Enum] == nil {
				t.Errorf("%s.%s: unknown enum %q", ev.Type, f.Name, f.Enum)
			}
		}
	}
	for typ := range want {
		if !got[typ] {
			t.Errorf("event %s (%s) is missing from the schema", typ, eventSource)
		}
	}
	for typ, fields := range devProfileFields {
		for _, name := range fields {
			if !slices.ContainsFunc(s.Events, func(ev schemaFrame) bool {
				return ev.Type == typ && slices.ContainsFunc(ev.Fields, func(f schemaField) bool { return f.Name == name })
			}) {
				t.Errorf("dev profile field %s.%s is missing from the schema", typ, name)
			}
		}
	}

	// The enums are the runtime's constants: Status* and Verdict*.
	for enum, prefix := range map[string]string{"TurnStatus": "Status", "Verdict": "Verdict"} {
		var consts []string
		for name, v := range src.consts {
			if strings.HasPrefix(name, prefix) {
				consts = append(consts, v)
			}
		}
		have := slices.Clone(s.Enums[enum])
		slices.Sort(consts)
		slices.Sort(have)
		if !slices.Equal(have, consts) {
			t.Errorf("enum %s %v, want %v (%s* in %s)", enum, have, consts, prefix, eventSource)
		}
	}
}
