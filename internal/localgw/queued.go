package localgw

// Queued reports the bytes posted to connection id and not yet written to its socket
// (its outbox, the frame being written included): more than zero while a post waits
// for a client that does not read. An unknown or closed connection has none. For
// measurements (cmd/bench tells a reader that stopped from a stack that is slow).
func (g *Gateway) Queued(id string) int {
	c := g.lookup(id)
	if c == nil {
		return 0
	}
	return c.queued()
}
