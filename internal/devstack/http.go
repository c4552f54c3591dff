package devstack

import (
	"net/http"
	"sync/atomic"
)

// lateHandler serves the agent paths over HTTP once Start has built them: the gateway
// listens before the handlers exist, as its routes do (localgw.Deferred).
type lateHandler struct{ h atomic.Pointer[http.Handler] }

// Bind makes h serve every request from now on.
func (l *lateHandler) Bind(h http.Handler) { l.h.Store(&h) }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := l.h.Load()
	if h == nil {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"type":"error","code":"internal","message":"terret dev is still starting"}` + "\n"))
		return
	}
	(*h).ServeHTTP(w, r)
}
