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
package secret

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
)

// Errors of Get.
var (
	ErrNotFound = errors.New("secret: not found")
	ErrEmpty    = errors.New("secret: empty value")
	ErrFetch    = errors.New("secret: cannot fetch")
	ErrBadRef   = errors.New("secret: invalid reference")
)

// SecretsManager is the part of the Secrets Manager client Store uses.
type SecretsManager interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// SSM is the part of the SSM client Store uses.
type SSM interface {
	GetParameter(ctx context.Context, in *ssm.GetParameterInput, optFns ...func(*ssm.Options)) (*ssm.GetParameterOutput, error)
}

var (
	_ SecretsManager = (*secretsmanager.Client)(nil)
	_ SSM            = (*ssm.Client)(nil)
)

// Store fetches secrets and caches them for its lifetime. It is safe for concurrent
// use.
type Store struct {
	sm  SecretsManager
	ssm SSM

	mu    sync.Mutex
	cache map[string]string
}

// New returns a Store reading through sm and ps.
func New(sm SecretsManager, ps SSM) *Store {
	return &Store{sm: sm, ssm: ps, cache: map[string]string{}}
}

// NewFromConfig returns a Store using awsCfg's credentials and region.
func NewFromConfig(awsCfg aws.Config) *Store {
	return New(secretsmanager.NewFromConfig(awsCfg), ssm.NewFromConfig(awsCfg))
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
// successful fetch (one request per reference and process). It returns an error
// wrapping ErrNotFound, ErrEmpty, ErrBadRef or ErrFetch (access denied, throttling,
// network), naming ref.
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
		out, err := s.ssm.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(name), WithDecryption: aws.Bool(true)})
		if err != nil {
			var nf *ssmtypes.ParameterNotFound
			if errors.As(err, &nf) {
				return "", fmt.Errorf("%w: SSM parameter %s", ErrNotFound, name)
			}
			return "", fmt.Errorf("%w: SSM parameter %s: %v", ErrFetch, name, err)
		}
		if out.Parameter != nil {
			val = aws.ToString(out.Parameter.Value)
		}
	} else {
		out, err := s.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(ref)})
		if err != nil {
			var nf *smtypes.ResourceNotFoundException
			if errors.As(err, &nf) {
				return "", fmt.Errorf("%w: Secrets Manager secret %s", ErrNotFound, ref)
			}
			return "", fmt.Errorf("%w: Secrets Manager secret %s: %v", ErrFetch, ref, err)
		}
		val = aws.ToString(out.SecretString)
	}
	val = strings.TrimSpace(val)
	if val == "" {
		return "", fmt.Errorf("%w: %s", ErrEmpty, ref)
	}
	return val, nil
}
