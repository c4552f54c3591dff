package config_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/invokesecret"
)

// TestOriginSecret: connect reads ORIGIN_SECRET (optional, empty: no check).
func TestOriginSecret(t *testing.T) {
	t.Parallel()
	env := map[string]string{"LOG_TABLE": "l", "CONNECTIONS_TABLE": "c", "AGENTS_TABLE": "a", "DELIVER_FUNCTION": "d", "WS_MANAGEMENT_ENDPOINT": "https://x"}
	for _, want := range []string{"", "s3cret"} {
		env["ORIGIN_SECRET"] = want
		c, err := config.LoadFrom("connect", func(k string) string { return env[k] })
		if err != nil || c.OriginSecret != want {
			t.Errorf("LoadFrom(connect) with ORIGIN_SECRET=%q: OriginSecret %q, %v", want, c.OriginSecret, err)
		}
	}
}

// TestInvokeSecret: every function reads the emulator's invoke secret (optional, empty
// deployed: no check).
func TestInvokeSecret(t *testing.T) {
	t.Parallel()
	env := map[string]string{"LOG_TABLE": "l", "CONNECTIONS_TABLE": "c", "AGENTS_TABLE": "a", "DELIVER_FUNCTION": "d", "RUNNER_FUNCTION": "r", "WS_MANAGEMENT_ENDPOINT": "https://x", "WEBHOOK_QUEUE_URL": "https://sqs/q"}
	for _, fn := range []string{"connect", "message", "disconnect", "deliver", "runner", "webhook"} {
		for _, want := range []string{"", "0123456789abcdef0123456789abcdef"} {
			env[invokesecret.EnvVar] = want
			c, err := config.LoadFrom(fn, func(k string) string { return env[k] })
			if err != nil || c.InvokeSecret != want {
				t.Errorf("LoadFrom(%s) with %s=%q: InvokeSecret %q, %v", fn, invokesecret.EnvVar, want, c.InvokeSecret, err)
			}
		}
	}
}

// TestPauseEndpoint: the test-only pause endpoint is taken only for a local stack
// (DYNAMODB_ENDPOINT set) and a loopback http URL; anything else fails the load.
func TestPauseEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, endpoint, dynamoDB string
		want                     string // PauseEndpoint; "" with ok false: ErrInvalid
		ok                       bool
	}{
		{"unset", "", "", "", true},
		{"unset, local", "", "http://127.0.0.1:8000", "", true},
		{"local, loopback v4", "http://127.0.0.1:4567/pause", "http://127.0.0.1:8000", "http://127.0.0.1:4567/pause", true},
		{"local, loopback v6", "http://[::1]:4567/pause", "http://127.0.0.1:8000", "http://[::1]:4567/pause", true},
		{"deployed: no DYNAMODB_ENDPOINT", "http://127.0.0.1:4567/pause", "", "", false},
		{"a remote host", "http://10.0.0.5:4567/pause", "http://127.0.0.1:8000", "", false},
		{"a name, not an IP", "http://localhost:4567/pause", "http://127.0.0.1:8000", "", false},
		{"https", "https://127.0.0.1:4567/pause", "http://127.0.0.1:8000", "", false},
		{"not a URL", "127.0.0.1:4567", "http://127.0.0.1:8000", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"LOG_TABLE": "l", "CONNECTIONS_TABLE": "c", "AGENTS_TABLE": "a", "DELIVER_FUNCTION": "d",
				"RUNNER_FUNCTION": "r", "WS_MANAGEMENT_ENDPOINT": "https://x", "DYNAMODB_ENDPOINT": tc.dynamoDB, config.PauseEndpointVar: tc.endpoint}
			c, err := config.LoadFrom("runner", func(k string) string { return env[k] })
			if gotOK := err == nil; gotOK != tc.ok || c.PauseEndpoint != tc.want {
				t.Errorf("LoadFrom(runner) with %s=%q, DYNAMODB_ENDPOINT=%q: PauseEndpoint %q, error %v; want %q, ok %v",
					config.PauseEndpointVar, tc.endpoint, tc.dynamoDB, c.PauseEndpoint, err, tc.want, tc.ok)
			}
			if err != nil && !errors.Is(err, config.ErrInvalid) {
				t.Errorf("error %v, want config.ErrInvalid", err)
			}
		})
	}
}

// TestCallBudgets: a deployed function's DynamoDB operations each get their function's
// budget; a local stack's (DYNAMODB_ENDPOINT set) get none. Every function has one,
// and a route function's ends before its route context does (29 s less RouteMargin).
func TestCallBudgets(t *testing.T) {
	env := map[string]string{
		"LOG_TABLE": "l", "CONNECTIONS_TABLE": "c", "AGENTS_TABLE": "a", "WS_MANAGEMENT_ENDPOINT": "https://x",
		"DELIVER_FUNCTION": "d", "RUNNER_FUNCTION": "r", "WEBHOOK_QUEUE_URL": "https://sqs/q",
	}
	for _, fn := range []string{"connect", "message", "disconnect", "deliver", "runner", "webhook"} {
		c, err := config.LoadFrom(fn, func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		if c.CallBudget <= 0 || c.CallBudget != config.CallBudgets[fn] {
			t.Errorf("%s: CallBudget %s, want %s", fn, c.CallBudget, config.CallBudgets[fn])
		}
		if fn != "deliver" && fn != "runner" && fn != "webhook" && c.CallBudget >= 29*time.Second-config.RouteMargin {
			t.Errorf("%s: CallBudget %s outlasts the route context", fn, c.CallBudget)
		}
		local, err := config.LoadFrom(fn, func(k string) string {
			if k == "DYNAMODB_ENDPOINT" {
				return "http://127.0.0.1:8000"
			}
			return env[k]
		})
		if err != nil || local.CallBudget != 0 {
			t.Errorf("%s on a local stack: CallBudget %s (%v), want none", fn, local.CallBudget, err)
		}
	}
}

// TestRetentionDays: RETENTION_DAYS is optional (0: keep forever), a whole number of
// days up to MaxRetentionDays; anything else fails the load naming the variable.
func TestRetentionDays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    string
		want int
		ok   bool
	}{
		{"", 0, true}, {"0", 0, true}, {"30", 30, true}, {" 7 ", 7, true}, {"3650", 3650, true},
		{"3651", 0, false}, {"-1", 0, false}, {"1.5", 0, false}, {"forever", 0, false},
	} {
		env := map[string]string{"LOG_TABLE": "l", "CONNECTIONS_TABLE": "c", "AGENTS_TABLE": "a", "DELIVER_FUNCTION": "d",
			"RUNNER_FUNCTION": "r", "WS_MANAGEMENT_ENDPOINT": "https://x", "RETENTION_DAYS": tc.v}
		c, err := config.LoadFrom("runner", func(k string) string { return env[k] })
		if gotOK := err == nil; gotOK != tc.ok || c.RetentionDays != tc.want {
			t.Errorf("RETENTION_DAYS=%q: RetentionDays %d, error %v; want %d, ok %v", tc.v, c.RetentionDays, err, tc.want, tc.ok)
		}
		if err != nil && (!errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "RETENTION_DAYS")) {
			t.Errorf("RETENTION_DAYS=%q: error %v, want config.ErrInvalid naming RETENTION_DAYS", tc.v, err)
		}
	}
}

// TestLambdaAWS: a function's AWS configuration comes from Lambda's environment alone —
// region (AWS_REGION first, AWS_DEFAULT_REGION else) and the role's credentials, the
// session token included — and missing ones are an init error naming the variables.
func TestLambdaAWS(t *testing.T) {
	full := map[string]string{
		"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-east-1",
		"AWS_ACCESS_KEY_ID": "AKIAFN", "AWS_SECRET_ACCESS_KEY": "s3cret", "AWS_SESSION_TOKEN": "tok",
	}
	without := func(names ...string) map[string]string {
		m := map[string]string{}
		for k, v := range full {
			m[k] = v
		}
		for _, n := range names {
			delete(m, n)
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		region  string
		token   string
		wantErr bool
	}{
		{"lambda's variables", full, "eu-west-1", "tok", false},
		{"default region only", without("AWS_REGION"), "us-east-1", "tok", false},
		{"no session token", without("AWS_SESSION_TOKEN"), "eu-west-1", "", false},
		{"no region", without("AWS_REGION", "AWS_DEFAULT_REGION"), "", "", true},
		{"no key id", without("AWS_ACCESS_KEY_ID"), "", "", true},
		{"no secret", without("AWS_SECRET_ACCESS_KEY"), "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.LambdaAWS(func(k string) string { return tc.env[k] })
			if tc.wantErr {
				if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
					t.Fatalf("err = %v, want ErrInvalid naming the variables", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Region != tc.region {
				t.Errorf("region %q, want %q", cfg.Region, tc.region)
			}
			creds, err := cfg.Credentials.Retrieve(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if creds.AccessKeyID != "AKIAFN" || creds.SecretAccessKey != "s3cret" || creds.SessionToken != tc.token {
				t.Errorf("credentials %q/%q/%q, want AKIAFN/s3cret/%q", creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken, tc.token)
			}
		})
	}
}
