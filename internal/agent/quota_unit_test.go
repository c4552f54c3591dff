package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/terret/terret-ws/internal/tools"
)

func TestQuotaText(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC)
	tests := []struct {
		name                               string
		turnsPerDay, tokensPerMonth, turns int64
		tokens                             int64
		want                               string
	}{
		{"no caps", 0, 0, 100, 1e9, ""},
		{"under both", 20, 1000, 19, 999, ""},
		{"turns reached", 20, 1000, 20, 0, "quota: turns_per_day 20 reached; resets at 2027-01-01T00:00:00Z"},
		{"tokens reached", 20, 1000, 0, 1500, "quota: tokens_per_month 1000 reached; resets at 2027-01-01T00:00:00Z"},
	}
	for _, tc := range tests {
		if got := quotaText(tc.turnsPerDay, tc.tokensPerMonth, tc.turns, tc.tokens, now); got != tc.want {
			t.Errorf("%s: quotaText = %q, want %q", tc.name, got, tc.want)
		}
	}
	mid := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if got, want := quotaText(0, 5, 0, 5, mid), "quota: tokens_per_month 5 reached; resets at 2027-01-01T00:00:00Z"; got != want {
		t.Errorf("quotaText mid-month = %q, want %q", got, want)
	}
}

// TestModelDims: a model no profile or deployment setting names counts as "other".
func TestModelDims(t *testing.T) {
	t.Parallel()
	c := &core{cfg: Config{MainModel: "acme/gpt-4o", TitlerModel: "scripted"}}
	prof := tools.Profile{Models: tools.Models{Main: "acme/gpt-4o-mini"}}
	for spec, want := range map[string]string{
		"acme/gpt-4o":      "[{provider acme} {model gpt-4o}]",
		"acme/gpt-4o-mini": "[{provider acme} {model gpt-4o-mini}]",
		"scripted":         "[{provider scripted} {model scripted}]",
		"acme/chosen-by-a": "[{provider acme} {model other}]",
	} {
		if got := fmt.Sprint(c.modelDims(prof, spec)); got != want {
			t.Errorf("modelDims(%q) = %s, want %s", spec, got, want)
		}
	}
}
