// Package webui is the web page `terret dev` serves next to the agents' sockets: pick an
// agent, connect with a token (offered as the "terret.bearer.<token>" subprotocol,
// since browsers cannot set Authorization on a WebSocket), chat, watch the session log
// event by event, approve or deny parked calls and cancel turns. The page is static
// files embedded in the binary. Its app.js is built from src/app.ts and the TypeScript
// client (client-ts/, npm run build:page) and committed, so building the binary needs
// no npm; a client-ts test fails when the committed bundle is stale.
package webui

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/terret/terret-ws/internal/auth"
)

//go:embed static
var static embed.FS

// files are the page's static files, at the root of the handler.
var files = func() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err)
	}
	return sub
}()

// DevTokenHeader carries the page key (Options.DevTokenKey) on a dev token request. A
// custom header also turns a cross-site request into one that needs a CORS preflight,
// which is never granted, so another site cannot mint tokens through the visitor's
// browser.
const DevTokenHeader = "X-Terret-Dev"

// KeyFragment is how the page's address carries the page key: http://HOST:PORT/#key=KEY.
// A fragment is never sent to a server nor in a Referer; the page moves it into the
// tab's sessionStorage and takes it off the address bar.
const KeyFragment = "#key="

// Options configure the page.
type Options struct {
	// DevToken, when set, issues a new token for an agent id (auth.Store.Create has this
	// shape) and the page's "Dev token" button can use it: GET or POST
	// /dev/token?agent=ID answers {"agent_id": ID, "token": TOKEN}. Only `terret dev`
	// sets it; a deployment never serves tokens to whoever asks.
	DevToken func(ctx context.Context, agentID string) (string, error)
	// DevTokenKey is the secret a /dev/token request must present in DevTokenHeader.
	// Any program on the machine — another user's too — can load the page over
	// loopback, so the page itself cannot be the proof: the key reaches only the one
	// who started terret dev, in the address it prints (KeyFragment) and in its 0600
	// instance record. With DevTokenKey "" every /dev/token request is refused.
	DevTokenKey string
	Logger      *slog.Logger
}

// Handler serves the page at "/" with its app.js and style.css, and /dev/token when
// o.DevToken is set. Every other path is 404.
func Handler(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	mux := http.NewServeMux()
	for path, name := range map[string]string{"/{$}": "index.html", "/app.js": "app.js", "/style.css": "style.css"} {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			pageHeaders(w)
			http.ServeFileFS(w, r, files, name)
		})
	}
	if o.DevToken != nil {
		dt := devToken{mint: o.DevToken, key: o.DevTokenKey, log: o.Logger}
		mux.HandleFunc("GET /dev/token", dt.serve)
		mux.HandleFunc("POST /dev/token", dt.serve)
	}
	return mux
}

// csp lets the page load only its own files, and open sockets to any server the user
// types (a deployed stage included).
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self' ws: wss:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func pageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

type devToken struct {
	mint func(ctx context.Context, agentID string) (string, error)
	key  string
	log  *slog.Logger
}

// serve mints a token. The gateway hands the page only GET and HEAD requests, so GET
// is accepted beside POST; the required header and the Host and Origin checks keep
// other sites (cross-site requests and DNS rebinding) from reaching it.
func (d devToken) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if r.Method == http.MethodHead { // the GET pattern matches HEAD too; minting needs a body
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if !d.keyed(r) || !localHost(r.Host) || !sameOrigin(r) {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	agentID := r.URL.Query().Get("agent")
	if !auth.ValidAgentID(agentID) {
		http.Error(w, "agent must be 1-128 of [A-Za-z0-9._-]", http.StatusBadRequest)
		return
	}
	tok, err := d.mint(r.Context(), agentID)
	if err != nil {
		d.log.Error("dev token", "agent_id", agentID, "error", err)
		if errors.Is(err, auth.ErrBadAgentID) {
			http.Error(w, "bad agent id", http.StatusBadRequest)
			return
		}
		http.Error(w, "could not create a token", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"agent_id": agentID, "token": tok})
}

// keyed reports whether r presents the page key.
func (d devToken) keyed(r *http.Request) bool {
	got := r.Header.Get(DevTokenHeader)
	return d.key != "" && subtle.ConstantTimeCompare([]byte(got), []byte(d.key)) == 1
}

// localHost reports whether a Host header names this machine by an IP address or
// "localhost": a rebound DNS name of another site is refused.
func localHost(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.Trim(h, "[]")
	if net.ParseIP(h) != nil {
		return true
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// sameOrigin reports whether the request's Origin, when the browser sends one, is the
// page's own.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}
