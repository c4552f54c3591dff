package secret_test

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/terret/terret-ws/internal/secret"
)

func TestScrubForms(t *testing.T) {
	const key = "sk-live-Zq9xW2vB7nK4mP1tR8yU"
	s := secret.NewScrubber(key, "", "other-secret-value-123")
	b64 := base64.StdEncoding.EncodeToString([]byte(key))
	basic := base64.StdEncoding.EncodeToString([]byte("user:" + key)) // the key at offset 5
	for _, tc := range []struct{ name, text string }{
		{"as written", "invalid key " + key + " given"},
		{"base64", "key was " + b64},
		{"base64 url", "key was " + base64.RawURLEncoding.EncodeToString([]byte(key))},
		{"base64 inside a Basic credential", "Authorization: Basic " + basic},
		{"base64 at offset 1", base64.StdEncoding.EncodeToString([]byte("x" + key + "y"))},
		{"base64 at offset 2", base64.URLEncoding.EncodeToString([]byte("xy" + key))},
		{"hex", "hex " + hex.EncodeToString([]byte(key))},
		{"HEX", "hex " + strings.ToUpper(hex.EncodeToString([]byte(key)))},
		{"split by a newline", "key " + key[:10] + "\n" + key[10:]},
		{"split by spaces", "key " + strings.Join(strings.Split(key, "-"), " - ")},
		{"base64 wrapped", "key " + b64[:12] + "\r\n  " + b64[12:]},
		{"the second secret", "other-secret-value-123"},
	} {
		got := s.Scrub(tc.text)
		if !strings.Contains(got, secret.Redacted) || leaks(got, key) {
			t.Errorf("%s: Scrub(%q) = %q", tc.name, tc.text, got)
		}
	}
	if got := s.Scrub("plain text, HTTP 401"); got != "plain text, HTTP 401" {
		t.Errorf("text without a secret changed: %q", got)
	}
	var none *secret.Scrubber
	if got := none.Scrub(key); got != key {
		t.Errorf("nil Scrubber changed text: %q", got)
	}
}

// leaks reports whether text still holds a recognisable piece of key: 12 characters
// of it, or of its base64 or hex, with white space removed.
func leaks(text, key string) bool {
	flat := strings.Join(strings.Fields(text), "")
	for _, f := range []string{key, base64.StdEncoding.EncodeToString([]byte(key)), hex.EncodeToString([]byte(key))} {
		for i := 0; i+12 <= len(f); i++ {
			if strings.Contains(flat, f[i:i+12]) {
				return true
			}
		}
	}
	return false
}
