package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testQuotaCommand: a cap set with `terret agent quota` takes effect at the next turn
// start of a subscribed client's agent — the turn over the cap ends rejected naming
// the quota — and raising it lets the queued wake run, the rest of the agent's own
// profile kept. Bad values exit 2 naming the flag and store nothing.
func testQuotaCommand(t *testing.T, p *ownDev) {
	t.Helper()
	own := filepath.Join(p.dir, "quota1.json")
	writeFile(t, own, `{"system": "You are QUOTA."}`)
	if out, errOut, code := p.run(t, "agent", "put", "--agent", "quota1", "--profile", own); code != 0 {
		t.Fatalf("agent put: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := p.run(t, "agent", "quota", "--agent", "quota1", "--turns-per-day", "1")
	if code != 0 || !strings.Contains(out, "turns_per_day     1\n") {
		t.Fatalf("agent quota --turns-per-day 1: exit %d\n%s%s", code, out, errOut)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--agent", "quota1", "--turns-per-day", "-1"}, "--turns-per-day must be 0"},
		{[]string{"--agent", "quota1", "--turn-tokens", "-5"}, "--turn-tokens must be 0"},
		{[]string{"--agent", "quota1", "--turn-model-calls", "-1"}, "--turn-model-calls must be 0"},
		{[]string{"--agent", "quota1", "--tokens-per-month", "lots"}, "-tokens-per-month"},
		{[]string{"--turns-per-day", "5"}, "--agent is required"},
		{[]string{"--agent", "no/such", "--turns-per-day", "5"}, "invalid agent id"},
	} {
		out, errOut, code := p.run(t, append([]string{"agent", "quota"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("agent quota %v: exit %d, stdout %q, stderr %q; want exit 2 naming %q", c.args, code, out, errOut, c.want)
		}
	}

	a := p.connect(t, "quota1")
	if end := lastEnd(t, a.turn("first")); end.Payload.Status != "completed" {
		t.Fatalf("first turn ended %+v, want completed", end.Payload)
	}
	now := time.Now().UTC()
	y, m, d := now.Date()
	reason := "quota: turns_per_day 1 reached; resets at " + time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)
	evs := a.turn("second")
	if end := lastEnd(t, evs); end.Payload.Status != "rejected" || end.Payload.Reason != reason {
		t.Fatalf("second turn ended %+v, want rejected with reason %q", end.Payload, reason)
	}
	for _, ev := range evs {
		if ev.Type == "user/message" {
			t.Errorf("a refused turn logged %+v; want only turn/start and turn/end", ev)
		}
	}
	if out, _, code := p.run(t, "agent", "quota", "--agent", "quota1"); code != 0 ||
		!strings.Contains(out, "turns_per_day     1\n  turns today     1 (") || !strings.Contains(out, "tokens_per_month  none of its own") {
		t.Errorf("agent quota (show) = %q exit %d; want the cap 1, 1 turn today, no token cap of its own", out, code)
	}

	if out, errOut, code := p.run(t, "agent", "quota", "--agent", "quota1", "--turns-per-day", "5", "--tokens-per-month", "1000000",
		"--turn-tokens", "300000", "--turn-model-calls", "40"); code != 0 ||
		!strings.Contains(out, "turn_tokens       300000\nturn_model_calls  40\n") {
		t.Fatalf("agent quota raise: exit %d\n%s%s", code, out, errOut)
	}
	out, _, _ = p.run(t, "agent", "get", "--agent", "quota1")
	var prof map[string]any
	if json.Unmarshal([]byte(out), &prof) != nil || prof["system"] != "You are QUOTA." ||
		!strings.Contains(out, `"turns_per_day": 5`) || !strings.Contains(out, `"tokens_per_month": 1000000`) ||
		!strings.Contains(out, `"turn_tokens": 300000`) || !strings.Contains(out, `"turn_model_calls": 40`) {
		t.Errorf("agent get after quota = %s; want the profile kept and the new caps", out)
	}
	// The queued wake ("second") runs at the next stimulus, first; "third" joins it.
	evs = a.turn("third")
	if end := lastEnd(t, evs); end.Payload.Status != "completed" {
		t.Fatalf("turn after raising the quota ended %+v, want completed", end.Payload)
	}
	var woke bool
	for _, ev := range evs {
		woke = woke || (ev.Type == "user/message" && ev.Payload.Text == "second")
	}
	if !woke {
		t.Errorf("after raising the quota the queued wake did not run: events %+v", evs)
	}

	// 0 removes the agent's own cap; with none left, the quotas key goes.
	if _, errOut, code := p.run(t, "agent", "quota", "--agent", "quota1", "--turns-per-day", "0", "--tokens-per-month", "0",
		"--turn-tokens", "0", "--turn-model-calls", "0"); code != 0 {
		t.Fatalf("agent quota 0: exit %d %s", code, errOut)
	}
	if out, _, _ = p.run(t, "agent", "get", "--agent", "quota1"); strings.Contains(out, "quotas") || !strings.Contains(out, "You are QUOTA.") {
		t.Errorf("agent get after removing both caps = %s; want the profile without quotas", out)
	}
}

// TestWithQuotas: the caps are written into the stored profile's "quotas", every other
// key kept; 0 removes a cap and an empty "quotas" goes.
func TestWithQuotas(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		raw  string
		set  map[string]int64
		want string
	}{
		{"", map[string]int64{"turns_per_day": 3}, `{"quotas":{"turns_per_day":3}}`},
		{`{"system":"S","quotas":{"tokens_per_month":9}}`, map[string]int64{"turns_per_day": 3}, `{"quotas":{"tokens_per_month":9,"turns_per_day":3},"system":"S"}`},
		{`{"system":"S","quotas":{"turns_per_day":9}}`, map[string]int64{"turns_per_day": 0}, `{"system":"S"}`},
		{`{"quotas":{"turns_per_day":9}}`, map[string]int64{"turns_per_day": 0}, `{}`},
	} {
		got, err := withQuotas(c.raw, c.set)
		if err != nil || got != c.want {
			t.Errorf("withQuotas(%s, %v) = %s, %v; want %s", c.raw, c.set, got, err, c.want)
		}
	}
	if _, err := withQuotas(`{"quotas":{"turns_per_hour":1}}`, map[string]int64{"turns_per_day": 3}); err == nil {
		t.Error("withQuotas kept an unknown quota without error")
	}
}
