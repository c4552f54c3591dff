package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SecretPrefix starts a Standard Webhooks secret: "whsec_" and the key in base64.
const SecretPrefix = "whsec_"

// minSecretBytes is the shortest key accepted (Standard Webhooks: 24 to 64 bytes).
const minSecretBytes = 24

// ParseSecret returns the HMAC key of a "whsec_<base64>" secret. Its error never
// quotes the value.
func ParseSecret(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	b64, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: want %s followed by the key in base64", ErrBadSecret, SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("%w: the part after %s is not standard base64", ErrBadSecret, SecretPrefix)
	}
	if len(key) < minSecretBytes || len(key) > 64 {
		return nil, fmt.Errorf("%w: the key is %d bytes, want %d to 64", ErrBadSecret, len(key), minSecretBytes)
	}
	return key, nil
}

// Signature is the webhook-signature header's value for a message id, a timestamp
// and the body: "v1," and the base64 HMAC-SHA256 of "<id>.<timestamp>.<body>".
func Signature(key []byte, id string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Header names of the Standard Webhooks scheme.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Sign sets the three headers on h for an attempt at ts.
func Sign(h http.Header, key []byte, id string, ts time.Time, body []byte) {
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Signature(key, id, ts, body))
}
