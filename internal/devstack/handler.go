package devstack

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-lambda-go/lambda"
)

// handlerOf adapts a typed handler to lambda.Handler, decoding the payload and encoding
// the result with encoding/json. lambda.NewHandler's Invoke returns the bytes of a
// buffer it has already put back in a pool shared by the handler's invocations, so a
// caller that reads them while another invocation of the same handler runs — the local
// stack's stream pollers and Invoke API calling deliver at once — may read another
// invocation's response. On AWS each runtime serves one invocation at a time.
func handlerOf[In, Out any](f func(context.Context, In) (Out, error)) lambda.Handler {
	return typedHandler[In, Out](f)
}

type typedHandler[In, Out any] func(context.Context, In) (Out, error)

func (f typedHandler[In, Out]) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	var in In
	if err := json.Unmarshal(payload, &in); err != nil {
		return nil, fmt.Errorf("devstack: decode payload: %w", err)
	}
	out, err := f(ctx, in)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}
