package connections

import (
	crand "crypto/rand"
	"encoding/hex"
	"strings"
)

// HolderKind says what becomes of a lease holder's work should the holder die.
type HolderKind string

// Holder kinds.
const (
	// HolderRetried runs in an asynchronous deliver invocation, which Lambda retries if
	// it dies: its retry takes the expired lease and sends from the cursor, so a Pending
	// mark left with it needs no watcher.
	HolderRetried HolderKind = "retried"
	// HolderOnce runs where nothing retries it: the stream consumer, the message
	// function, the appender's fast path.
	HolderOnce HolderKind = "once"
)

// Holder is a sender lease holder: a unique id and its kind.
type Holder struct {
	ID   string
	Kind HolderKind
}

// NewHolder returns a holder of kind with a fresh random id. The id still starts with
// "r" for HolderRetried and "x" otherwise, the encoding of the kind before the
// lease_kind attribute: during a rolling deploy an older reader derives the kind from
// the prefix, and kindOf does so for a record an older writer leased.
func NewHolder(kind HolderKind) Holder {
	b := make([]byte, 8)
	_, _ = crand.Read(b)
	prefix := "x"
	if kind == HolderRetried {
		prefix = "r"
	}
	return Holder{ID: prefix + hex.EncodeToString(b), Kind: kind}
}

// kindOf returns the kind of a record's lease: its lease_kind attribute, or, for a
// lease written before that attribute existed, the kind its holder id's prefix encodes.
func kindOf(lease, kind string) HolderKind {
	switch {
	case lease == "":
		return ""
	case kind != "":
		return HolderKind(kind)
	case strings.HasPrefix(lease, "r"):
		return HolderRetried
	default:
		return HolderOnce
	}
}
