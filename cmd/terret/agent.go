package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/terret/terret-ws/internal/agent"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/config/useraws"
	"github.com/terret/terret-ws/internal/profile"
	"github.com/terret/terret-ws/internal/rules"
	"github.com/terret/terret-ws/internal/service/agentservice"
	"github.com/terret/terret-ws/internal/tools"
)

const agentUsage = `usage: terret agent <subcommand> [flags]

subcommands:
  put --agent ID --profile FILE   check FILE and store it as agent ID's own profile
  get --agent ID                  print agent ID's own profile as JSON
  list                            list the agents that have their own profile
  delete --agent ID               remove agent ID's own profile (the default applies)
  quota --agent ID [--turns-per-day N] [--tokens-per-month N]
                                  set agent ID's own quotas (0 removes one); without
                                  limits, show them beside today's and this month's use

An agent's own profile is merged over the default profile; its next turn uses it.
The store is found as 'terret token' finds it. See docs/agents.md.
`

// errBadProfile marks a profile put refused: exit status 1, the problems on stderr.
var errBadProfile = errors.New("invalid profile")

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: agent needs a subcommand: put, get, list, delete or quota", errUsage)
	}
	sub := args[0]
	switch sub {
	case "quota":
		return runAgentQuota(ctx, args[1:], stdout, stderr)
	case "put", "get", "list", "delete":
	case "-h", "--help", "help":
		fmt.Fprint(stdout, agentUsage)
		return nil
	default:
		return fmt.Errorf("%w: unknown agent subcommand %q (put, get, list, delete, quota)", errUsage, sub)
	}
	env := config.LoadCLIEnv()
	fs := flag.NewFlagSet("terret agent "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var agentID, file, base *string
	if sub != "list" {
		agentID = fs.String("agent", "", "agent id (required)")
	}
	if sub == "put" {
		file = fs.String("profile", "", "the profile's JSON file (required)")
		base = fs.String("default-profile", "", "the default profile the agent's is merged over, for the check (default: terret.json in the working directory if there is one, else the demo profile)")
	}
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
	if agentID != nil {
		if *agentID == "" {
			return fmt.Errorf("%w: --agent is required", errUsage)
		}
		if !auth.ValidAgentID(*agentID) {
			return fmt.Errorf("%w: invalid agent id %q: use 1-128 of A-Z a-z 0-9 . _ -", errUsage, *agentID)
		}
	}
	var stored string
	if sub == "put" {
		if *file == "" {
			return fmt.Errorf("%w: --profile is required", errUsage)
		}
		// Checked before the store is even opened: nothing is written for a bad file.
		var err error
		if stored, err = checkAgentProfile(ctx, *file, *base, *sf.region != "" || (*sf.table != "" && *sf.endpoint == "")); err != nil {
			return err
		}
	}
	st, err := sf.openAgents(ctx, env)
	if err != nil {
		return err
	}
	switch sub {
	case "put":
		if err := agent.PutProfile(ctx, st.db, st.agents, *agentID, stored); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "stored the profile of %s; its next turn uses it\n", *agentID)
	case "get":
		raw, err := agent.GetProfile(ctx, st.db, st.agents, *agentID)
		if err != nil {
			return err
		}
		if raw == "" {
			return fmt.Errorf("agent %s has no profile of its own (it runs with the default)", *agentID)
		}
		var out bytes.Buffer
		// A profile stored before literal credentials were refused may hold one.
		if err := json.Indent(&out, profile.Redact([]byte(raw)), "", "  "); err != nil {
			return fmt.Errorf("stored profile of %s is not JSON: %w", *agentID, err)
		}
		fmt.Fprintln(stdout, out.String())
	case "list":
		ids, err := agent.ListProfiles(ctx, st.db, st.agents)
		if err != nil {
			return err
		}
		for _, id := range ids {
			fmt.Fprintln(stdout, id)
		}
	case "delete":
		had, err := agent.DeleteProfile(ctx, st.db, st.agents, *agentID)
		if err != nil {
			return err
		}
		if !had {
			return fmt.Errorf("agent %s has no profile of its own", *agentID)
		}
		fmt.Fprintf(stdout, "deleted the profile of %s; its next turn uses the default\n", *agentID)
	}
	return nil
}

// checkAgentProfile reads and checks the profile file merged over the default profile,
// where it will run (deployed: in Lambda), and returns the JSON to store. A bad file
// is an error naming the file and the JSON path of each problem.
func checkAgentProfile(ctx context.Context, file, base string, deployed bool) (string, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errUsage, err)
	}
	own, err := tools.DecodeProfile(raw)
	if err != nil {
		return "", problems(file, err)
	}
	def := tools.DefaultProfile()
	if base == "" {
		if _, err := os.Stat(defaultProfileFile); err == nil {
			base = defaultProfileFile
		}
	}
	if base != "" {
		b, err := os.ReadFile(base)
		if err != nil {
			return "", fmt.Errorf("%w: --default-profile: %v", errUsage, err)
		}
		if def, err = tools.DecodeProfile(b); err != nil {
			return "", problems(base, err)
		}
	}
	modelAWS, err := useraws.Load(ctx)
	if err != nil {
		return "", err
	}
	penv := agentservice.ProfileEnv(modelAWS, agentservice.AgentOptions{Local: !deployed, Rules: rules.New().Rules})
	if deployed {
		penv.LookupEnv = nil // the functions' environment is not this shell's
	}
	if err := profile.Check(ctx, def.Merge(own), penv); err != nil {
		return "", problems(file, err)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, raw); err != nil {
		return "", problems(file, err)
	}
	return out.String(), nil
}

// profileError is err, or, if it is a profile's problems, problems(file, err).
func profileError(file string, err error) error {
	var pe *tools.ProfileError
	if errors.As(err, &pe) {
		return problems(file, err)
	}
	return err
}

// problems formats a profile error as FILE: PATH: PROBLEM, one line each.
func problems(file string, err error) error {
	var pe *tools.ProfileError
	if !errors.As(err, &pe) {
		return fmt.Errorf("%w: %s: %v", errBadProfile, file, err)
	}
	lines := make([]string, len(pe.Problems))
	for i, p := range pe.Problems {
		lines[i] = file + ": " + p.String()
	}
	return fmt.Errorf("%w:\n%s", errBadProfile, strings.Join(lines, "\n"))
}

// openAgents opens the store for a command that uses the agents table alone (profiles,
// quotas, usage): against deployed tables it needs --agents-table and not --table.
func (f storeFlags) openAgents(ctx context.Context, env config.CLIEnv) (store, error) {
	if *f.region != "" && *f.table == "" && *f.agentsTable != "" {
		*f.table = "-" // the connections table the shared store flags ask for is not used
	}
	st, err := f.open(ctx, env)
	if err != nil {
		return store{}, err
	}
	if st.agents == "" {
		return store{}, fmt.Errorf("%w: --agents-table is required against deployed tables", errUsage)
	}
	return st, nil
}
