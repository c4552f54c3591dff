package awsapi

import (
	"net/http"
	"strings"
	"testing"
)

func TestEndpoint(t *testing.T) {
	for _, tt := range []struct{ service, region, want string }{
		{"lambda", "eu-west-1", "https://lambda.eu-west-1.amazonaws.com"},
		{"ssm", "cn-north-1", "https://ssm.cn-north-1.amazonaws.com.cn"},
	} {
		if got := Endpoint(tt.service, tt.region); got != tt.want {
			t.Errorf("Endpoint(%q, %q) = %q, want %q", tt.service, tt.region, got, tt.want)
		}
	}
}

func TestDecodeError(t *testing.T) {
	for _, tt := range []struct {
		name           string
		status         int
		header, body   string
		wantCode, want string
	}{
		{"the header's type, without its suffix", 404, "ResourceNotFoundException:http://internal.amazon.com/coral/x/", `{"Type":"User","Message":"gone"}`, "ResourceNotFoundException", "gone"},
		{"the body's __type, without its namespace", 400, "", `{"__type":"com.amazonaws.ssm#ParameterNotFound","message":" none "}`, "ParameterNotFound", "none"},
		{"the body's code before its __type", 400, "", `{"code":"A","__type":"B"}`, "A", ""},
		{"a body that is not JSON: the status", 503, "", `<html>`, "Service Unavailable", ""},
		{"a long message cut on a rune boundary", 400, "X", `{"message":"` + strings.Repeat("é", 5) + `"}`, "X", "éé…"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: tt.status, Header: http.Header{}}
			if tt.header != "" {
				resp.Header.Set("X-Amzn-ErrorType", tt.header)
			}
			code, msg := DecodeError(resp, []byte(tt.body), 5)
			if code != tt.wantCode || msg != tt.want {
				t.Errorf("DecodeError = %q, %q; want %q, %q", code, msg, tt.wantCode, tt.want)
			}
		})
	}
}
