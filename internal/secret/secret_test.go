package secret_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/terret/terret-ws/internal/secret"
)

// awsJSON is a small server speaking the AWS JSON 1.1 protocol of Secrets Manager
// (GetSecretValue) and SSM (GetParameter): it answers from its maps and counts requests
// by target and id.
type awsJSON struct {
	mu      sync.Mutex
	calls   map[string]int
	secrets map[string]string // Secrets Manager SecretId -> SecretString
	params  map[string]string // SSM Name -> Value
	decrypt []bool            // WithDecryption of each GetParameter
}

func (s *awsJSON) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in map[string]any
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	target := r.Header.Get("X-Amz-Target")
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	fail := func(typ string) {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": "not here"})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch target {
	case "secretsmanager.GetSecretValue":
		id, _ := in["SecretId"].(string)
		s.calls["sm:"+id]++
		v, ok := s.secrets[id]
		if !ok {
			fail("ResourceNotFoundException")
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"Name": id, "SecretString": v})
	case "AmazonSSM.GetParameter":
		name, _ := in["Name"].(string)
		s.calls["ssm:"+name]++
		dec, _ := in["WithDecryption"].(bool)
		s.decrypt = append(s.decrypt, dec)
		v, ok := s.params[name]
		if !ok {
			fail("ParameterNotFound")
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"Parameter": map[string]any{"Name": name, "Type": "SecureString", "Value": v}})
	default:
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"__type": "AccessDeniedException", "message": "unknown target " + target})
	}
}

func TestStore(t *testing.T) {
	fake := &awsJSON{calls: map[string]int{},
		secrets: map[string]string{"acme/openai": " sk-sm-1 \n", "arn:aws:secretsmanager:eu-west-1:123456789012:secret:acme-AbCdEf": "sk-sm-arn", "blank": "  "},
		params:  map[string]string{"/terret/acme-key": "sk-ssm-1", "arn:aws:ssm:eu-west-1:123456789012:parameter/terret/k2": "sk-ssm-arn"},
	}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	cfg := aws.Config{Region: "eu-west-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")}
	st := secret.NewFromConfig(cfg)
	ctx := context.Background()

	for _, c := range []struct{ ref, want string }{
		{"acme/openai", "sk-sm-1"},
		{"arn:aws:secretsmanager:eu-west-1:123456789012:secret:acme-AbCdEf", "sk-sm-arn"},
		{"ssm:/terret/acme-key", "sk-ssm-1"},
		{"arn:aws:ssm:eu-west-1:123456789012:parameter/terret/k2", "sk-ssm-arn"},
	} {
		for range 2 { // the second Get is served from the cache
			got, err := st.Get(ctx, c.ref)
			if err != nil || got != c.want {
				t.Errorf("Get(%s) = %q, %v; want %q", c.ref, got, err, c.want)
			}
		}
	}
	for k, n := range fake.calls {
		if n != 1 {
			t.Errorf("%s fetched %d times, want once", k, n)
		}
	}
	for i, d := range fake.decrypt {
		if !d {
			t.Errorf("GetParameter %d without WithDecryption", i)
		}
	}
	for _, c := range []struct {
		ref  string
		want error
	}{
		{"missing/secret", secret.ErrNotFound},
		{"ssm:/missing", secret.ErrNotFound},
		{"blank", secret.ErrEmpty},
		{"", secret.ErrBadRef},
	} {
		_, err := st.Get(ctx, c.ref)
		if !errors.Is(err, c.want) {
			t.Errorf("Get(%q) = %v, want %v", c.ref, err, c.want)
		}
		if err != nil && c.ref != "" && !strings.Contains(err.Error(), strings.TrimPrefix(c.ref, "ssm:")) {
			t.Errorf("Get(%q) error %q does not name the reference", c.ref, err)
		}
	}
	// A failure is not cached: the secret created later is found.
	fake.mu.Lock()
	fake.secrets["missing/secret"] = "sk-late"
	fake.mu.Unlock()
	if got, err := st.Get(ctx, "missing/secret"); err != nil || got != "sk-late" {
		t.Errorf("Get after creation = %q, %v; want sk-late", got, err)
	}
}
