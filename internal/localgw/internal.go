package localgw

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
)

// The @connections and Invoke APIs are the gateway's back doors: whoever reaches them
// can post any frame to any socket, close it, or feed the deliver function a forged
// stream batch. They are served apart from the sockets and the page, on their own
// listener, which refuses every request that
//   - comes from another host (the listener is bound to 127.0.0.1 only);
//   - names another Host than the listener's own 127.0.0.1:PORT (DNS rebinding: a page
//     whose name resolves to 127.0.0.1 sends its own name);
//   - carries an Origin header (a browser; the SDK clients never send one);
//   - does not start its path with the gateway's secret, 32 random hex digits drawn at
//     Start, which only the endpoints ManagementEndpoint and LambdaEndpoint carry (no
//     page can read them: they are in no response).
//
// The SDK clients and package invoke keep a base endpoint's path, so the secret rides as the first
// segment of every call without any change to the handlers.

// internalSecretBytes is the secret's entropy: 128 bits.
const internalSecretBytes = 16

func newInternalSecret() string {
	var b [internalSecretBytes]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// internalHostPort is the internal listener's address, always 127.0.0.1:PORT.
func (g *Gateway) internalHostPort() string { return g.iln.Addr().String() }

// internalAPI serves the internal listener: the @connections and Invoke APIs behind
// the checks above. A refused request is answered 403 before its body is read and
// logged without its path (which might hold a near-miss of the secret).
type internalAPI struct{ g *Gateway }

func (a internalAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g := a.g
	segs, ok := splitPath(r.URL.EscapedPath())
	reason := ""
	switch {
	case r.Host != g.internalHostPort():
		reason = "host"
	case r.Header.Get("Origin") != "":
		reason = "origin"
	case !ok || len(segs) == 0 || subtle.ConstantTimeCompare([]byte(segs[0]), []byte(g.secret)) != 1:
		reason = "secret"
	}
	if reason != "" {
		g.log.Warn("internal API request refused", "reason", reason, "method", r.Method, "remote_addr", r.RemoteAddr)
		writeJSONError(w, http.StatusForbidden, "ForbiddenException", "Forbidden")
		return
	}
	segs = segs[1:]
	switch {
	case len(segs) == 3 && segs[0] == g.cfg.Stage && segs[1] == "@connections":
		g.serveManagement(w, r, segs[2])
	case len(segs) == 2 && segs[0] == "@connections":
		g.serveManagement(w, r, segs[1])
	case len(segs) == 4 && segs[0] == "2015-03-31" && segs[1] == "functions" && segs[3] == "invocations":
		if r.Method != http.MethodPost {
			writeJSONError(w, http.StatusMethodNotAllowed, "MethodNotAllowedException", "Invoke needs POST")
			return
		}
		g.serveInvoke(w, r, segs[2])
	default:
		writeJSONError(w, http.StatusNotFound, "NotFoundException", "no such resource")
	}
}

// listenInternal opens the internal listener on loopback.
func listenInternal() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
