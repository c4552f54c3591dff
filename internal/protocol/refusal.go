package protocol

// Refusal returns the error frame sent before the server closes a connection with code
// (one of the codes for which Code.Closes is true): the one wording of each, so that a
// client sees the same text whichever path closed it. For a code that does not close,
// the message is the code itself; callers never send those as refusals.
func Refusal(code Code) Error {
	msg := string(code)
	switch code {
	case CodeUnauthorized:
		msg = "missing, invalid or revoked token"
	case CodeSuperseded:
		msg = "a newer connection took over this agent"
	case CodeLagged:
		msg = "outbound queue overflowed: resubscribe from your last durable seq"
	case CodeInternal:
		msg = "internal error: resubscribe from your last durable seq"
	}
	return NewError(code, msg)
}
