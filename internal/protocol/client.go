package protocol

import (
	"encoding/json"
	"strings"
	"unicode"
)

// Client → server frame types: the closed set of the spec.
const (
	TypeSubscribe = "subscribe"
	TypeInject    = "inject"
	TypeCancel    = "cancel"
	TypeApprove   = "approve"
	TypeDeny      = "deny"
	TypeSetModel  = "set_model"
	TypeSetPolicy = "set_policy"
)

// ClientTypes lists the closed set of client frame types, in spec order.
func ClientTypes() []string {
	return []string{TypeSubscribe, TypeInject, TypeCancel, TypeApprove, TypeDeny, TypeSetModel, TypeSetPolicy}
}

// Bounds on client frames.
const (
	// MaxFrameBytes is the largest client frame accepted, in bytes (1 MiB).
	MaxFrameBytes = 1 << 20
	// MaxPolicyPatterns is the most patterns one set_policy may carry.
	MaxPolicyPatterns = 128
	// MaxPatternChars is the longest a set_policy pattern may be, counted in
	// Unicode code points (characters), not bytes: 256 'é' (512 bytes) fit.
	MaxPatternChars = 256
)

// ModelSpecScripted is the model spec of the scripted local model.
const ModelSpecScripted = "scripted"

// ClientFrame is a frame a client sends: one of [Subscribe], [Inject],
// [Cancel], [Approve], [Deny], [SetModel] or [SetPolicy]. [Parse] returns
// these as values (never pointers), so a type switch uses value cases.
//
// Each type's JSON encoding (json.Marshal or [Marshal]) is the wire form,
// including its "type" key, and parses back to an equal value, provided it
// fits in [MaxFrameBytes]: an encoding may be longer than the frame it was
// parsed from (encoding/json writes "<" as \u003c, for instance), so a
// parsed frame close to the bound may re-encode past it.
type ClientFrame interface {
	Frame
	isClientFrame()
}

// Subscribe asks for replay from FromSeq (inclusive), then the live tail.
// Wire: {"type":"subscribe","from_seq":N}, N an integer ≥ 0, and the optional
// boolean "batch" of the batching extension (docs/protocol.md, "Extension: batched event frames"): with it the
// server may pack consecutive events into one message, newline-separated.
// Batch false encodes without the field, exactly as a v1 subscribe.
type Subscribe struct {
	FromSeq int64 `json:"from_seq"`
	Batch   bool  `json:"batch,omitempty"`
}

// Inject sends Text to the agent. With Wake on an idle agent it starts (or
// resumes) a turn; otherwise the text is queued as a mid-turn steer.
// Wire: {"type":"inject","text":"...","wake":true|false}, both required.
// Text may be empty.
type Inject struct {
	Text string `json:"text"`
	Wake bool   `json:"wake"`
	// ExpectSeq, when set, is the precondition expect_seq (see [FieldExpectSeq]).
	ExpectSeq *int64 `json:"expect_seq,omitempty"`
}

// Cancel asks for a cooperative stop of the running turn.
// Wire: {"type":"cancel"} or {"type":"cancel","reason":"..."}. An absent,
// null or empty reason all parse to Reason == "", meaning "no reason given".
type Cancel struct {
	Reason    string `json:"reason,omitempty"`
	ExpectSeq *int64 `json:"expect_seq,omitempty"`
}

// Approve resolves the parked tool call CallID as approved.
// Wire: {"type":"approve","call_id":"..."}; call_id must be non-empty.
type Approve struct {
	CallID    string `json:"call_id"`
	ExpectSeq *int64 `json:"expect_seq,omitempty"`
}

// Deny resolves the parked tool call CallID as denied.
// Wire: {"type":"deny","call_id":"..."} with an optional "reason"; call_id
// must be non-empty. An absent, null or empty reason parse to Reason == "".
type Deny struct {
	CallID    string `json:"call_id"`
	Reason    string `json:"reason,omitempty"`
	ExpectSeq *int64 `json:"expect_seq,omitempty"`
}

// SetModel repoints model role Role (e.g. "main", "titler") at Spec.
// Wire: {"type":"set_model","role":"...","spec":"..."}. Role must be
// non-empty; Spec must satisfy [ValidModelSpec]. Whether the role exists is
// for the service to decide, not the parser.
type SetModel struct {
	Role string `json:"role"`
	Spec string `json:"spec"`
}

// SetPolicy replaces the agent's tool allow list with Patterns (fnmatch globs).
// Wire: {"type":"set_policy","patterns":[...]}: an array of at most
// [MaxPolicyPatterns] strings, each at most [MaxPatternChars] characters
// (code points, not bytes). An empty array is valid and means no tool is
// allowed. Empty and duplicate patterns are accepted as given. Parse always
// returns a non-nil slice, and encoding a nil slice writes [].
type SetPolicy struct {
	Patterns  []string `json:"patterns"`
	ExpectSeq *int64   `json:"expect_seq,omitempty"`
}

// FieldExpectSeq is the optional precondition of inject, cancel, set_policy, approve
// and deny: the highest seq the client had seen when it decided. The frame is
// applied only if nothing logged after that seq changes what it acts on; otherwise
// it is answered [CodeStale] and nothing is appended. A value above the log's tip is
// bad_frame. Absent (nil): the frame behaves as without the precondition.
const FieldExpectSeq = "expect_seq"

// Expecting returns the expect_seq precondition of f, or nil when f has none (or is
// a frame that takes none).
func Expecting(f ClientFrame) *int64 {
	switch f := f.(type) {
	case Inject:
		return f.ExpectSeq
	case Cancel:
		return f.ExpectSeq
	case Approve:
		return f.ExpectSeq
	case Deny:
		return f.ExpectSeq
	case SetPolicy:
		return f.ExpectSeq
	}
	return nil
}

// FrameType returns "subscribe".
func (Subscribe) FrameType() string { return TypeSubscribe }

// FrameType returns "inject".
func (Inject) FrameType() string { return TypeInject }

// FrameType returns "cancel".
func (Cancel) FrameType() string { return TypeCancel }

// FrameType returns "approve".
func (Approve) FrameType() string { return TypeApprove }

// FrameType returns "deny".
func (Deny) FrameType() string { return TypeDeny }

// FrameType returns "set_model".
func (SetModel) FrameType() string { return TypeSetModel }

// FrameType returns "set_policy".
func (SetPolicy) FrameType() string { return TypeSetPolicy }

func (Subscribe) isFrame()       {}
func (Subscribe) isClientFrame() {}
func (Inject) isFrame()          {}
func (Inject) isClientFrame()    {}
func (Cancel) isFrame()          {}
func (Cancel) isClientFrame()    {}
func (Approve) isFrame()         {}
func (Approve) isClientFrame()   {}
func (Deny) isFrame()            {}
func (Deny) isClientFrame()      {}
func (SetModel) isFrame()        {}
func (SetModel) isClientFrame()  {}
func (SetPolicy) isFrame()       {}
func (SetPolicy) isClientFrame() {}

// withType encodes fields (a struct value) as a JSON object preceded by the
// "type" key.
func withType(frameType string, fields any) ([]byte, error) {
	body, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	head, err := json.Marshal(frameType)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body)+len(head)+10)
	out = append(out, `{"type":`...)
	out = append(out, head...)
	if len(body) > 2 { // body is "{...}" with at least one field
		out = append(out, ',')
	}
	out = append(out, body[1:]...)
	return out, nil
}

// MarshalJSON encodes s in its wire form.
func (s Subscribe) MarshalJSON() ([]byte, error) {
	type wire Subscribe
	return withType(TypeSubscribe, wire(s))
}

// MarshalJSON encodes i in its wire form.
func (i Inject) MarshalJSON() ([]byte, error) {
	type wire Inject
	return withType(TypeInject, wire(i))
}

// MarshalJSON encodes c in its wire form; an empty reason is omitted.
func (c Cancel) MarshalJSON() ([]byte, error) {
	type wire Cancel
	return withType(TypeCancel, wire(c))
}

// MarshalJSON encodes a in its wire form.
func (a Approve) MarshalJSON() ([]byte, error) {
	type wire Approve
	return withType(TypeApprove, wire(a))
}

// MarshalJSON encodes d in its wire form; an empty reason is omitted.
func (d Deny) MarshalJSON() ([]byte, error) {
	type wire Deny
	return withType(TypeDeny, wire(d))
}

// MarshalJSON encodes m in its wire form.
func (m SetModel) MarshalJSON() ([]byte, error) {
	type wire SetModel
	return withType(TypeSetModel, wire(m))
}

// MarshalJSON encodes p in its wire form; a nil Patterns encodes as [].
func (p SetPolicy) MarshalJSON() ([]byte, error) {
	type wire SetPolicy
	w := wire(p)
	if w.Patterns == nil {
		w.Patterns = []string{}
	}
	return withType(TypeSetPolicy, w)
}

// ValidModelSpec reports whether spec is a valid set_model spec: exactly
// "scripted", or "provider/model" where provider is the text before the first
// '/' and model the text after it, both non-empty, and the whole spec holds no
// whitespace or control characters. The model part may itself contain '/'
// (as in "openrouter/meta/llama-3"), but must not be empty.
func ValidModelSpec(spec string) bool {
	return modelSpecProblem(spec) == ""
}

// modelSpecProblem returns "" if spec is valid, otherwise a short
// client-facing description of what is wrong with it.
func modelSpecProblem(spec string) string {
	if spec == ModelSpecScripted {
		return ""
	}
	if spec == "" {
		return `must not be empty (use "provider/model" or "scripted")`
	}
	for _, r := range spec {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return "must not contain whitespace or control characters"
		}
	}
	provider, model, found := strings.Cut(spec, "/")
	switch {
	case !found:
		return `must be "provider/model" or "scripted"`
	case provider == "":
		return `must be "provider/model" with a non-empty provider`
	case model == "":
		return `must be "provider/model" with a non-empty model`
	}
	return ""
}

// FieldOrder is the optional top-level field by which a client numbers the frames it
// sends on one connection: 1, 2, 3, … with no gap, starting again at 1 on every new
// connection. A server that knows it makes frame N take effect after frame N-1 (see
// docs/protocol.md, "Ordering"); a server that does not ignores it, as it ignores
// every unknown field. Every frame type may carry it.
const FieldOrder = "order"
