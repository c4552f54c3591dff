package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/terret/terret-ws/internal/auth"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/devstack"
	"github.com/terret/terret-ws/internal/devstate"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/emulator"
	"github.com/terret/terret-ws/internal/latency"
	"github.com/terret/terret-ws/internal/localgw"
	"github.com/terret/terret-ws/internal/metrics"
	"github.com/terret/terret-ws/internal/privatefile"
	"github.com/terret/terret-ws/internal/tools"
	"github.com/terret/terret-ws/internal/webui"
)

// devState is what a running `terret dev` leaves for the other commands (and what
// --ready-file receives, with the same first three fields dev-profile.md names).
type devState = devstate.Record

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	env := config.LoadCLIEnv()
	fs := flag.NewFlagSet("terret dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, "terret dev [flags]")
	addr := fs.String("addr", orStr(env.Addr, "127.0.0.1:3001"), "where the local gateway listens; port 0 picks a free one (env TERRET_ADDR)")
	endpoint := fs.String("dynamodb-endpoint", env.DynamoDBEndpoint, "use this DynamoDB endpoint instead of starting DynamoDB Local (env TERRET_DYNAMODB_ENDPOINT)")
	ping := fs.Duration("ping-interval", 20*time.Second, "WebSocket ping frames from the local gateway")
	replayLimit := fs.Int("replay-limit", config.DefaultReplayLimit, "events one subscribe may replay")
	maxReplays := fs.Int("max-concurrent-replays", config.DefaultMaxConcurrentReplays, "replay reads running at once, across all connections")
	queue := fs.Int("outbound-queue", config.DefaultOutboundQueue, "events a live connection may fall behind before lagged")
	maxObservers := fs.Int("max-observers", config.DefaultMaxObservers, "observer connections one agent may have at once; one more supersedes the oldest")
	approvals := fs.Bool("approvals", false, "mount the approvals plugin row")
	readyFile := fs.String("ready-file", "", "once ready, write JSON {ws_url, dynamodb_endpoint, region} to this path")
	logLevel := fs.String("log-level", "info", "console lines on stderr: info shows one per connection, frame and turn; debug adds the gateway and stream poller; warn and error only problems (a failed turn always shows)")
	logFormat := fs.String("log-format", "text", "console line format: text, or json (the deployed functions' format)")
	dataDir := fs.String("data-dir", filepath.Join(env.StateDir, "data"), "directory of DynamoDB Local's database, kept across restarts (one terret dev at a time)")
	inMemory := fs.Bool("in-memory", false, "keep DynamoDB Local's data in memory: nothing survives a stop")
	prefix := fs.String("table-prefix", "terret-", "prefix of the table names (tables <prefix>log, <prefix>connections, <prefix>agents)")
	emulate := fs.Bool("lambda-emulator", false, "run every function as its built bootstrap (make build) under aws-lambda-rie instead of in-process")
	concurrency := fs.Int("lambda-concurrency", emulator.DefaultMaxEnvironments, "with --lambda-emulator: execution environments per function at most")
	multiUser := fs.Bool("lambda-emulator-multi-user", false, "with --lambda-emulator: start even though other users log in to this machine (they can then read every $connect token and the invoke secret on the functions' loopback ports; docs/emulator.md)")
	profileFile := fs.String("profile", "", "the agents' default profile (JSON, see docs/agents.md), re-read when it changes (default: terret.json in the working directory if there is one, else the demo profile)")
	idle := fs.Duration("idle-timeout", localgw.DefaultIdleTimeout, "close a connection whose client sent no frame for this long, whatever the server sent: the strict reading of API Gateway's idle timeout ({\"type\":\"keepalive\"} counts)")
	maxDuration := fs.Duration("max-connection-duration", localgw.DefaultMaxConnectionDuration, "close every connection this old, as API Gateway does")
	cloudFrontIdle := fs.Duration("cloudfront-idle", 0, "also close a connection to which nothing was sent for this long, as CloudFront in front of the API does after 10m (the keepalive's answer counts, pings do not); 0: the raw API URL's rules only")
	allowRemoteToken := fs.Bool("allow-remote-dev-token", false, "with a non-loopback --addr, still serve the page's /dev/token (anyone who reaches the address can then mint tokens)")
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
	for name, v := range map[string]int{"replay-limit": *replayLimit, "max-concurrent-replays": *maxReplays, "outbound-queue": *queue, "max-observers": *maxObservers, "lambda-concurrency": *concurrency} {
		if v <= 0 {
			return fmt.Errorf("%w: --%s must be positive", errUsage, name)
		}
	}
	for name, d := range map[string]time.Duration{"ping-interval": *ping, "idle-timeout": *idle, "max-connection-duration": *maxDuration} {
		if d <= 0 {
			return fmt.Errorf("%w: --%s must be positive", errUsage, name)
		}
	}
	if *cloudFrontIdle < 0 {
		return fmt.Errorf("%w: --cloudfront-idle must not be negative (0 turns it off)", errUsage)
	}
	if *profileFile == "" {
		if _, err := os.Stat(defaultProfileFile); err == nil {
			*profileFile = defaultProfileFile
		}
	}
	logger, err := consoleLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *endpoint != "" && (set["data-dir"] || set["in-memory"]) {
		return fmt.Errorf("%w: --data-dir and --in-memory apply to the DynamoDB Local terret dev starts, not with --dynamodb-endpoint", errUsage)
	}
	if *inMemory && set["data-dir"] {
		return fmt.Errorf("%w: --in-memory and --data-dir exclude each other", errUsage)
	}
	var every time.Duration
	if env.DevProgressEvery != "" {
		if every, err = time.ParseDuration(env.DevProgressEvery); err != nil || every <= 0 {
			return fmt.Errorf("%w: TERRET_DEV_PROGRESS_EVERY=%q: want a positive Go duration such as 10s", errUsage, env.DevProgressEvery)
		}
	}
	// The ready file holds the DynamoDB key and the page's key: it goes only into a
	// directory no other user can write (privatefile), checked before anything starts.
	if *readyFile != "" {
		if err := privatefile.CheckDir(filepath.Dir(*readyFile)); err != nil {
			return fmt.Errorf("%w: --ready-file %s: %v", errUsage, *readyFile, err)
		}
	}
	data := *dataDir
	if *inMemory || *endpoint != "" {
		data = ""
	} else if data, err = filepath.Abs(data); err != nil {
		return fmt.Errorf("%w: --data-dir: %v", errUsage, err)
	}
	// The page's "Dev token" button mints tokens in the stack's own table, known once it is up.
	var devTokens atomic.Pointer[auth.Store]
	mint := func(ctx context.Context, agentID string) (string, error) {
		if s := devTokens.Load(); s != nil {
			return s.Create(ctx, agentID)
		}
		return "", errors.New("terret dev: still starting")
	}
	remote := !loopbackAddr(*addr)
	if remote {
		// Anyone on the network can then open sockets and load the page; /dev/token would
		// hand them tokens.
		if *allowRemoteToken {
			fmt.Fprintf(stderr, "terret dev: warning: --addr %s is reachable from other hosts, and --allow-remote-dev-token lets anyone who reaches it mint tokens at /dev/token\n", *addr)
		} else {
			fmt.Fprintf(stderr, "terret dev: warning: --addr %s is reachable from other hosts; /dev/token is off (--allow-remote-dev-token serves it anyway)\n", *addr)
			mint = nil
		}
	}
	// The page key binds /dev/token to the user who started terret dev: it is printed
	// in the page's address on this console and kept in the 0600 instance record; no
	// other user of the machine sees either (they can load the page, not the key).
	pageKey := newPageKey()
	pages := webui.Handler(webui.Options{DevToken: mint, DevTokenKey: pageKey})
	// The same metrics the functions write as CloudWatch EMF, in Prometheus text format.
	rec := metrics.New(nil, "")
	metrics.SetDefault(rec)
	mux := http.NewServeMux()
	mux.Handle("/metrics", rec.Handler())
	mux.Handle("/", pages)
	guard := &devTokenGuard{next: mux, loopbackOnly: !remote}
	pages = guard
	st, err := devstack.Start(ctx, devstack.Options{
		Addr: *addr, DynamoDBEndpoint: *endpoint, PingInterval: *ping, TokenSweep: 30 * time.Second, QuotaSweep: 5 * time.Second,
		ReplayLimit: *replayLimit, MaxConcurrentReplays: *maxReplays, OutboundQueue: *queue, MaxObservers: *maxObservers,
		Approvals: *approvals, Logger: logger, TablePrefix: *prefix,
		Pages: pages, LambdaEmulator: lambdaEmulator(*emulate, *concurrency, stdout, *multiUser, stderr),
		Profile: *profileFile,
		DataDir: data, InstallDir: filepath.Join(env.StateDir, "dynamodb-local"), Progress: prefixWriter(stderr, "terret dev: "), ProgressEvery: every,
		QuickJVM:    true, // a quick start matters more here than DynamoDB Local's peak speed
		Latency:     awsLatency(),
		IdleTimeout: *idle, MaxConnectionDuration: *maxDuration, CloudFrontIdleTimeout: *cloudFrontIdle,
	})
	if err != nil {
		if errors.Is(err, devstack.ErrProfile) {
			return devProfileError(err, *profileFile, set["profile"])
		}
		return profileError(*profileFile, devStartError(err, *addr))
	}
	defer st.Close()
	if _, port, err := net.SplitHostPort(strings.TrimPrefix(st.WebSocketURL(), "ws://")); err == nil {
		guard.port.Store(&port)
	}
	devTokens.Store(auth.New(dynamolocal.ClientWith(st.DynamoDBEndpoint, st.Credentials), st.Tables["ConnectionsTable"]))
	state := devState{WSURL: st.WebSocketURL() + "/agents/{agent_id}/ws", DynamoDBEndpoint: st.DynamoDBEndpoint, Region: st.Region, Tables: st.Tables, PID: os.Getpid(),
		Addr: strings.TrimPrefix(st.WebSocketURL(), "ws://"), DataDir: data}
	if mint != nil {
		state.PageURL = "http://" + state.Addr + "/" + webui.KeyFragment + pageKey
	}
	if st.Credentials != dynamolocal.LocalCredentials {
		state.AccessKeyID, state.SecretAccessKey = st.Credentials.AccessKey, st.Credentials.SecretKey
	}
	b, _ := json.MarshalIndent(state, "", "  ")
	_, _ = devstate.List(env.StateDir) // drops the records of instances that died
	if remove, err := devstate.Write(env.StateDir, state); err != nil {
		fmt.Fprintf(stderr, "terret dev: %v (terret token, chat and tail will not find this instance)\n", err)
	} else {
		defer remove()
	}
	if *readyFile != "" {
		if err := privatefile.Write(*readyFile, b); err != nil {
			return fmt.Errorf("--ready-file %s: %w", *readyFile, err)
		}
	}
	fmt.Fprintf(stdout, "terret dev: listening on %s\n", state.WSURL)
	if state.PageURL != "" {
		// The address carries the page key: it is what lets the page's Dev token button work.
		fmt.Fprintf(stdout, "terret dev: web page at %s\n", state.PageURL)
	} else {
		fmt.Fprintf(stdout, "terret dev: web page at http://%s/\n", state.Addr)
	}
	fmt.Fprintf(stdout, "terret dev: DynamoDB at %s (tables %s, %s, %s)\n", st.DynamoDBEndpoint, st.Tables["LogTable"], st.Tables["ConnectionsTable"], st.Tables["AgentsTable"])
	switch {
	case *profileFile != "" && *emulate:
		// The functions read AGENT_PROFILE once, at cold start, as on AWS.
		fmt.Fprintf(stdout, "terret dev: profile %s, passed to the functions as AGENT_PROFILE (restart terret dev to apply edits)\n", *profileFile)
	case *profileFile != "":
		fmt.Fprintf(stdout, "terret dev: profile %s (edits apply from the next turn)\n", *profileFile)
	}
	switch {
	case data != "":
		fmt.Fprintf(stdout, "terret dev: data kept in %s (--in-memory keeps nothing)\n", data)
	case *endpoint == "":
		fmt.Fprintf(stdout, "terret dev: data in memory: nothing survives a stop\n")
	}
	if p := awsLatency(); !p.IsZero() {
		fmt.Fprintf(stdout, "terret dev: AWS latency profile %s\n", p)
	}
	fmt.Fprintf(stdout, "terret dev: create a token with: %s token create --agent AGENT_ID\n", invokedAs())
	if e := st.Emulator(); e != nil {
		fmt.Fprintf(stdout, "terret dev: functions run as built bootstraps under aws-lambda-rie: %s\n", e)
	}
	<-ctx.Done()
	fmt.Fprintln(stdout, "terret dev: stopping")
	return nil
}

// newPageKey returns 128 random bits in hex: the key /dev/token asks for.
func newPageKey() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on the systems Go supports
	}
	return hex.EncodeToString(b)
}

// defaultProfileFile is the profile `terret dev` serves without --profile, when the
// working directory has it.
const defaultProfileFile = "terret.json"

func orStr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// devProfileError says which profile terret dev cannot serve — the flag and the file
// — and why: the file cannot be read, or each problem at its JSON path (never a
// key's value: a profile holds none, and the problems name variables, not values).
func devProfileError(err error, file string, flagged bool) error {
	src := file + " (the working directory's; --profile FILE serves another)"
	if flagged {
		src = "--profile " + file
	}
	var pe *tools.ProfileError
	var pathErr *fs.PathError
	switch {
	case errors.As(err, &pe):
		what := "invalid profile"
		if errors.Is(err, devstack.ErrProfileEmulated) {
			what = "invalid profile for --lambda-emulator (the functions run it as AWS Lambda does: no command MCP servers, no api_key_secret)"
		}
		lines := make([]string, len(pe.Problems))
		for i, p := range pe.Problems {
			lines[i] = file + ": " + p.String()
		}
		return fmt.Errorf("%s: %s:\n%s", src, what, strings.Join(lines, "\n"))
	case errors.As(err, &pathErr):
		return fmt.Errorf("%s: cannot read the profile: %v", src, pathErr.Err)
	}
	return fmt.Errorf("%s: %w", src, err)
}

// devStartError says which flag fixes a failed start, where one does.
func devStartError(err error, addr string) error {
	switch {
	case errors.Is(err, devstack.ErrListen):
		return fmt.Errorf("%w\n  pass --addr HOST:PORT to listen elsewhere (port 0 picks a free one), or stop what listens on %s", err, addr)
	case errors.Is(err, privatefile.ErrSharedDir):
		return fmt.Errorf("--data-dir: %w\n  other users could plant or read the database's key there: pass --data-dir DIR of your own (mode 0700), or --in-memory", err)
	case errors.Is(err, dynamolocal.ErrDataInUse):
		return fmt.Errorf("%w\n  another terret dev keeps its data there: pass --data-dir DIR for a separate store, or --in-memory", err)
	case errors.Is(err, dynamolocal.ErrNoJava), errors.Is(err, dynamolocal.ErrNoNpm):
		return fmt.Errorf("%w\n  or pass --dynamodb-endpoint URL to use a DynamoDB that is already running", err)
	}
	return err
}
