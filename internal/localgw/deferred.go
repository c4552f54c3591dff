package localgw

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/lambda"
)

// ErrNotBound is returned by a Deferred handler invoked before Bind.
var ErrNotBound = errors.New("localgw: handler not bound yet")

// Deferred is a route or function handler bound after the gateway started: the
// handlers need the gateway's own addresses (@connections, Lambda Invoke), which exist
// only once it listens. It is safe for concurrent use.
type Deferred struct {
	h atomic.Pointer[lambda.Handler]
}

// Invoke calls the bound handler; it returns ErrNotBound before Bind.
func (d *Deferred) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	h := d.h.Load()
	if h == nil {
		return nil, ErrNotBound
	}
	return (*h).Invoke(ctx, payload)
}

// Bind sets the handler Invoke calls.
func (d *Deferred) Bind(h lambda.Handler) { d.h.Store(&h) }
