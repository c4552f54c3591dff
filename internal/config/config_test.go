package config_test

import (
	"testing"

	"github.com/terret/terret-ws/internal/config"
)

// TestOriginSecret: connect reads ORIGIN_SECRET (optional, empty: no check).
func TestOriginSecret(t *testing.T) {
	t.Parallel()
	env := map[string]string{"LOG_TABLE": "l", "CONNECTIONS_TABLE": "c", "DELIVER_FUNCTION": "d", "WS_MANAGEMENT_ENDPOINT": "https://x"}
	for _, want := range []string{"", "s3cret"} {
		env["ORIGIN_SECRET"] = want
		c, err := config.LoadFrom("connect", func(k string) string { return env[k] })
		if err != nil || c.OriginSecret != want {
			t.Errorf("LoadFrom(connect) with ORIGIN_SECRET=%q: OriginSecret %q, %v", want, c.OriginSecret, err)
		}
	}
}
