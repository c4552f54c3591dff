package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Event is one session event: the durable log envelope, as the server sent it.
type Event struct {
	ID        string          `json:"id"`
	SessionID string          `json:"session_id"`
	Seq       int64           `json:"seq"`
	At        time.Time       `json:"at"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
	// Raw is the whole envelope exactly as received (one JSON object, no newline).
	Raw []byte `json:"-"`
}

// Hello is the server's first frame on a connection.
type Hello struct {
	Proto     int
	SessionID string
	// LastSeq is the highest seq in the session log when the connection opened.
	LastSeq int64
	// Epoch names the log: the same for its whole life, new after the session was
	// reset, or deleted and created again ("" from a server that does not send it).
	Epoch string
	// Role is what the connection's token allows: RoleDriver or RoleObserver ("" from
	// a server that does not send it: a driver). An observer reads the log and sends no
	// control frame (each is answered ErrForbidden).
	Role string
}

// Roles a hello names (Hello.Role).
const (
	RoleDriver   = "driver"
	RoleObserver = "observer"
)

// Code is the code of a server error frame.
type Code string

// The error codes of the protocol.
const (
	CodeUnauthorized Code = "unauthorized" // bad, missing or revoked token; closes
	CodeSuperseded   Code = "superseded"   // a newer connection took over the agent; closes
	CodeLagged       Code = "lagged"       // the client read too slowly; closes
	CodeBadFrame     Code = "bad_frame"    // invalid client frame; stays open
	CodeNotRunning   Code = "not_running"  // cancel with no turn running; stays open
	CodeStaleCall    Code = "stale_call"   // approve/deny of no standing request; stays open
	CodeUnsupported  Code = "unsupported"  // the deployment does not mount the plugin; stays open
	CodeInternal     Code = "internal"     // the server failed serving the connection; closes
	// CodeStale: the frame's expect_seq precondition failed — the agent moved on after
	// the seq the frame was sent for (the message names the seq); nothing was applied;
	// stays open.
	CodeStale     Code = "stale"
	CodeForbidden Code = "forbidden" // a control frame on an observer connection; stays open
)

// Closes reports whether the server closes the connection after an error with this
// code: true for unauthorized, superseded, lagged and internal.
func (c Code) Closes() bool {
	switch c {
	case CodeUnauthorized, CodeSuperseded, CodeLagged, CodeInternal:
		return true
	}
	return false
}

// Sentinels matched, via errors.Is, by a *ProtocolError of the same code.
var (
	ErrUnauthorized = errors.New("client: unauthorized")
	ErrSuperseded   = errors.New("client: superseded")
	ErrLagged       = errors.New("client: lagged")
	ErrBadFrame     = errors.New("client: bad frame")
	ErrNotRunning   = errors.New("client: not running")
	ErrStaleCall    = errors.New("client: stale call")
	ErrUnsupported  = errors.New("client: unsupported")
	ErrInternal     = errors.New("client: internal server error")
	// ErrStale: a frame sent with expect_seq (InjectExpect, CancelExpect, …) was not
	// applied because the agent moved on after that seq: look again.
	ErrStale = errors.New("client: stale: the agent moved on")
	// ErrForbidden: a control frame (Inject, Cancel, Approve, Deny, SetModel,
	// SetPolicy) sent with an observer token; nothing was applied.
	ErrForbidden = errors.New("client: forbidden")
)

// Errors of the client itself.
var (
	// ErrClosed is returned by methods of a client that has stopped; when it stopped
	// for a reason (unauthorized, superseded, …) that error is wrapped too.
	ErrClosed = errors.New("client: closed")
	// ErrBadURL is returned by Dial, AgentURL and AgentID for a URL that is not an
	// agent's socket URL.
	ErrBadURL = errors.New("client: bad url")
	// ErrProtocol reports a server that broke the protocol: a first frame other than
	// hello, an undecodable frame, a gap in seq. Dial returns it; later the client
	// reconnects through it (seen in OnStatus).
	ErrProtocol = errors.New("client: protocol violation")
)

var codeErrors = map[Code]error{
	CodeUnauthorized: ErrUnauthorized,
	CodeSuperseded:   ErrSuperseded,
	CodeLagged:       ErrLagged,
	CodeBadFrame:     ErrBadFrame,
	CodeNotRunning:   ErrNotRunning,
	CodeStaleCall:    ErrStaleCall,
	CodeUnsupported:  ErrUnsupported,
	CodeInternal:     ErrInternal,
	CodeStale:        ErrStale,
	CodeForbidden:    ErrForbidden,
}

// ProtocolError is an error frame the server sent. errors.Is matches it against the
// sentinel of its code (ErrUnauthorized, ErrStaleCall, …).
type ProtocolError struct {
	Code    Code
	Message string // the server's text, for people
}

// Error returns "code: message".
func (e *ProtocolError) Error() string {
	if e.Message == "" || e.Message == string(e.Code) {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Unwrap returns the sentinel of e's code (nil for a code this client does not know).
func (e *ProtocolError) Unwrap() error { return codeErrors[e.Code] }

// ReplayTruncated says the server capped a replay at its replay limit: the caller will
// never receive the events [Requested, From) over this subscription; the next event
// it receives is From. The socket does not resend them; read them out of band if needed.
type ReplayTruncated struct {
	Requested int64 // the first seq the caller had not yet received
	From      int64 // the seq the stream resumes at
}

// Error describes the hole.
func (r *ReplayTruncated) Error() string {
	return fmt.Sprintf("client: replay truncated: events %d to %d are not replayed", r.Requested, r.From-1)
}

// Notice is what the server says besides events that does not end the client, passed
// to Options.OnNotice in stream order with the events: a *ReplayTruncated, or a
// *ProtocolError whose code keeps the connection open (bad_frame, not_running,
// stale_call, unsupported, or a code newer than this client).
type Notice interface {
	error
	isNotice()
}

// EpochChanged is the Notice that the session's log is not the one the cursor
// recorded: it was reset, or deleted and created again (hello's epoch changed). The
// client has forgotten the recorded seq and starts over from seq 0; the application
// should drop what it built from the old log. It comes before the new log's first
// event.
type EpochChanged struct {
	Old, New string // the recorded epoch and the log's
}

func (e *EpochChanged) Error() string {
	return fmt.Sprintf("client: the session's log changed (epoch %s, was %s): starting over from seq 0", e.New, e.Old)
}

func (*ProtocolError) isNotice()   {}
func (*ReplayTruncated) isNotice() {}
func (*EpochChanged) isNotice()    {}

// wireFrame decodes any server frame far enough to route it: events have seq,
// protocol frames never do.
type wireFrame struct {
	Type             string `json:"type"`
	Seq              *int64 `json:"seq"`
	Proto            int    `json:"proto"`
	SessionID        string `json:"session_id"`
	LastSeq          int64  `json:"last_seq"`
	Epoch            string `json:"epoch"`
	Role             string `json:"role"`
	Code             Code   `json:"code"`
	Message          string `json:"message"`
	RequestedFromSeq int64  `json:"requested_from_seq"`
	FromSeq          int64  `json:"from_seq"`
}
