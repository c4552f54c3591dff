package invokesecret_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/terret/terret-ws/internal/invokesecret"
)

// withClientContext is an invocation's context as the Lambda runtime client builds it
// from the X-Amz-Client-Context header value cc ("" for none).
func withClientContext(t *testing.T, cc string) context.Context {
	t.Helper()
	lc := &lambdacontext.LambdaContext{AwsRequestID: "r"}
	if cc != "" {
		raw, err := base64.StdEncoding.DecodeString(cc)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &lc.ClientContext); err != nil {
			t.Fatal(err)
		}
	}
	return lambdacontext.NewContext(context.Background(), lc)
}

// TestGuard: with a secret, only an invocation whose client context carries it reaches
// the handler; without one (deployed), every invocation does.
func TestGuard(t *testing.T) {
	secret := invokesecret.New()
	if len(secret) != 32 || secret == invokesecret.New() {
		t.Fatalf("New() = %q: want 32 hex digits, fresh each time", secret)
	}
	runs := 0
	h := lambda.NewHandler(func(context.Context, json.RawMessage) (string, error) { runs++; return "ran", nil })
	for _, c := range []struct {
		name, secret, clientContext string
		runs                        bool
	}{
		{"the secret", secret, invokesecret.ClientContext(secret), true},
		{"no client context", secret, "", false},
		{"another secret", secret, invokesecret.ClientContext(invokesecret.New()), false},
		{"a prefix of the secret", secret, invokesecret.ClientContext(secret[:31]), false},
		{"an empty secret", secret, invokesecret.ClientContext(""), false},
		{"deployed: no secret", "", "", true},
	} {
		runs = 0
		out, err := invokesecret.Guard(h, c.secret).Invoke(withClientContext(t, c.clientContext), []byte(`{}`))
		switch {
		case c.runs && (err != nil || string(out) != `"ran"` || runs != 1):
			t.Errorf("%s: %s, %v after %d runs, want the handler's answer", c.name, out, err, runs)
		case !c.runs && (!errors.Is(err, invokesecret.ErrRefused) || runs != 0):
			t.Errorf("%s: %s, %v after %d runs, want ErrRefused and no run", c.name, out, err, runs)
		}
	}
}

// TestEveryFunctionStartsGuarded: each function's main starts through service.Start
// (which applies Guard), never lambda.Start directly.
func TestEveryFunctionStartsGuarded(t *testing.T) {
	mains, err := filepath.Glob("../../functions/*/main.go")
	if err != nil || len(mains) == 0 {
		t.Fatalf("no functions found: %v", err)
	}
	for _, m := range mains {
		src, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		if regexp.MustCompile(`\blambda\.Start\w*\(`).Match(src) || !regexp.MustCompile(`\bservice\.Start\(env, `).Match(src) {
			t.Errorf("%s: starts its handler without service.Start", m)
		}
	}
}
