package secret_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// TestStoreWire checks the requests Store sends and how it reads each kind of answer:
// the signature, retries of throttling and server errors and of nothing else, error
// types however a server spells them, bounded bodies, and values kept out of errors.
func TestStoreWire(t *testing.T) {
	const value = "sk-wire-value"
	type answer func(w http.ResponseWriter, n int) // n counts requests from 1
	ok := func(w http.ResponseWriter, target string) {
		if target == "AmazonSSM.GetParameter" {
			json.NewEncoder(w).Encode(map[string]any{"Parameter": map[string]any{"Value": value}})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"SecretString": value})
	}
	fail := func(w http.ResponseWriter, status int, typ string) {
		w.WriteHeader(status)
		// A value-shaped field in an error body must not reach the error either.
		json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": "denied here", "SecretString": value})
	}
	static := credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")
	for _, c := range []struct {
		name     string
		ref      string
		creds    aws.CredentialsProvider
		answer   func(w http.ResponseWriter, target string, n int)
		want     error // nil: Get returns value
		requests int
		check    func(t *testing.T, r *http.Request) // each request
		inErr    []string
	}{
		{name: "SSM request signed", ref: "ssm:/terret/k", creds: static, requests: 1,
			answer: func(w http.ResponseWriter, target string, _ int) { ok(w, target) },
			check: func(t *testing.T, r *http.Request) {
				auth := r.Header.Get("Authorization")
				if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKID/") || !strings.Contains(auth, "/eu-west-1/ssm/aws4_request") ||
					!strings.Contains(auth, "x-amz-target") {
					t.Errorf("Authorization = %q", auth)
				}
				if r.Header.Get("X-Amz-Date") == "" || r.Header.Get("X-Amz-Security-Token") != "" {
					t.Errorf("X-Amz-Date %q, X-Amz-Security-Token %q", r.Header.Get("X-Amz-Date"), r.Header.Get("X-Amz-Security-Token"))
				}
				if ct, tg := r.Header.Get("Content-Type"), r.Header.Get("X-Amz-Target"); r.Method != http.MethodPost || r.URL.Path != "/" ||
					ct != "application/x-amz-json-1.1" || tg != "AmazonSSM.GetParameter" {
					t.Errorf("%s %s, Content-Type %q, X-Amz-Target %q", r.Method, r.URL.Path, ct, tg)
				}
			}},
		{name: "Secrets Manager request signed with session token", ref: "acme/k", requests: 1,
			creds:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", "TOKEN"),
			answer: func(w http.ResponseWriter, target string, _ int) { ok(w, target) },
			check: func(t *testing.T, r *http.Request) {
				auth := r.Header.Get("Authorization")
				if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKID/") || !strings.Contains(auth, "/eu-west-1/secretsmanager/aws4_request") ||
					!strings.Contains(auth, "x-amz-security-token") {
					t.Errorf("Authorization = %q", auth)
				}
				if tok := r.Header.Get("X-Amz-Security-Token"); tok != "TOKEN" {
					t.Errorf("X-Amz-Security-Token = %q, want TOKEN", tok)
				}
				if tg := r.Header.Get("X-Amz-Target"); tg != "secretsmanager.GetSecretValue" {
					t.Errorf("X-Amz-Target = %q", tg)
				}
			}},
		{name: "500 then 200 retried", ref: "acme/k", creds: static, requests: 2,
			answer: func(w http.ResponseWriter, target string, n int) {
				if n == 1 {
					fail(w, http.StatusInternalServerError, "InternalServiceError")
					return
				}
				ok(w, target)
			}},
		{name: "429 then 200 retried", ref: "ssm:/terret/k", creds: static, requests: 2,
			answer: func(w http.ResponseWriter, target string, n int) {
				if n == 1 {
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				ok(w, target)
			}},
		{name: "throttled thrice", ref: "ssm:/terret/k", creds: static, want: secret.ErrFetch, requests: 3,
			answer: func(w http.ResponseWriter, _ string, _ int) { fail(w, http.StatusBadRequest, "ThrottlingException") },
			inErr:  []string{"/terret/k", "ThrottlingException", "3 attempts"}},
		{name: "access denied not retried", ref: "acme/k", creds: static, want: secret.ErrFetch, requests: 1,
			answer: func(w http.ResponseWriter, _ string, _ int) {
				fail(w, http.StatusBadRequest, "com.amazonaws.secretsmanager#AccessDeniedException")
			},
			inErr: []string{"acme/k", "AccessDeniedException", "denied here"}},
		{name: "namespaced ParameterNotFound", ref: "ssm:/terret/k", creds: static, want: secret.ErrNotFound, requests: 1,
			answer: func(w http.ResponseWriter, _ string, _ int) {
				fail(w, http.StatusBadRequest, "com.amazonaws.ssm#ParameterNotFound")
			},
			inErr: []string{"/terret/k"}},
		{name: "type in X-Amzn-ErrorType", ref: "acme/k", creds: static, want: secret.ErrNotFound, requests: 1,
			answer: func(w http.ResponseWriter, _ string, _ int) {
				w.Header().Set("X-Amzn-ErrorType", "ResourceNotFoundException:http://internal.amazon.com/coral/com.amazonaws.secretsmanager/")
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"message":"gone"}`)
			},
			inErr: []string{"acme/k"}},
		{name: "oversized body", ref: "acme/k", creds: static, want: secret.ErrFetch, requests: 1,
			answer: func(w http.ResponseWriter, _ string, _ int) {
				json.NewEncoder(w).Encode(map[string]any{"SecretString": value, "Pad": strings.Repeat("x", 1<<20)})
			},
			inErr: []string{"acme/k", "larger than"}},
		{name: "malformed body", ref: "ssm:/terret/k", creds: static, want: secret.ErrFetch, requests: 1,
			answer: func(w http.ResponseWriter, _ string, _ int) {
				io.WriteString(w, `{"Parameter":{"Value":`+value) // the JSON error would quote it
			},
			inErr: []string{"/terret/k", "malformed"}},
		{name: "no credentials", ref: "acme/k", want: secret.ErrFetch, requests: 0,
			answer: func(w http.ResponseWriter, target string, _ int) { ok(w, target) },
			inErr:  []string{"acme/k", "credentials"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			n := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if err := verifySigV4(r, body, "SECRET"); err != nil {
					t.Error(err)
				}
				mu.Lock()
				n++
				i := n
				mu.Unlock()
				if c.check != nil {
					c.check(t, r)
				}
				w.Header().Set("Content-Type", "application/x-amz-json-1.1")
				c.answer(w, r.Header.Get("X-Amz-Target"), i)
			}))
			defer srv.Close()
			st := secret.NewFromConfig(aws.Config{Region: "eu-west-1", BaseEndpoint: aws.String(srv.URL), Credentials: c.creds})
			got, err := st.Get(context.Background(), c.ref)
			if c.want == nil {
				if err != nil || got != value {
					t.Errorf("Get = %q, %v; want %q", got, err, value)
				}
			} else {
				if !errors.Is(err, c.want) {
					t.Fatalf("Get = %q, %v; want %v", got, err, c.want)
				}
				if strings.Contains(err.Error(), value) {
					t.Errorf("error %q holds the value", err)
				}
				for _, s := range c.inErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %q", err, s)
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if n != c.requests {
				t.Errorf("%d requests, want %d", n, c.requests)
			}
		})
	}
}

// verifySigV4 recomputes the AWS Signature Version 4 of r (body its payload) with
// secretKey and compares it with the one in its Authorization header, so a request
// AWS would reject (a wrong payload hash, scope or signed header) fails here.
func verifySigV4(r *http.Request, body []byte, secretKey string) error {
	auth := r.Header.Get("Authorization")
	fields := map[string]string{}
	for _, f := range strings.Split(strings.TrimPrefix(auth, "AWS4-HMAC-SHA256 "), ", ") {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	_, scope, _ := strings.Cut(fields["Credential"], "/") // DATE/REGION/SERVICE/aws4_request
	parts := strings.Split(scope, "/")
	if len(parts) != 4 || fields["SignedHeaders"] == "" || fields["Signature"] == "" {
		return fmt.Errorf("malformed Authorization %q", auth)
	}
	var canon strings.Builder
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		v := r.Header.Get(h)
		switch h {
		case "host":
			v = r.Host
		case "content-length":
			v = strconv.FormatInt(r.ContentLength, 10)
		}
		canon.WriteString(h + ":" + strings.TrimSpace(v) + "\n")
	}
	hash := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	mac := func(key []byte, s string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(s))
		return m.Sum(nil)
	}
	req := strings.Join([]string{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, canon.String(), fields["SignedHeaders"], hash(body)}, "\n")
	toSign := strings.Join([]string{"AWS4-HMAC-SHA256", r.Header.Get("X-Amz-Date"), scope, hash([]byte(req))}, "\n")
	key := []byte("AWS4" + secretKey)
	for _, p := range parts {
		key = mac(key, p)
	}
	if got := hex.EncodeToString(mac(key, toSign)); got != fields["Signature"] {
		return fmt.Errorf("signature %s, want %s (signed headers %s)", fields["Signature"], got, fields["SignedHeaders"])
	}
	return nil
}
