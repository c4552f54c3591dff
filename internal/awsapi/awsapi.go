// Package awsapi holds what the project's own clients of AWS APIs (packages invoke and
// secret, which speak Lambda's REST-JSON and the AWS JSON 1.1 protocol over the SDK's
// SigV4 signer instead of linking the SDK's clients) share of the wire: a service's
// regional endpoint and the error document a service answers with.
package awsapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Endpoint is service's regional endpoint in region, without a trailing slash:
// https://SERVICE.REGION.amazonaws.com, amazonaws.com.cn in the China regions.
func Endpoint(service, region string) string {
	domain := "amazonaws.com"
	if strings.HasPrefix(region, "cn-") {
		domain = "amazonaws.com.cn"
	}
	return "https://" + service + "." + region + "." + domain
}

// DecodeError reads an error response of resp with body data: the error type from
// X-Amzn-ErrorType or the body's code or __type — not its "Type", which Lambda sets to
// "User" or "Service" — without a namespace ("com.amazonaws.ssm#", "aws.lambda#") or
// a suffix after ':', else the status text; the message from the body's message, cut
// to at most maxMessage bytes on a rune boundary ("…" marks a cut). A body that is
// not JSON leaves only the status.
func DecodeError(resp *http.Response, data []byte, maxMessage int) (code, message string) {
	var doc struct {
		Code    string
		Type    string `json:"__type"`
		Message string // also "message"
	}
	_ = json.Unmarshal(data, &doc)
	code = resp.Header.Get("X-Amzn-ErrorType")
	for _, c := range []string{doc.Code, doc.Type} {
		if code == "" {
			code = c
		}
	}
	code, _, _ = strings.Cut(code, ":")
	if _, after, ok := strings.Cut(code, "#"); ok {
		code = after
	}
	code = strings.TrimSpace(code)
	if code == "" {
		code = http.StatusText(resp.StatusCode)
	}
	message = strings.TrimSpace(doc.Message)
	if len(message) > maxMessage {
		n := maxMessage
		for n > 0 && !utf8.RuneStart(message[n]) {
			n--
		}
		message = message[:n] + "…"
	}
	return code, message
}
