package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/latency"
	"github.com/terret/terret-ws/internal/service"
	"github.com/terret/terret-ws/internal/tables"
	"github.com/terret/terret-ws/internal/webui"
)

// devState is what a running `terret dev` leaves for the other commands (and what
// --ready-file receives, with the same first three fields dev-profile.md names).
type devState struct {
	WSURL            string       `json:"ws_url"`
	DynamoDBEndpoint string       `json:"dynamodb_endpoint"`
	Region           string       `json:"region"`
	Tables           tables.Names `json:"tables"`
	PID              int          `json:"pid"`
}

func statePath(env config.CLIEnv) string { return filepath.Join(env.StateDir, "dev.json") }

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	env := config.LoadCLIEnv()
	fs := flag.NewFlagSet("terret dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", orStr(env.Addr, "127.0.0.1:3001"), "where the local gateway listens; port 0 picks a free one (env TERRET_ADDR)")
	endpoint := fs.String("dynamodb-endpoint", env.DynamoDBEndpoint, "use this DynamoDB endpoint instead of starting DynamoDB Local (env TERRET_DYNAMODB_ENDPOINT)")
	ping := fs.Duration("ping-interval", 20*time.Second, "WebSocket ping frames from the local gateway")
	replayLimit := fs.Int("replay-limit", config.DefaultReplayLimit, "events one subscribe may replay")
	maxReplays := fs.Int("max-concurrent-replays", config.DefaultMaxConcurrentReplays, "replay reads running at once, across all connections")
	queue := fs.Int("outbound-queue", config.DefaultOutboundQueue, "events a live connection may fall behind before lagged")
	approvals := fs.Bool("approvals", false, "mount the approvals plugin row")
	readyFile := fs.String("ready-file", "", "once ready, write JSON {ws_url, dynamodb_endpoint, region} to this path")
	logLevel := fs.String("log-level", "warn", "log level of the service's JSON logs on stderr (debug, info, warn, error)")
	prefix := fs.String("table-prefix", "terret-", "prefix of the table names (tables <prefix>log, <prefix>connections, <prefix>agents)")
	awsLatency := latency.Flags(fs) // --aws-latency and its figures (docs/performance.md)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	for name, v := range map[string]int{"replay-limit": *replayLimit, "max-concurrent-replays": *maxReplays, "outbound-queue": *queue} {
		if v <= 0 {
			return fmt.Errorf("%w: --%s must be positive", errUsage, name)
		}
	}
	if *ping <= 0 {
		return fmt.Errorf("%w: --ping-interval must be positive", errUsage)
	}
	// The page's "Dev token" button mints tokens in the stack's own table, known once it is up.
	var devTokens atomic.Pointer[auth.Store]
	pages := webui.Handler(webui.Options{DevToken: func(ctx context.Context, agentID string) (string, error) {
		if s := devTokens.Load(); s != nil {
			return s.Create(ctx, agentID)
		}
		return "", errors.New("terret dev: still starting")
	}})
	st, err := devstack.Start(ctx, devstack.Options{
		Addr: *addr, DynamoDBEndpoint: *endpoint, PingInterval: *ping,
		ReplayLimit: *replayLimit, MaxConcurrentReplays: *maxReplays, OutboundQueue: *queue,
		Approvals: *approvals, Logger: service.Logger(stderr, *logLevel), TablePrefix: *prefix,
		Pages: pages, Latency: awsLatency(),
	})
	if err != nil {
		return err
	}
	defer st.Close()
	devTokens.Store(auth.New(dynamolocal.Client(st.DynamoDBEndpoint), st.Tables["ConnectionsTable"]))
	state := devState{WSURL: st.WebSocketURL() + "/agents/{agent_id}/ws", DynamoDBEndpoint: st.DynamoDBEndpoint, Region: st.Region, Tables: st.Tables, PID: os.Getpid()}
	b, _ := json.MarshalIndent(state, "", "  ")
	if err := os.MkdirAll(env.StateDir, 0o700); err == nil {
		if err := os.WriteFile(statePath(env), b, 0o600); err != nil {
			slog.Warn("write state file", "error", err)
		}
		defer os.Remove(statePath(env))
	}
	if *readyFile != "" {
		if err := writeAtomic(*readyFile, b); err != nil {
			return fmt.Errorf("write ready file: %w", err)
		}
	}
	fmt.Fprintf(stdout, "terret dev: listening on %s\n", state.WSURL)
	fmt.Fprintf(stdout, "terret dev: web page at http://%s/\n", strings.TrimPrefix(st.WebSocketURL(), "ws://"))
	fmt.Fprintf(stdout, "terret dev: DynamoDB at %s (tables %s, %s, %s)\n", st.DynamoDBEndpoint, st.Tables["LogTable"], st.Tables["ConnectionsTable"], st.Tables["AgentsTable"])
	if p := awsLatency(); !p.IsZero() {
		fmt.Fprintf(stdout, "terret dev: AWS latency profile %s\n", p)
	}
	fmt.Fprintf(stdout, "terret dev: create a token with: terret token create --agent AGENT_ID\n")
	<-ctx.Done()
	fmt.Fprintln(stdout, "terret dev: stopping")
	return nil
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func orStr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
