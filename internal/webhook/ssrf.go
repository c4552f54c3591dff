package webhook

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Addresses is what a receiver's address may be. The zero value is AWS's rule: only
// public unicast addresses, over https. Loopback (`terret dev`) also admits loopback
// addresses, over http or https.
type Addresses struct {
	Loopback bool
}

// refusedPrefixes are the ranges no receiver may be in besides what netip's own
// predicates (private, loopback, link-local, multicast, unspecified) cover: shared
// address space, IETF protocol assignments, documentation and benchmarking nets,
// reserved and broadcast space, and the IPv6 translation prefixes that embed an IPv4
// address (which could be a private one).
var refusedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("100::/64"),
}

// CheckIP says why a receiver may not be at ip, or nil.
func (a Addresses) CheckIP(ip netip.Addr) error {
	ip = ip.Unmap()
	if ip.IsLoopback() {
		if a.Loopback {
			return nil
		}
		return fmt.Errorf("%w: %s is a loopback address", ErrRefused, ip)
	}
	switch {
	case !ip.IsValid():
		return fmt.Errorf("%w: not an IP address", ErrRefused)
	case ip.IsPrivate():
		return fmt.Errorf("%w: %s is a private address", ErrRefused, ip)
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return fmt.Errorf("%w: %s is a link-local address", ErrRefused, ip)
	case ip.IsUnspecified(), ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return fmt.Errorf("%w: %s is not a unicast address", ErrRefused, ip)
	}
	for _, p := range refusedPrefixes {
		if p.Contains(ip) {
			return fmt.Errorf("%w: %s is in the reserved range %s", ErrRefused, ip, p)
		}
	}
	return nil
}

// CheckURL says why raw is not a receiver's URL under a, or nil: an absolute URL
// without credentials, https (http only to a loopback host when a admits loopback),
// and a host that is not an address a refuses. A host name is checked again at each
// dial (Client), where what it resolves to is known.
func (a Addresses) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("%w: want an absolute https URL", ErrBadURL)
	}
	if u.User != nil {
		return fmt.Errorf("%w: must not carry credentials: the signature authenticates", ErrBadURL)
	}
	if u.Fragment != "" {
		return fmt.Errorf("%w: must not have a fragment", ErrBadURL)
	}
	host := strings.TrimSuffix(u.Hostname(), ".") // "localhost." is localhost
	ip, ipErr := netip.ParseAddr(strings.Trim(host, "[]"))
	loopbackHost := (ipErr == nil && ip.Unmap().IsLoopback()) || strings.EqualFold(host, "localhost")
	switch u.Scheme {
	case "https":
	case "http":
		if !a.Loopback || !loopbackHost {
			if a.Loopback {
				return fmt.Errorf("%w: http only to a loopback host (127.0.0.1, ::1, localhost); https elsewhere", ErrBadURL)
			}
			return fmt.Errorf("%w: must be https", ErrBadURL)
		}
	default:
		return fmt.Errorf("%w: must be https", ErrBadURL)
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		if !a.Loopback {
			return fmt.Errorf("%w: %s is a loopback host", ErrRefused, host)
		}
		return nil
	}
	if ipErr == nil {
		return a.CheckIP(ip)
	}
	return nil
}

// control refuses, at dial time, a connection to an address a refuses: the address
// is the one DNS answered for this very dial, so a name that resolves to a public
// address when checked and to a private one later (DNS rebinding) is still refused.
func (a Addresses) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return a.CheckIP(ap.Addr())
}

// Client returns the HTTP client attempts are sent with: every dial checked by a
// (Dialer.Control), no proxy (a proxy would dial for us, unchecked), no redirect
// followed (a 3xx is a failed attempt), each attempt bounded by timeout.
func (a Addresses) Client(timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout, Control: a.control}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       60 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// dialContext is for tests: it dials as Client does.
func (a Addresses) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second, Control: a.control}
	return d.DialContext(ctx, network, addr)
}
