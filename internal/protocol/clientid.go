package protocol

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// FieldClientID is the optional top-level field of every control frame (all but
// subscribe) by which a client names the frame: the same client_id for the same agent
// within ClientIDWindow is applied once — a repeat appends nothing and draws no error,
// on the same socket, after a reconnect or over HTTP (docs/protocol.md, "Exactly-once
// frames"). The event the frame produced carries it in its payload. On subscribe it is
// an unknown field, ignored.
const FieldClientID = "client_id"

// MaxClientIDChars bounds a client_id, counted in characters (code points).
const MaxClientIDChars = 128

// IdempotencyKeyHeader is the HTTP header that names a frame posted over HTTP: it is
// the frame's client_id.
const IdempotencyKeyHeader = "Idempotency-Key"

// Meta is what a client frame carries besides its own fields.
type Meta struct {
	Order    int64  // FieldOrder; 0: none
	ClientID string // FieldClientID; "": none
}

// ParseMeta is ParseOrdered that also returns the frame's client_id. A client_id that
// is present on a control frame but not a string of 1 to MaxClientIDChars characters
// is a bad_frame (null counts as absent).
func ParseMeta(data []byte) (ClientFrame, Meta, error) {
	return parseMeta(data, MaxFrameBytes)
}

// ValidClientID returns "" if id is a valid client_id, else what is wrong with it.
func ValidClientID(id string) string {
	n := utf8.RuneCountInString(id)
	switch {
	case !utf8.ValidString(id):
		return "must be valid UTF-8"
	case n == 0:
		return "must not be empty"
	case n > MaxClientIDChars:
		return fmt.Sprintf("is %d characters, at most %d allowed", n, MaxClientIDChars)
	}
	return ""
}

// clientIDOf reads the client_id of a parsed control frame from its fields.
func clientIDOf(frame ClientFrame, fields map[string]json.RawMessage) (string, error) {
	if _, ok := frame.(Subscribe); ok {
		return "", nil
	}
	r := fieldReader{frameType: frame.FrameType(), fields: fields}
	id, err := r.str(FieldClientID, true)
	if err != nil {
		return "", err
	}
	if _, present := r.lookup(FieldClientID, true); !present {
		return "", nil
	}
	if p := ValidClientID(id); p != "" {
		return "", badField(frame.FrameType(), FieldClientID, p)
	}
	return id, nil
}
