package emulator

// IdleURLs returns the rie invoke endpoints of function name's idle environments, so a
// test can call one as a stranger would.
func IdleURLs(em *Emulator, name string) []string {
	p := em.pools[name]
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, e := range p.idle {
		out = append(out, e.url)
	}
	return out
}
