package devstack

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/emulator"
)

// recorder keeps the messages and attributes logged to it.
type recorder struct{ lines []string }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	line := rec.Message
	rec.Attrs(func(a slog.Attr) bool { line += " " + a.Key + "=" + a.Value.String(); return true })
	r.lines = append(r.lines, line)
	return nil
}

// TestPassKeys: the profile's keys go to exactly the functions that read AGENT_PROFILE
// (message, runner, and http, which serves frames over HTTP through the runtime), never over a variable the function already has; a function
// whose variables exceed Lambda's 4 KB is warned about by name and size, and no log
// line carries a key's value.
func TestPassKeys(t *testing.T) {
	local := emulator.Local{StackName: "terret", Region: "us-east-1", AccountID: "123456789012",
		Tables:             map[string]string{"LogTable": "terret-log", "ConnectionsTable": "terret-connections", "AgentsTable": "terret-agents"},
		ManagementEndpoint: "http://127.0.0.1:1/local",
		Queues:             map[string]string{"WebhookQueue": "http://127.0.0.1:2/000000000000/webhook"}}
	tests := []struct {
		name    string
		profile string // AgentProfile
		keys    map[string]string
		hooks   map[string]string            // the webhooks' secret_env variables
		want    map[string]map[string]string // function → variables it must have; no other function has a key's value
		warns   []string                     // substrings of the log lines, in order
	}{
		{name: "keys to the agent's functions only",
			keys: map[string]string{"ACME_KEY": "sk-a-VALUE", "LOCAL_KEY": "sk-l-VALUE"},
			want: map[string]map[string]string{"message": {"ACME_KEY": "sk-a-VALUE", "LOCAL_KEY": "sk-l-VALUE"}, "runner": {"ACME_KEY": "sk-a-VALUE", "LOCAL_KEY": "sk-l-VALUE"},
				"http": {"ACME_KEY": "sk-a-VALUE", "LOCAL_KEY": "sk-l-VALUE"}}},
		{name: "a taken name is not overwritten",
			keys:  map[string]string{"LOG_TABLE": "sk-x", "AWS_SECRET_ACCESS_KEY": "sk-y"},
			want:  map[string]map[string]string{"message": {"LOG_TABLE": "terret-log"}, "runner": {"LOG_TABLE": "terret-log"}, "http": {"LOG_TABLE": "terret-log"}},
			warns: []string{"function=http variable=AWS_SECRET_ACCESS_KEY", "function=http variable=LOG_TABLE", "function=message variable=AWS_SECRET_ACCESS_KEY", "function=message variable=LOG_TABLE", "function=runner variable=AWS_SECRET_ACCESS_KEY", "function=runner variable=LOG_TABLE"}},
		{name: "over 4 KB",
			profile: `{"system": "` + strings.Repeat("x", 4<<10) + `"}`,
			keys:    map[string]string{"ACME_KEY": "sk-a-VALUE"},
			want:    map[string]map[string]string{"message": {"ACME_KEY": "sk-a-VALUE"}, "runner": {"ACME_KEY": "sk-a-VALUE"}, "http": {"ACME_KEY": "sk-a-VALUE"}},
			warns:   []string{"exceed Lambda's 4 KB", "exceed Lambda's 4 KB", "exceed Lambda's 4 KB", "exceed Lambda's 4 KB"}}, // message, runner, webhook, http
		{name: "webhook secrets to the webhook function only",
			keys:  map[string]string{"ACME_KEY": "sk-a-VALUE"},
			hooks: map[string]string{"HOOK_SECRET": "whsec_VALUE"},
			want: map[string]map[string]string{"message": {"ACME_KEY": "sk-a-VALUE"}, "runner": {"ACME_KEY": "sk-a-VALUE"}, "webhook": {"HOOK_SECRET": "whsec_VALUE"},
				"http": {"ACME_KEY": "sk-a-VALUE"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			local.Parameters = map[string]string{"AgentProfile": tt.profile}
			fns, err := emulator.Functions(terretws.Template, local)
			if err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			(&defaultProfile{keys: tt.keys, hookKeys: tt.hooks}).pass(fns, slog.New(rec))
			for _, fn := range fns {
				want := tt.want[fn.Name]
				for k, v := range want {
					if fn.Env[k] != v {
						t.Errorf("%s: %s=%q, want %q", fn.Name, k, fn.Env[k], v)
					}
				}
				for k, v := range tt.keys {
					if _, ok := want[k]; !ok && fn.Env[k] == v {
						t.Errorf("%s has the key %s: want it only in the functions that run the agent", fn.Name, k)
					}
				}
				for k, v := range tt.hooks {
					if _, ok := want[k]; !ok && fn.Env[k] == v {
						t.Errorf("%s has the webhook secret %s: want it only in the webhook function", fn.Name, k)
					}
				}
			}
			// Map order: compare the sorted lines' substrings one for one.
			lines := append([]string(nil), rec.lines...)
			slices.Sort(lines)
			if len(lines) != len(tt.warns) {
				t.Fatalf("log lines %q, want %d containing %q", lines, len(tt.warns), tt.warns)
			}
			for i, w := range tt.warns {
				if !strings.Contains(lines[i], w) {
					t.Errorf("log line %q, want it to contain %q", lines[i], w)
				}
				for _, v := range tt.keys {
					if strings.Contains(lines[i], v) {
						t.Errorf("log line %q carries a key's value", lines[i])
					}
				}
			}
		})
	}
}
