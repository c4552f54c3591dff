package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/service/scheduler"

	"github.com/terret/terret-ws/internal/agent/control"
	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/config/useraws"
	"github.com/terret/terret-ws/internal/schedule"
	"github.com/terret/terret-ws/internal/sessionlog"
)

const scheduleUsage = `usage: terret schedule set|list|cancel --agent ID [flags]

  set      terret schedule set --agent ID --text T (--at TIME | --in DUR | --every DUR |
           --cron EXPR [--tz ZONE]) [--id NAME]: store the schedule (replacing the
           agent's schedule of that id) and print its id, one line. TIME is RFC 3339;
           DUR a duration such as 90s or 2h; EXPR 5 cron fields; ZONE an IANA zone
  list     the agent's schedules, one JSON object a line
  cancel   terret schedule cancel --agent ID --id NAME

A fire wakes the agent with the schedule's text, as an inject with wake (docs/agents.md,
"Schedules"). The tables are the running terret dev's (--addr picks one), those at
--dynamodb-endpoint, or deployed ones (--region with --log-table, --connections-table,
--agents-table, and --schedule-group, --schedule-role-arn, --schedule-target-arn).
`

func runSchedule(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sub, err := pickSubcommand("schedule", args, []string{"set", "list", "cancel"}, scheduleUsage, stdout)
	if err != nil {
		return err
	}
	env := config.LoadCLIEnv()
	fs := flag.NewFlagSet("terret schedule "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, map[string]string{
		"set":    "terret schedule set --agent ID --text T (--at TIME | --in DUR | --every DUR | --cron EXPR [--tz ZONE]) [--id NAME] [flags]",
		"list":   "terret schedule list --agent ID [flags]",
		"cancel": "terret schedule cancel --agent ID --id NAME [flags]",
	}[sub])
	agentID := fs.String("agent", "", "agent id (required)")
	var sp schedule.Spec
	id := fs.String("id", "", "schedule id (set: optional, else generated; cancel: required)")
	if sub == "set" {
		fs.StringVar(&sp.Text, "text", "", "the text the fire wakes the agent with (required)")
		fs.StringVar(&sp.At, "at", "", "fire once at this RFC 3339 time")
		fs.StringVar(&sp.In, "in", "", "fire once after this duration (90s, 2h)")
		fs.StringVar(&sp.Every, "every", "", "fire every interval (30s, 1h)")
		fs.StringVar(&sp.Cron, "cron", "", "fire on this 5-field cron")
		fs.StringVar(&sp.TZ, "tz", "", "IANA time zone of --cron (default UTC)")
	}
	logTable := fs.String("log-table", "", "log table name (default: terret dev's; required against AWS)")
	group := fs.String("schedule-group", "", "deployed: the stack's EventBridge Scheduler group")
	role := fs.String("schedule-role-arn", "", "deployed: the role EventBridge Scheduler assumes (SchedulerRole)")
	target := fs.String("schedule-target-arn", "", "deployed: the schedule function's ARN")
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
	if sub == "cancel" && *id == "" {
		return fmt.Errorf("%w: --id is required", errUsage)
	}
	sp.ID = *id
	deployed := *sf.endpoint == "" && (*sf.region != "" || *sf.table != "")
	if deployed && (*logTable == "" || *sf.agentsTable == "" || *group == "" || *role == "" || *target == "") {
		return fmt.Errorf("%w: deployed schedules need --log-table, --connections-table, --agents-table, --schedule-group, --schedule-role-arn and --schedule-target-arn", errUsage)
	}
	st, err := sf.open(ctx, env)
	if err != nil {
		return err
	}
	if *logTable != "" {
		st.log = *logTable
	}
	cfg := schedule.Config{DB: st.db, Table: st.agents, Log: sessionlog.New(st.db, st.log),
		Bounds: schedule.Bounds{MinEvery: schedule.LocalMinEvery, MaxText: control.MaxTextBytes}}
	if deployed { // terret dev's engine sweeps the records; on AWS EventBridge fires
		awsCfg, err := useraws.Load(ctx)
		if err != nil {
			return err
		}
		if *sf.region != "" {
			awsCfg.Region = *sf.region
		}
		cfg.Engine = &schedule.EventBridge{API: scheduler.NewFromConfig(awsCfg), Group: *group, Role: *role, Target: *target}
		cfg.Bounds.MinEvery = schedule.EventBridgeMinEvery
	}
	svc := schedule.New(cfg)
	switch sub {
	case "set":
		sc, err := svc.Set(ctx, *agentID, sp)
		var se *schedule.SpecError
		if errors.As(err, &se) {
			return fmt.Errorf("%w: --%s: %s", errUsage, se.Field, se.Message)
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, sc.ID)
	case "list":
		list, err := svc.List(ctx, *agentID)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		for _, sc := range list {
			if err := enc.Encode(sc); err != nil {
				return err
			}
		}
	case "cancel":
		if err := svc.Cancel(ctx, *agentID, *id); err != nil {
			if errors.Is(err, schedule.ErrNotFound) {
				return fmt.Errorf("agent %s has no schedule %q", *agentID, *id)
			}
			return err
		}
	}
	return nil
}
