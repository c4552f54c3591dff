package devstack

// Queued reports the bytes posted to connection id and not yet written to its socket
// (localgw.Gateway.Queued).
func (s *Stack) Queued(id string) int { return s.gw.Queued(id) }
