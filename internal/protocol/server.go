package protocol

import "encoding/json"

// ProtoVersion is the protocol version announced in hello.proto.
const ProtoVersion = 1

// Server → client protocol frame types.
const (
	TypeHello           = "hello"
	TypeReplayTruncated = "replay_truncated"
	TypeError           = "error"
)

// Frame is any protocol frame defined by this package: a [ServerFrame] or a
// [ClientFrame]. The interface is sealed; only this package implements it.
type Frame interface {
	// FrameType returns the frame's wire "type", e.g. "hello" or "inject".
	FrameType() string
	isFrame()
}

// ServerFrame is a protocol frame the server sends: [Hello],
// [ReplayTruncated] or [Error]. Protocol frames never carry a "seq" key; that
// key is what tells a client a frame is a session event instead.
type ServerFrame interface {
	Frame
	isServerFrame()
}

// Hello is sent once on connect, before anything else.
//
// Its JSON form is {"type":"hello","proto":1,"session_id":...,"last_seq":...,"epoch":...}.
// Encoding always writes "type":"hello" and "proto":1 regardless of the Type
// and Proto fields, which exist so that clients decoding a hello can inspect
// them; build server frames with [NewHello].
type Hello struct {
	Type      string `json:"type"`
	Proto     int    `json:"proto"`
	SessionID string `json:"session_id"`
	// LastSeq is the highest seq in the session log at connect time (≥ 0).
	LastSeq int64 `json:"last_seq"`
	// Epoch names the log: the same for its whole life, new when the session is reset,
	// or deleted and created again (additive; omitted when unknown). A client that
	// stored a cursor under another epoch must start over from seq 0.
	Epoch string `json:"epoch,omitempty"`
	// Role is what the connection's token allows: RoleDriver or RoleObserver
	// (additive; docs/protocol.md, "Roles").
	Role string `json:"role,omitempty"`
}

// NewHello returns the hello frame for session agentID whose log tip is lastSeq
// and whose epoch is epoch.
func NewHello(agentID string, lastSeq int64, epoch string) Hello {
	return Hello{Type: TypeHello, Proto: ProtoVersion, SessionID: agentID, LastSeq: lastSeq, Epoch: epoch}
}

// Roles a hello names (Hello.Role; docs/protocol.md, "Roles").
const (
	RoleDriver   = "driver"
	RoleObserver = "observer"
)

// WithRole returns h naming role, what the connection's token allows.
func (h Hello) WithRole(role string) Hello {
	h.Role = role
	return h
}

// FrameType returns "hello".
func (Hello) FrameType() string { return TypeHello }
func (Hello) isFrame()          {}
func (Hello) isServerFrame()    {}

// MarshalJSON encodes h with the canonical type and protocol version.
func (h Hello) MarshalJSON() ([]byte, error) {
	type wire Hello
	w := wire(h)
	w.Type, w.Proto = TypeHello, ProtoVersion
	return json.Marshal(w)
}

// ReplayTruncated is sent when a subscribe reached further back than the
// server's replay limit, before the first event of the replayed window.
// The client is missing every seq in [RequestedFromSeq, FromSeq).
//
// Its JSON form is {"type":"replay_truncated","requested_from_seq":...,"from_seq":...};
// encoding always writes the canonical type. Build it with [NewReplayTruncated].
type ReplayTruncated struct {
	Type string `json:"type"`
	// RequestedFromSeq is the from_seq the client asked for.
	RequestedFromSeq int64 `json:"requested_from_seq"`
	// FromSeq is the seq the replay actually begins at.
	FromSeq int64 `json:"from_seq"`
}

// NewReplayTruncated returns the replay_truncated frame for a subscribe that
// asked for requestedFromSeq but is replayed from fromSeq.
func NewReplayTruncated(requestedFromSeq, fromSeq int64) ReplayTruncated {
	return ReplayTruncated{Type: TypeReplayTruncated, RequestedFromSeq: requestedFromSeq, FromSeq: fromSeq}
}

// FrameType returns "replay_truncated".
func (ReplayTruncated) FrameType() string { return TypeReplayTruncated }
func (ReplayTruncated) isFrame()          {}
func (ReplayTruncated) isServerFrame()    {}

// MarshalJSON encodes r with the canonical type.
func (r ReplayTruncated) MarshalJSON() ([]byte, error) {
	type wire ReplayTruncated
	w := wire(r)
	w.Type = TypeReplayTruncated
	return json.Marshal(w)
}

// Error is the protocol error frame: {"type":"error","code":...,"message":...}.
// Both code and message are always present on the wire. Whether the
// connection closes after it is decided by the code; see [Code.Closes].
// Encoding always writes the canonical type. Build it with [NewError].
type Error struct {
	Type    string `json:"type"`
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// NewError returns an error frame with the given code and client-facing message.
func NewError(code Code, msg string) Error {
	return Error{Type: TypeError, Code: code, Message: msg}
}

// FrameType returns "error".
func (Error) FrameType() string { return TypeError }
func (Error) isFrame()          {}
func (Error) isServerFrame()    {}

// MarshalJSON encodes e with the canonical type.
func (e Error) MarshalJSON() ([]byte, error) {
	type wire Error
	w := wire(e)
	w.Type = TypeError
	return json.Marshal(w)
}

// Code is the code of an error frame.
type Code string

// The error codes of the spec.
const (
	// CodeUnauthorized: bad, missing or revoked token; the connection closes.
	CodeUnauthorized Code = "unauthorized"
	// CodeSuperseded: a newer connection took over this agent; the connection closes.
	CodeSuperseded Code = "superseded"
	// CodeLagged: the client's outbound queue overflowed; the connection closes.
	CodeLagged Code = "lagged"
	// CodeBadFrame: unparseable or invalid client frame; the connection stays open.
	CodeBadFrame Code = "bad_frame"
	// CodeNotRunning: cancel arrived while no turn was running; the connection stays open.
	CodeNotRunning Code = "not_running"
	// CodeStaleCall: approve/deny named a call with no standing approval
	// request; nothing is appended and the connection stays open.
	CodeStaleCall Code = "stale_call"
	// CodeStale: a frame's expect_seq precondition failed (FieldExpectSeq): the log
	// moved on in a way that matters to the frame; the message names the conflicting
	// seq. Nothing is appended and the connection stays open.
	CodeStale Code = "stale"
	// CodeUnsupported: the frame needs a plugin this deployment does not
	// mount; the connection stays open.
	CodeUnsupported Code = "unsupported"
	// CodeInternal: the server hit an unexpected error serving this
	// connection; the connection closes.
	CodeInternal Code = "internal"
	// CodeForbidden: a control frame on an observer connection, whose token may only
	// read (docs/protocol.md, "Roles"); nothing is appended and the connection stays
	// open. An addition to the v1 set (not in Codes).
	CodeForbidden Code = "forbidden"
)

// Codes lists every code of the spec, in spec order.
func Codes() []Code {
	return []Code{
		CodeUnauthorized, CodeSuperseded, CodeLagged, CodeBadFrame,
		CodeNotRunning, CodeStaleCall, CodeUnsupported, CodeInternal, CodeStale,
	}
}

// Closes reports whether the spec closes the connection after an error frame
// with this code: true for unauthorized, superseded, lagged and internal;
// false for bad_frame, not_running, stale_call, unsupported, and for any
// string that is not a code of the spec.
func (c Code) Closes() bool {
	switch c {
	case CodeUnauthorized, CodeSuperseded, CodeLagged, CodeInternal:
		return true
	}
	return false
}

// Valid reports whether c is one of the codes of the spec.
func (c Code) Valid() bool {
	switch c {
	case CodeUnauthorized, CodeSuperseded, CodeLagged, CodeBadFrame,
		CodeNotRunning, CodeStaleCall, CodeUnsupported, CodeInternal, CodeStale, CodeForbidden:
		return true
	}
	return false
}

// fallbackFrame is what Marshal returns if encoding ever fails; it cannot
// happen for the frames of this package, but Marshal must not panic.
var fallbackFrame = []byte(`{"type":"error","code":"internal","message":"internal error"}`)

// Marshal encodes f as the JSON text of one WebSocket frame. Protocol frames
// never carry a "seq" key. Marshal never fails and never panics: the frames of
// this package always encode, and if encoding ever failed Marshal would return
// an internal error frame instead. Marshal(nil) returns nil. Invalid UTF-8 in
// string fields is replaced by U+FFFD, as encoding/json does.
func Marshal(f Frame) []byte {
	if f == nil {
		return nil
	}
	b, err := json.Marshal(f)
	if err != nil {
		return append([]byte(nil), fallbackFrame...)
	}
	return b
}
