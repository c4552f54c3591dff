package protocol

import (
	"bytes"
	_ "embed" // the schema file
)

// schemaV1 is schema/v1.json: the protocol as data.
//
//go:embed schema/v1.json
var schemaV1 []byte

// SchemaV1 returns schema/v1.json, the machine-readable description of the protocol:
// its client and server frames with their fields, the error codes and whether each
// closes the connection, the event envelope and the durable event payloads. It is the
// one source the TypeScript client (client-ts/) generates its types from; this
// package's tests check it against the Go frame types and internal/agent's payload
// types, so the two clients and the server cannot drift apart. The caller owns the
// returned copy.
func SchemaV1() []byte { return bytes.Clone(schemaV1) }
