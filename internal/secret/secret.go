// Package secret fetches the API keys a profile references by name (`api_key_secret`)
// from AWS Secrets Manager or SSM Parameter Store, once per process: a function fetches
// a key at cold start and keeps it for the life of its execution environment.
//
// A reference is one of:
//
//	acme/openai                                                  Secrets Manager secret name
//	arn:aws:secretsmanager:REGION:ACCOUNT:secret:acme/openai-AbCdEf  Secrets Manager ARN
//	ssm:/terret/acme-key                                         SSM parameter name (SecureString or String)
//	arn:aws:ssm:REGION:ACCOUNT:parameter/terret/acme-key         SSM parameter ARN
//
// The value is the secret's SecretString (or the parameter's decrypted value), with
// surrounding white space removed. Values never appear in errors.
//
// The package speaks the AWS JSON 1.1 protocol itself (client.go) rather than through
// the SDK's SSM and Secrets Manager clients, which would add about 1.5 MB and their
// package init to every function that links it. Cost: one signed HTTPS request per
// reference and process (up to three attempts when throttled or on a server error).
package secret

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Errors of Get.
var (
	ErrNotFound = errors.New("secret: not found")
	ErrEmpty    = errors.New("secret: empty value")
	ErrFetch    = errors.New("secret: cannot fetch")
	ErrBadRef   = errors.New("secret: invalid reference")
)

// Store fetches secrets and caches them for its lifetime. It is safe for concurrent
// use.
type Store struct {
	c *client

	mu    sync.Mutex
	cache map[string]string
}

// NewFromConfig returns a Store using awsCfg's credentials, region, HTTP client and,
// if set, BaseEndpoint (for both services: a test server or LocalStack). It makes no
// request until Get.
func NewFromConfig(awsCfg aws.Config) *Store {
	return &Store{c: newClient(awsCfg), cache: map[string]string{}}
}

// SSMParameter reports whether ref names an SSM parameter, and its name or ARN.
func SSMParameter(ref string) (string, bool) {
	if name, ok := strings.CutPrefix(ref, "ssm:"); ok {
		return name, true
	}
	if strings.HasPrefix(ref, "arn:") && strings.Contains(ref, ":ssm:") {
		return ref, true
	}
	return "", false
}

// Get returns the value of the secret ref names, from the cache after the first
// successful fetch (one HTTPS request per reference and process; failures are not
// cached, so the next Get asks again). It returns an error wrapping ErrNotFound,
// ErrEmpty, ErrBadRef or ErrFetch (no credentials, access denied, throttling after
// retries, network), naming ref.
func (s *Store) Get(ctx context.Context, ref string) (string, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" || ref == "ssm:" {
		return "", fmt.Errorf("%w: empty", ErrBadRef)
	}
	s.mu.Lock()
	v, ok := s.cache[ref]
	s.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := s.fetch(ctx, ref)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.cache[ref] = v
	s.mu.Unlock()
	return v, nil
}

func (s *Store) fetch(ctx context.Context, ref string) (string, error) {
	var val string
	if name, ok := SSMParameter(ref); ok {
		var out struct {
			Parameter *struct{ Value string }
		}
		in := struct {
			Name           string
			WithDecryption bool
		}{name, true}
		if err := s.c.call(ctx, "ssm", "AmazonSSM.GetParameter", in, &out); err != nil {
			if isCode(err, "ParameterNotFound") {
				return "", fmt.Errorf("%w: SSM parameter %s", ErrNotFound, name)
			}
			return "", fmt.Errorf("%w: SSM parameter %s: %v", ErrFetch, name, err)
		}
		if out.Parameter != nil {
			val = out.Parameter.Value
		}
	} else {
		var out struct{ SecretString string }
		in := struct{ SecretId string }{ref}
		if err := s.c.call(ctx, "secretsmanager", "secretsmanager.GetSecretValue", in, &out); err != nil {
			if isCode(err, "ResourceNotFoundException") {
				return "", fmt.Errorf("%w: Secrets Manager secret %s", ErrNotFound, ref)
			}
			return "", fmt.Errorf("%w: Secrets Manager secret %s: %v", ErrFetch, ref, err)
		}
		val = out.SecretString // empty for a binary-only secret: ErrEmpty below
	}
	val = strings.TrimSpace(val)
	if val == "" {
		return "", fmt.Errorf("%w: %s", ErrEmpty, ref)
	}
	return val, nil
}
