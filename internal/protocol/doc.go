// Package protocol defines the wire frames of the Terret Socket Protocol v1
// (docs/protocol.md) and the strict parser for frames arriving from clients.
//
// # Server → client
//
// The server sends two families of JSON text frames. Session events are the
// durable log envelope serialized as-is and always carry a "seq" key; they are
// not defined here. Protocol frames never carry "seq"; they are [Hello],
// [ReplayTruncated] and [Error], encoded with [Marshal]. Every [Error] carries
// a [Code]; [Code.Closes] says whether the spec closes the connection after it.
//
// # Client → server
//
// Clients may send exactly the closed set of frames named by the spec, with
// the fields of the dev profile ("Client frame fields"):
//
//	subscribe   from_seq (integer ≥ 0), batch (optional boolean; extension)
//	inject      text (string), wake (boolean)
//	cancel      reason (optional string)
//	approve     call_id (non-empty string)
//	deny        call_id (non-empty string), reason (optional string)
//	set_model   role (non-empty string), spec ("provider/model" or "scripted")
//	set_policy  patterns (array of at most 128 strings, each at most 256 characters)
//
// [Parse] turns one client text frame into one of [Subscribe], [Inject],
// [Cancel], [Approve], [Deny], [SetModel] or [SetPolicy] (always as a value,
// never a pointer), or rejects it with a [*BadFrameError] whose Message is
// safe to send to the client in an error frame with code bad_frame.
//
// # Bounds and strictness
//
//   - A frame larger than [MaxFrameBytes] (1 MiB) is rejected before any
//     parsing is attempted.
//   - A frame must be valid UTF-8 and a single valid JSON object.
//   - Field names are case-sensitive: "Type" is not "type".
//   - A top-level field name that occurs twice is rejected (the spec gives no
//     meaning to duplicates, and first-wins and last-wins readers would
//     disagree about such a frame).
//   - Unknown top-level fields are accepted and ignored, so additive changes
//     to the protocol do not break older servers.
//   - Required fields must be present with the right JSON type; a JSON null
//     is a wrong type for a required field. An optional field that is absent
//     or null is treated as absent.
//   - call_id and role must be non-empty strings: an empty call_id can never
//     name a standing approval request (and cannot be a DynamoDB key). text,
//     reason and individual patterns may be empty.
//   - from_seq must be written as a plain JSON integer (no fraction or
//     exponent) in 0..2^63-1.
//   - set_policy is bounded at [MaxPolicyPatterns] patterns of at most
//     [MaxPatternChars] characters (Unicode code points, not bytes) each.
//   - Every frame may carry the optional order field ([FieldOrder]), a positive
//     integer numbering the client's frames on one connection; [ParseOrdered]
//     returns it. [Stamp] carries a frame's receive time and order to the
//     handlers that apply frames in the order the client sent them.
package protocol
