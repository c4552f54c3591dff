package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/webhook"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		glob, typ string
		want      bool
	}{
		{"*", "turn/end", true},
		{"*", "session/created", true},
		{"turn/end", "turn/end", true},
		{"turn/end", "turn/start", false},
		{"turn/*", "turn/end", true},
		{"turn/*", "turn/", true},
		{"turn/*", "turns/end", false},
		{"turn/*", "xturn/end", false},
		{"*/end", "turn/end", true},
		{"*/end", "turn/ending", false},
		{"approval/*ed", "approval/requested", true},
		{"approval/*ed", "approval/resolved", true},
		{"approval/*ed", "approval/request", false},
		{"tool/???l", "tool/call", true},
		{"tool/???l", "tool/result", false},
		{"*a*a*", "approval/resolved", true},
		{"*a*a*a*", "turn/end", false},
		{"", "", true},
		{"turn/end*", "turn/end", true},
	} {
		if got := webhook.Match(c.glob, c.typ); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.glob, c.typ, got, c.want)
		}
	}
}

func TestCheckGlob(t *testing.T) {
	for _, c := range []struct {
		glob string
		ok   bool
	}{
		{"*", true},
		{"turn/end", true},
		{"approval/*", true},
		{"schedule/fired", true},
		{"", false},
		{"Turn/End", false},
		{"turn/[ab]", false},
		{"turn end", false},
		{strings.Repeat("a", 129), false},
	} {
		err := webhook.CheckGlob(c.glob)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, webhook.ErrBadGlob)) {
			t.Errorf("CheckGlob(%q) = %v, want ok %v", c.glob, err, c.ok)
		}
	}
}

// TestSignatureVector checks Signature against the Standard Webhooks specification's
// example (secret, id, timestamp, payload and signature as it publishes them).
func TestSignatureVector(t *testing.T) {
	key, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := webhook.Signature(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("Signature = %q, want the specification's %q", got, want)
	}
}

func TestParseSecret(t *testing.T) {
	for _, c := range []struct {
		secret string
		ok     bool
	}{
		{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", true},
		{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", false},         // no prefix
		{"whsec_not base64!", false},                        // not base64
		{"whsec_c2hvcnQ=", false},                           // 5 bytes
		{"whsec_" + strings.Repeat("QUFB", 30), false},      // 90 bytes
		{" whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n", true}, // white space around
	} {
		_, err := webhook.ParseSecret(c.secret)
		if (err == nil) != c.ok {
			t.Errorf("ParseSecret(%q) = %v, want ok %v", c.secret, err, c.ok)
		}
		if err != nil && strings.Contains(err.Error(), strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(c.secret), "whsec_"))) {
			t.Errorf("ParseSecret's error %q quotes the secret", err)
		}
	}
}

func TestBackoff(t *testing.T) {
	first, maxB := webhook.DefaultFirstRetry, webhook.DefaultMaxBackoff
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second}
	for i, w := range want {
		if got := webhook.Backoff(i+1, first, maxB); got != w {
			t.Errorf("Backoff(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := webhook.Backoff(30, first, maxB); got != time.Hour {
		t.Errorf("Backoff(30) = %v, want the cap, 1h", got)
	}
	// The default number of attempts spans more than a day of retries.
	if span := webhook.RetrySpan(webhook.DefaultMaxAttempts, first, maxB); span < 24*time.Hour {
		t.Errorf("RetrySpan(%d attempts) = %v, want at least 24h", webhook.DefaultMaxAttempts, span)
	}
}

// TestAddressesRefuse is the SSRF table: receivers' URLs refused where the service
// runs on AWS (the zero Addresses), and what terret dev admits besides.
func TestAddressesRefuse(t *testing.T) {
	for _, c := range []struct {
		url            string
		aws, loopback  bool // admitted
		refusedAddress bool // the AWS refusal is ErrRefused (else ErrBadURL)
	}{
		{"https://hooks.example.com/terret", true, true, false},
		{"https://93.184.215.14/hook", true, true, false},
		{"https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/hook", true, true, false},
		{"http://hooks.example.com/terret", false, false, false},
		{"ftp://hooks.example.com/terret", false, false, false},
		{"https://user:pw@hooks.example.com/", false, false, false},
		{"hooks.example.com/terret", false, false, false},
		{"https://127.0.0.1:8443/hook", false, true, true},
		{"http://127.0.0.1:8080/hook", false, true, false},
		{"http://[::1]:8080/hook", false, true, false},
		{"http://localhost:8080/hook", false, true, false},
		{"https://localhost/hook", false, true, true},
		{"https://localhost./hook", false, true, true},
		{"https://api.localhost/hook", false, true, true},
		{"https://10.0.0.5/hook", false, false, true},
		{"https://172.16.3.4/hook", false, false, true},
		{"https://192.168.1.1/hook", false, false, true},
		{"https://169.254.169.254/latest/meta-data/", false, false, true},
		{"https://[fd00:ec2::254]/latest/meta-data/", false, false, true},
		{"https://[fe80::1]/hook", false, false, true},
		{"https://[::ffff:10.0.0.1]/hook", false, false, true},
		{"https://[::ffff:127.0.0.1]/hook", false, true, true},
		{"https://100.64.0.1/hook", false, false, true},
		{"https://0.0.0.0/hook", false, false, true},
		{"https://[::]/hook", false, false, true},
		{"https://224.0.0.1/hook", false, false, true},
		{"https://255.255.255.255/hook", false, false, true},
		{"https://[64:ff9b::a00:1]/hook", false, false, true},
		{"http://10.0.0.5:8080/hook", false, false, false},
	} {
		err := webhook.Addresses{}.CheckURL(c.url)
		if (err == nil) != c.aws {
			t.Errorf("AWS: CheckURL(%q) = %v, want admitted %v", c.url, err, c.aws)
		}
		if err != nil && c.refusedAddress != errors.Is(err, webhook.ErrRefused) {
			t.Errorf("AWS: CheckURL(%q) = %v, want ErrRefused %v", c.url, err, c.refusedAddress)
		}
		if err := (webhook.Addresses{Loopback: true}).CheckURL(c.url); (err == nil) != c.loopback {
			t.Errorf("terret dev: CheckURL(%q) = %v, want admitted %v", c.url, err, c.loopback)
		}
	}
	for _, ip := range []string{"8.8.8.8", "2001:4860:4860::8888"} {
		if err := (webhook.Addresses{}).CheckIP(netip.MustParseAddr(ip)); err != nil {
			t.Errorf("CheckIP(%s) = %v, want admitted", ip, err)
		}
	}
}

// TestDialRefusesWhatTheNameResolvesTo: the check at dial time sees the address DNS
// answered, so a name that passes the URL check but resolves to loopback (as a
// rebinding name would) is refused before any byte is sent.
func TestDialRefusesWhatTheNameResolvesTo(t *testing.T) {
	rv := startReceiver(t, func(int, *http.Request) int { return 200 })
	port := rv.Listener.Addr().(interface{ AddrPort() netip.AddrPort }).AddrPort().Port()
	// A name: only resolving it finds the loopback address (Attempt does not run the
	// URL check; the profile check does, before).
	c := webhook.New(fixedHooks{}, fixedEpochs(""), nil, nil, webhook.Options{})
	for _, u := range []string{rv.URL, "http://localhost:" + itoa(port) + "/hook"} {
		err := c.Attempt(context.Background(), hook(t, u, "*"), webhook.Job{AgentID: "a", URL: u, ID: "ev", Body: []byte(`{}`)})
		if !errors.Is(err, webhook.ErrRefused) || !errors.Is(err, webhook.ErrAttempt) {
			t.Errorf("Attempt(%s) on AWS's addresses = %v, want ErrAttempt and ErrRefused", u, err)
		}
	}
	if n := len(rv.deliveries()); n != 0 {
		t.Errorf("the receiver got %d requests, want none", n)
	}
}

func itoa(n uint16) string { b, _ := json.Marshal(n); return string(b) }
