package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
)

// runUsage prints an agent's metered usage: turns, model calls, tokens in and out, tool
// calls and wall time, as kept by the runtime's per-agent counters, and what counts
// against its quotas today and this month.
func runUsage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	env := config.LoadCLIEnv()
	fs := flag.NewFlagSet("terret usage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, "terret usage --agent ID [--json] [flags]")
	agentID := fs.String("agent", "", "agent id (required)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
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
	if !auth.ValidAgentID(*agentID) {
		return fmt.Errorf("%w: --agent is required (1-128 of A-Z a-z 0-9 . _ -)", errUsage)
	}
	st, err := sf.openAgents(ctx, env)
	if err != nil {
		return err
	}
	c, err := agent.Usage(ctx, st.db, st.agents, *agentID)
	if err != nil {
		return err
	}
	if *asJSON {
		b, _ := json.Marshal(c)
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	fmt.Fprintf(stdout, "agent         %s\nturns         %d\nmodel calls   %d\ninput tokens  %d\noutput tokens %d\ntool calls    %d\nwall time     %.3fs\n",
		*agentID, c.Turns, c.ModelCalls, c.InputTokens, c.OutputTokens, c.ToolCalls, float64(c.WallMS)/1000)
	if c.QuotaDay != "" {
		fmt.Fprintf(stdout, "turns today   %d (%s UTC, against turns_per_day)\ntokens month  %d (%s UTC, against tokens_per_month)\n",
			c.QuotaTurns, c.QuotaDay, c.QuotaTokens, c.QuotaMonth)
	}
	return nil
}
