package secret_test

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
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
		{"percent-encoded", "key=" + percent(key, "%%%02X")},
		{"percent-encoded, lower case", "key=" + percent(key, "%%%02x")},
		{"percent-encoded in part", "key=" + key[:8] + percent(key[8:], "%%%02X")},
		{"upper-cased", "invalid key " + strings.ToUpper(key)},
		{"lower-cased", "invalid key " + strings.ToLower(key)},
		{"truncated", "invalid key " + key[:14] + "... given"},
		{"its end only", "invalid key ****" + key[len(key)-14:]},
		{"split by other text", `key "` + key[:13] + `" + "` + key[13:] + `"`},
		{"split by an escaped line break", `{"message":"key ` + key[:10] + `\n` + key[10:] + `"}`},
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

// percent is key with each byte written as format (%XX).
func percent(key, format string) string {
	var b strings.Builder
	for _, c := range []byte(key) {
		fmt.Fprintf(&b, format, c)
	}
	return b.String()
}

// leaks reports whether text still holds a recognisable piece of key: 12 characters
// of it, or of its base64 or hex, with white space and escaped line breaks removed
// and percent-encoding undone, in any case.
func leaks(text, key string) bool {
	if u, err := url.PathUnescape(text); err == nil {
		text = u
	}
	text = strings.NewReplacer(`\n`, "", `\r`, "", `\t`, "").Replace(text)
	flat := strings.Join(strings.Fields(text), "")
	if strings.Contains(strings.ToLower(flat), strings.ToLower(key[:12])) {
		return true
	}
	for _, f := range []string{key, base64.StdEncoding.EncodeToString([]byte(key)), hex.EncodeToString([]byte(key))} {
		for i := 0; i+12 <= len(f); i++ {
			if strings.Contains(flat, f[i:i+12]) {
				return true
			}
		}
	}
	return false
}
