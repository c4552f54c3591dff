package devstack

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/terret/terret-ws/internal/httpapi"
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

// ringing rings bell for the agent of each record of a log stream batch, then hands
// the batch on to h (deliver): a reader of the log over HTTP waiting in this process
// reads at once instead of at its next look (httpapi.Bell).
func ringing(bell *httpapi.Bell, h lambda.Handler) lambda.Handler {
	return handlerFunc(func(ctx context.Context, payload []byte) ([]byte, error) {
		var batch events.DynamoDBEvent
		if err := json.Unmarshal(payload, &batch); err == nil {
			rung := map[string]bool{}
			for _, rec := range batch.Records {
				if id := rec.Change.Keys["session_id"]; id.DataType() == events.DataTypeString && !rung[id.String()] {
					rung[id.String()] = true
					bell.Ring(id.String())
				}
			}
		}
		return h.Invoke(ctx, payload)
	})
}
