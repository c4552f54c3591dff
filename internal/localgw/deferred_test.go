package localgw_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/terret/terret-ws/internal/localgw"
)

func TestDeferredBind(t *testing.T) {
	var d localgw.Deferred
	if _, err := d.Invoke(context.Background(), []byte(`{}`)); !errors.Is(err, localgw.ErrNotBound) {
		t.Fatalf("unbound Invoke = %v, want ErrNotBound", err)
	}
	d.Bind(lambda.NewHandler(func(ctx context.Context, in map[string]string) (string, error) { return "hi " + in["name"], nil }))
	out, err := d.Invoke(context.Background(), []byte(`{"name":"x"}`))
	if err != nil || string(out) != `"hi x"` {
		t.Fatalf("bound Invoke = %s, %v", out, err)
	}
}
