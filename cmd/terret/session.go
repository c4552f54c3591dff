package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/sessiondata"
	"github.com/terret/terret-ws/internal/sessionlog"
)

const sessionUsage = `usage: terret session export|reset|delete --agent ID [flags]

  export   print the agent's log as JSON lines, each line the envelope a subscriber
           receives, in seq order (--from SEQ, --to SEQ: an inclusive range; default
           the whole log up to its tip when the export starts); progress on stderr
  reset    start the session over: a new log from seq 0 with a new epoch, the
           runtime state cleared (inbox, open turn, policy, model roles, checkpoint);
           tokens and profile kept. A running turn stops; the live connection gets
           error{internal} and is closed
  delete   erase everything kept about the agent: log, runtime state, tokens (the
           live connection gets unauthorized), profile; only the usage counters stay.
           Run it again to finish an interrupted delete

The tables are the running terret dev's (--addr picks one when several run), those at
--dynamodb-endpoint, or deployed ones (--region with --log-table, --connections-table
and --agents-table). Run 'terret session export -h' for the flags.
`

func runSession(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sub, err := pickSubcommand("session", args, []string{"export", "reset", "delete"}, sessionUsage, stdout)
	if err != nil {
		return err
	}
	env := config.LoadCLIEnv()
	fs := flag.NewFlagSet("terret session "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	synopsis := "terret session " + sub + " --agent ID [flags]"
	if sub == "export" {
		synopsis = "terret session export --agent ID [--from SEQ] [--to SEQ] [flags]"
	}
	setUsage(fs, synopsis)
	agentID := fs.String("agent", "", "agent id (required)")
	var from, to *string
	if sub == "export" {
		from = fs.String("from", "0", "first seq to print (inclusive)")
		to = fs.String("to", "", "last seq to print (inclusive; default: the tip when the export starts)")
	}
	logTable := fs.String("log-table", "", "log table name (default: terret dev's; required against AWS)")
	sf := addStoreFlags(fs, env)
	if err := fs.Parse(args[1:]); err != nil {
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
	lo, hi := int64(0), int64(-1)
	if sub == "export" {
		var err error
		if lo, err = seqFlag("--from", *from); err != nil {
			return err
		}
		if *to != "" {
			if hi, err = seqFlag("--to", *to); err != nil {
				return err
			}
			if hi < lo {
				return fmt.Errorf("%w: --to %d is below --from %d", errUsage, hi, lo)
			}
		}
	}
	deployed := *sf.region != "" || *sf.table != ""
	if deployed && (*logTable == "" || *sf.agentsTable == "") {
		return fmt.Errorf("%w: deployed tables need --log-table, --connections-table and --agents-table", errUsage)
	}
	st, err := sf.open(ctx, env)
	if err != nil {
		return err
	}
	if *logTable != "" {
		st.log = *logTable
	}
	ops := sessiondata.New(st.db, sessiondata.Tables{Log: st.log, Connections: st.connections, Agents: st.agents},
		sessiondata.Options{Progress: stderr})
	switch sub {
	case "export":
		_, err = ops.Export(ctx, *agentID, lo, hi, stdout)
		if errors.Is(err, sessionlog.ErrNotFound) {
			return fmt.Errorf("agent %q has no session", *agentID)
		}
		return err
	case "reset":
		epoch, err := ops.Reset(ctx, *agentID)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "session of %s reset: new log from seq 0, epoch %s\n", *agentID, epoch)
	case "delete":
		n, err := ops.Delete(ctx, *agentID)
		if err != nil {
			return fmt.Errorf("%w (run the delete again to finish it)", err)
		}
		fmt.Fprintf(stdout, "session of %s deleted: %d items erased\n", *agentID, n)
	}
	return nil
}

// seqFlag parses a seq flag's value: a non-negative integer.
func seqFlag(name, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s must be a seq (a non-negative integer), got %q", errUsage, name, v)
	}
	return n, nil
}

// pickSubcommand returns args[0] when it is one of subs (the subcommands of cmd, in
// usage order); for -h, --help or help it prints usage and returns flag.ErrHelp.
func pickSubcommand(cmd string, args, subs []string, usage string, stdout io.Writer) (string, error) {
	if len(args) == 0 {
		return "", fmt.Errorf("%w: %s needs a subcommand: %s or %s", errUsage, cmd, strings.Join(subs[:len(subs)-1], ", "), subs[len(subs)-1])
	}
	switch sub := args[0]; {
	case slices.Contains(subs, sub):
		return sub, nil
	case sub == "-h" || sub == "-help" || sub == "--help" || sub == "help":
		fmt.Fprint(stdout, usage)
		return "", flag.ErrHelp
	default:
		return "", fmt.Errorf("%w: unknown %s subcommand %q (%s)", errUsage, cmd, sub, strings.Join(subs, ", "))
	}
}
