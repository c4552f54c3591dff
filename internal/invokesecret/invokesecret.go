// Package invokesecret makes a function refuse invocations that do not carry its
// execution environment's secret.
//
// `terret dev --lambda-emulator` runs each function under aws-lambda-rie, whose invoke
// endpoint is a plain 127.0.0.1 port that checks nothing: any local process, a web page
// (a cross-origin POST with a text/plain body needs no preflight) or a DNS-rebinding
// page could invoke deliver with a forged stream batch there. So the emulator draws one
// secret per run, gives it to every function in the environment variable EnvVar, and
// sends it with each invocation in the client context (the X-Amz-Client-Context header,
// which rie hands to the function). A function wrapped by Guard answers any invocation
// without it with ErrRefused before its handler runs. On AWS the variable is unset and
// Guard checks nothing: there the Invoke API is IAM's.
package invokesecret

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
)

// EnvVar holds the secret in a function's environment under the emulator.
const EnvVar = "TERRET_INVOKE_SECRET"

// customKey names the secret in the client context's custom map.
const customKey = "terret_invoke_secret"

// ErrRefused is a function's answer to an invocation without the secret.
var ErrRefused = errors.New("invokesecret: invocation refused: it does not carry this environment's secret")

// New returns a fresh secret: 128 random bits, hex.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ClientContext is the X-Amz-Client-Context header value (base64 JSON, as the Invoke
// API takes it) that carries secret.
func ClientContext(secret string) string {
	raw, _ := json.Marshal(lambdacontext.ClientContext{Custom: map[string]string{customKey: secret}})
	return base64.StdEncoding.EncodeToString(raw)
}

// Guard returns h behind the check, or h itself if secret is "" (not under the
// emulator). The check costs a comparison per invocation.
func Guard(h lambda.Handler, secret string) lambda.Handler {
	if secret == "" {
		return h
	}
	return guard{h: h, secret: []byte(secret)}
}

type guard struct {
	h      lambda.Handler
	secret []byte
}

func (g guard) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	got := ""
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		got = lc.ClientContext.Custom[customKey]
	}
	if subtle.ConstantTimeCompare([]byte(got), g.secret) != 1 {
		return nil, ErrRefused
	}
	return g.h.Invoke(ctx, payload)
}
