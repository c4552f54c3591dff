package main

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
)

// devTokenPath is the page's token endpoint (webui), the one door of `terret dev` that
// hands out credentials.
const devTokenPath = "/dev/token"

// loopbackAddr reports whether a listen address (HOST:PORT) can be reached only from
// this machine: a loopback IP or "localhost". An empty host or 0.0.0.0/:: listens on
// every interface; any other name may resolve to a public address.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// devTokenGuard stands in front of the page and lets a /dev/token request through only
// when its Host header names the gateway exactly — an IP literal (or localhost) and the
// bound port, so that a rebound DNS name of another site is refused — and its Origin,
// when a browser sends one, is exactly http://HOST:PORT of that Host (scheme, host and
// port). With loopbackOnly the Host must also be a loopback address or localhost.
// Every other path passes unchanged. port is set once the gateway is bound.
type devTokenGuard struct {
	next         http.Handler
	port         atomic.Pointer[string]
	loopbackOnly bool
}

func (g *devTokenGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == devTokenPath && !g.allowed(r) {
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	g.next.ServeHTTP(w, r)
}

func (g *devTokenGuard) allowed(r *http.Request) bool {
	port := g.port.Load()
	if port == nil {
		return false
	}
	host, p, err := net.SplitHostPort(r.Host)
	if err != nil || p != *port {
		return false
	}
	name := strings.Trim(host, "[]")
	ip := net.ParseIP(name)
	switch {
	case strings.EqualFold(name, "localhost"):
	case ip == nil:
		return false // a DNS name: possibly another site rebound to this address
	case g.loopbackOnly && !ip.IsLoopback():
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && !strings.EqualFold(o, "http://"+r.Host) {
		return false
	}
	return true
}
