package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/tools"
)

func demo(t *testing.T, name string) tools.Tool {
	t.Helper()
	set, err := tools.NewRegistry().Build(tools.DefaultProfile())
	if err != nil {
		t.Fatalf("build default profile: %v", err)
	}
	tool, ok := set.Lookup(name)
	if !ok {
		t.Fatalf("no tool %s", name)
	}
	return tool
}

func TestDemoToolDefinitions(t *testing.T) {
	t.Parallel()
	want := map[string]struct {
		conc     tools.Concurrency
		approval bool
	}{
		"sleep":        {tools.Parallel, false},
		"echo":         {tools.Serial, false},
		"clock":        {tools.Parallel, false},
		"guarded_echo": {tools.Serial, true},
	}
	set, err := tools.NewRegistry().Build(tools.DefaultProfile())
	if err != nil {
		t.Fatal(err)
	}
	defs := set.Definitions()
	if len(defs) != len(want) {
		t.Fatalf("default profile has %d tools, want %d", len(defs), len(want))
	}
	for _, d := range defs {
		w, ok := want[d.Name]
		if !ok {
			t.Fatalf("unexpected tool %s", d.Name)
		}
		if d.Concurrency != w.conc || d.NeedsApproval != w.approval {
			t.Errorf("%s: concurrency %s approval %v, want %s %v", d.Name, d.Concurrency, d.NeedsApproval, w.conc, w.approval)
		}
		if !json.Valid(d.Schema) {
			t.Errorf("%s: schema is not JSON", d.Name)
		}
	}
}

func TestDemoToolCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		tool, args, want string
		err              error
	}{
		{"echo", `{"text":"hi"}`, `{"text":"hi"}`, nil},
		{"guarded_echo", `{"text":"x"}`, `{"text":"x"}`, nil},
		{"sleep", `{"ms":20}`, `{"slept_ms":20}`, nil},
		{"echo", `{}`, "", tools.ErrBadArgs},
		{"sleep", `{"ms":-1}`, "", tools.ErrBadArgs},
		{"sleep", `{"ms":1.5}`, "", tools.ErrBadArgs},
	}
	for _, c := range cases {
		start := time.Now()
		got, err := demo(t, c.tool).Call(ctx, json.RawMessage(c.args))
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%s %s: err %v, want %v", c.tool, c.args, err, c.err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("%s %s = %s, %v; want %s", c.tool, c.args, got, err, c.want)
		}
		if c.tool == "sleep" && time.Since(start) < 20*time.Millisecond {
			t.Errorf("sleep returned after %v", time.Since(start))
		}
	}
	got, err := demo(t, "clock").Call(ctx, json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ UTC string }
	if err := json.Unmarshal(got, &c); err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse("2006-01-02T15:04:05.000000Z", c.UTC)
	if err != nil || time.Since(at).Abs() > time.Minute {
		t.Errorf("clock returned %s (%v)", got, err)
	}
	sleepCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := demo(t, "sleep").Call(sleepCtx, json.RawMessage(`{"ms":5000}`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("sleep past its context: %v", err)
	}
}

type fixedTool struct{ def tools.Definition }

func (f fixedTool) Definition() tools.Definition { return f.def }
func (f fixedTool) Call(context.Context, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{"kind":"custom"}`), nil
}

func TestProfileKindsAndOverrides(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	var gotSpec string
	if err := reg.RegisterKind("custom", func(cfg tools.ToolConfig) (tools.Tool, error) {
		gotSpec = string(cfg.Spec)
		return fixedTool{def: tools.Definition{Name: "ignored", Concurrency: tools.Parallel}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := reg.RegisterSetKind("many", func(cfg tools.ToolConfig) ([]tools.Tool, error) {
		return []tools.Tool{fixedTool{def: tools.Definition{Name: "m1"}}, fixedTool{def: tools.Definition{Name: "m2"}}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	p, err := tools.DecodeProfile([]byte(`{"system":"S","tools":[
		{"name":"echo","needs_approval":true,"concurrency":"parallel"},
		{"name":"mine","kind":"custom","description":"D","spec":{"fn":"x"}},
		{"name":"srv","kind":"many"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := reg.Build(p)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range set.Definitions() {
		names = append(names, d.Name)
	}
	if strings.Join(names, ",") != "echo,mine,m1,m2" {
		t.Fatalf("tools %v", names)
	}
	echo, _ := set.Lookup("echo")
	if d := echo.Definition(); !d.NeedsApproval || d.Concurrency != tools.Parallel {
		t.Errorf("echo overrides not applied: %+v", d)
	}
	mine, _ := set.Lookup("mine")
	if d := mine.Definition(); d.Description != "D" || d.Concurrency != tools.Parallel {
		t.Errorf("custom tool definition %+v", d)
	}
	if gotSpec != `{"fn":"x"}` {
		t.Errorf("builder got spec %s", gotSpec)
	}

	for _, bad := range []string{
		`{"tools":[{"name":"x","kind":"nope"}]}`,
		`{"tools":[{"name":"echo"},{"name":"echo"}]}`,
		`{"tools":[{"name":"nosuchbuiltin"}]}`,
	} {
		p, err := tools.DecodeProfile([]byte(bad))
		if err == nil {
			_, err = reg.Build(p)
		}
		if err == nil {
			t.Errorf("profile %s built", bad)
		}
	}
	for _, bad := range []string{`{"tools":[{"kind":"x"}]}`, `{"unknown":1}`, `{"tools":[{"name":"a","concurrency":"wild"}]}`} {
		if _, err := tools.DecodeProfile([]byte(bad)); !errors.Is(err, tools.ErrBadProfile) {
			t.Errorf("DecodeProfile(%s) = %v, want ErrBadProfile", bad, err)
		}
	}
}

func TestParseProfileAndMerge(t *testing.T) {
	t.Parallel()
	def, err := tools.ParseProfile("")
	if err != nil || len(def.Tools) != 4 || def.System != tools.DefaultSystem {
		t.Fatalf("default profile %+v, %v", def, err)
	}
	path := filepath.Join(t.TempDir(), "profile.json")
	if err := os.WriteFile(path, []byte(`{"system":"from file","tools":[{"name":"echo"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile, err := tools.ParseProfile(path)
	if err != nil || fromFile.System != "from file" || len(fromFile.Tools) != 1 {
		t.Fatalf("profile from file %+v, %v", fromFile, err)
	}
	inline, err := tools.ParseProfile(`{"tools":[]}`)
	if err != nil {
		t.Fatal(err)
	}
	merged := def.Merge(inline)
	if merged.System != tools.DefaultSystem || len(merged.Tools) != 0 {
		t.Errorf("an override with tools [] must remove every tool, keep the system: %+v", merged)
	}
	if m := def.Merge(tools.Profile{System: "other"}); m.System != "other" || len(m.Tools) != 4 {
		t.Errorf("an override without tools must keep the default's: %+v", m)
	}
}

func TestProfileQuotas(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, json string
		want       tools.Quotas
		problem    string // "" when valid
	}{
		{"both", `{"quotas":{"turns_per_day":20,"tokens_per_month":100000}}`, tools.Quotas{TurnsPerDay: 20, TokensPerMonth: 100000}, ""},
		{"none", `{}`, tools.Quotas{}, ""},
		{"per turn", `{"quotas":{"turn_tokens":50000,"turn_model_calls":40}}`, tools.Quotas{TurnTokens: 50000, TurnModelCalls: 40}, ""},
		{"negative per turn", `{"quotas":{"turn_model_calls":-2}}`, tools.Quotas{}, "quotas.turn_model_calls: must be 0"},
		{"unknown quota", `{"quotas":{"turns_per_hour":3}}`, tools.Quotas{}, "quotas.turns_per_hour: unknown quota"},
		{"negative", `{"quotas":{"turns_per_day":-1}}`, tools.Quotas{}, "quotas.turns_per_day: must be 0"},
		{"not a number", `{"quotas":{"tokens_per_month":"lots"}}`, tools.Quotas{}, "quotas.tokens_per_month: want int64"},
		{"not an object", `{"quotas":5}`, tools.Quotas{}, "quotas: want an object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tools.DecodeProfile([]byte(tc.json))
			if tc.problem == "" {
				if err != nil || p.Quotas != tc.want {
					t.Fatalf("DecodeProfile(%s) = %+v, %v; want quotas %+v", tc.json, p.Quotas, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Fatalf("DecodeProfile(%s) error %v; want one containing %q", tc.json, err, tc.problem)
			}
		})
	}
	def := tools.Profile{Quotas: tools.Quotas{TurnsPerDay: 5, TokensPerMonth: 1000}}
	if got := def.Merge(tools.Profile{Quotas: tools.Quotas{TurnsPerDay: 50, TurnTokens: 9}}).Quotas; got != (tools.Quotas{TurnsPerDay: 50, TokensPerMonth: 1000, TurnTokens: 9}) {
		t.Errorf("merged quotas %+v; want the override's turns_per_day and the default's tokens_per_month", got)
	}
}

func TestProfileContext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, json string
		want       tools.Context
		compactor  string
		problem    string // "" when valid
	}{
		{"budget", `{"context":{"budget_tokens":4000}}`, tools.Context{BudgetTokens: 4000}, "", ""},
		{"compactor", `{"models":{"compactor":"scripted"}}`, tools.Context{}, "scripted", ""},
		{"none", `{}`, tools.Context{}, "", ""},
		{"too small", `{"context":{"budget_tokens":100}}`, tools.Context{}, "", "context.budget_tokens: must be at least 256"},
		{"unknown key", `{"context":{"window":5}}`, tools.Context{}, "", "context.window: unknown key"},
		{"not a number", `{"context":{"budget_tokens":"big"}}`, tools.Context{}, "", "context.budget_tokens: want int64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tools.DecodeProfile([]byte(tc.json))
			if tc.problem == "" {
				if err != nil || p.Context != tc.want || p.Models.Compactor != tc.compactor {
					t.Fatalf("DecodeProfile(%s) = %+v %q, %v; want %+v %q", tc.json, p.Context, p.Models.Compactor, err, tc.want, tc.compactor)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Fatalf("DecodeProfile(%s) error %v; want one containing %q", tc.json, err, tc.problem)
			}
		})
	}
	def := tools.Profile{Context: tools.Context{BudgetTokens: 9000}, Models: tools.Models{Compactor: "a/b"}}
	if got := def.Merge(tools.Profile{Context: tools.Context{BudgetTokens: 3000}}); got.Context.BudgetTokens != 3000 || got.Models.Compactor != "a/b" {
		t.Errorf("merged %+v; want the override's budget and the default's compactor", got)
	}
}

func TestProfileRetentionDays(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, json string
		want       int64
		problem    string // "" when valid
	}{
		{"set", `{"retention_days":30}`, 30, ""},
		{"bound", `{"retention_days":3650}`, 3650, ""},
		{"none", `{}`, 0, ""},
		{"zero", `{"retention_days":0}`, 0, "retention_days: must be a whole number of days from 1 to 3650, got 0"},
		{"negative", `{"retention_days":-1}`, 0, "retention_days: must be a whole number of days from 1 to 3650, got -1"},
		{"too long", `{"retention_days":3651}`, 0, "retention_days: must be a whole number of days from 1 to 3650, got 3651"},
		{"fraction", `{"retention_days":1.5}`, 0, "retention_days: want int64"},
		{"text", `{"retention_days":"30"}`, 0, "retention_days: want int64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tools.DecodeProfile([]byte(tc.json))
			if tc.problem == "" {
				if err != nil || p.RetentionDays != tc.want {
					t.Fatalf("DecodeProfile(%s) = %d, %v; want %d", tc.json, p.RetentionDays, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.problem) {
				t.Fatalf("DecodeProfile(%s) error %v; want one containing %q", tc.json, err, tc.problem)
			}
		})
	}
	def := tools.Profile{RetentionDays: 90}
	if got := def.Merge(tools.Profile{}).RetentionDays; got != 90 {
		t.Errorf("an override without retention_days gives %d; want the default's 90", got)
	}
	if got := def.Merge(tools.Profile{RetentionDays: 7}).RetentionDays; got != 7 {
		t.Errorf("an override with retention_days 7 gives %d; want 7", got)
	}
}
