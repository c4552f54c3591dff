package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/tools"
)

// quotaFlags are the caps `terret agent quota` sets: each flag writes its key of the
// profile's "quotas" (docs/agents.md, "Quotas").
var quotaFlags = []struct {
	flag, key, usage string
	own              func(tools.Quotas) int64
}{
	{"turns-per-day", "turns_per_day", "turns the agent may run per UTC day", func(q tools.Quotas) int64 { return q.TurnsPerDay }},
	{"tokens-per-month", "tokens_per_month", "model tokens (input plus output) the agent may use per UTC month", func(q tools.Quotas) int64 { return q.TokensPerMonth }},
	{"turn-tokens", "turn_tokens", "model tokens (input plus output, the compactor's included) one turn may use", func(q tools.Quotas) int64 { return q.TurnTokens }},
	{"turn-model-calls", "turn_model_calls", "model calls (the compactor's included) one turn may make", func(q tools.Quotas) int64 { return q.TurnModelCalls }},
}

// runAgentQuota serves `terret agent quota`: with any of the quotaFlags it sets those
// caps in the agent's own profile (the "quotas" key; the rest of the profile is kept
// as stored), 0 removing the agent's own cap so the default profile's applies; without
// them it prints the agent's own caps beside its counters for today and this month.
// Cost: one GetItem, plus one UpdateItem when setting; the next turn start of the agent
// reads the new caps (the per-turn caps: the next model call's check).
func runAgentQuota(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	env := config.LoadCLIEnv()
	fs := flag.NewFlagSet("terret agent quota", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, "terret agent quota --agent ID [--turns-per-day N] [--tokens-per-month N] [--turn-tokens N] [--turn-model-calls N] [flags]")
	agentID := fs.String("agent", "", "agent id (required)")
	values := make([]*int64, len(quotaFlags))
	for i, q := range quotaFlags {
		values[i] = fs.Int64(q.flag, 0, q.usage+"; 0 removes the agent's own cap (the default profile's applies)")
	}
	sf := addStoreFlags(fs, env)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *agentID == "" {
		return fmt.Errorf("%w: --agent is required", errUsage)
	}
	if !auth.ValidAgentID(*agentID) {
		return fmt.Errorf("%w: invalid agent id %q: use 1-128 of A-Z a-z 0-9 . _ -", errUsage, *agentID)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	set := map[string]int64{}
	for i, q := range quotaFlags {
		if !given[q.flag] {
			continue
		}
		if v := *values[i]; v < 0 {
			return fmt.Errorf("%w: --%s must be 0 (no cap of the agent's own) or more, got %d", errUsage, q.flag, v)
		}
		set[q.key] = *values[i]
	}
	st, err := sf.openAgents(ctx, env)
	if err != nil {
		return err
	}
	raw, err := agent.GetProfile(ctx, st.db, st.agents, *agentID)
	if err != nil {
		return err
	}
	if len(set) == 0 {
		return showQuota(ctx, st, *agentID, raw, stdout)
	}
	updated, err := withQuotas(raw, set)
	if err != nil {
		return fmt.Errorf("stored profile of %s: %w", *agentID, err)
	}
	if updated == "{}" {
		if raw != "" {
			if _, err := agent.DeleteProfile(ctx, st.db, st.agents, *agentID); err != nil {
				return err
			}
		}
	} else if err := agent.PutProfile(ctx, st.db, st.agents, *agentID, updated); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "set the quotas of %s; its next turn start checks them\n", *agentID)
	return showQuota(ctx, st, *agentID, updated, stdout)
}

// withQuotas returns the stored profile raw ("" for none) with the caps in set written
// into its "quotas" (a 0 removes that cap), every other key kept as it was. The result
// must decode as a profile.
func withQuotas(raw string, set map[string]int64) (string, error) {
	prof := map[string]json.RawMessage{}
	if raw != "" {
		if err := json.Unmarshal([]byte(raw), &prof); err != nil {
			return "", fmt.Errorf("not a JSON object: %w", err)
		}
	}
	quotas := map[string]json.RawMessage{}
	if q, ok := prof["quotas"]; ok {
		if err := json.Unmarshal(q, &quotas); err != nil {
			return "", fmt.Errorf("quotas: not a JSON object: %w", err)
		}
	}
	for k, v := range set {
		if v == 0 {
			delete(quotas, k)
		} else {
			quotas[k] = json.RawMessage(fmt.Sprint(v))
		}
	}
	if len(quotas) == 0 {
		delete(prof, "quotas")
	} else {
		b, _ := json.Marshal(quotas)
		prof["quotas"] = b
	}
	b, err := json.Marshal(prof)
	if err != nil {
		return "", err
	}
	if _, err := tools.DecodeProfile(b); err != nil {
		return "", err
	}
	var out bytes.Buffer
	_ = json.Compact(&out, b)
	return out.String(), nil
}

// showQuota prints the agent's own caps (from its stored profile raw) beside what
// counts against them today and this month.
func showQuota(ctx context.Context, st store, agentID, raw string, stdout io.Writer) error {
	var own tools.Quotas
	if raw != "" {
		p, err := tools.DecodeProfile([]byte(raw))
		if err != nil {
			return fmt.Errorf("stored profile of %s: %w", agentID, err)
		}
		own = p.Quotas
	}
	c, err := agent.Usage(ctx, st.db, st.agents, agentID)
	if err != nil {
		return err
	}
	capText := func(v int64) string {
		if v == 0 {
			return "none of its own (the default profile's applies)"
		}
		return fmt.Sprint(v)
	}
	day, month := c.QuotaDay, c.QuotaMonth
	if day == "" {
		day, month = "no turn yet", "no turn yet"
	} else {
		day += " UTC"
		month += " UTC"
	}
	fmt.Fprintf(stdout, "agent             %s\nturns_per_day     %s\n  turns today     %d (%s)\ntokens_per_month  %s\n  tokens month    %d (%s)\nturn_tokens       %s\nturn_model_calls  %s\n",
		agentID, capText(own.TurnsPerDay), c.QuotaTurns, day, capText(own.TokensPerMonth), c.QuotaTokens, month,
		capText(own.TurnTokens), capText(own.TurnModelCalls))
	return nil
}
