package devstack

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	terretws "github.com/terret/terret-ws"
	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/dynamolocal"
	"github.com/terret/terret-ws/internal/emulator"
	"github.com/terret/terret-ws/internal/localgw"
	"github.com/terret/terret-ws/internal/pausehook"
	"github.com/terret/terret-ws/internal/tables"
)

// LambdaEmulator runs every function of template.yaml as its built bootstrap under the
// Lambda Runtime Interface Emulator instead of in-process (`terret dev
// --lambda-emulator`; package emulator). The gateway, the Invoke API and the stream
// pollers stay in this process and invoke the emulator's environments. Options.Observer
// and Options.ReplayPage reach only in-process handlers.
type LambdaEmulator struct {
	MaxEnvironments int       // per function; 0: emulator.DefaultMaxEnvironments
	BuildDir        string    // where the bootstraps are built; "": <Root>/build/emulator
	SkipBuild       bool      // BuildDir already holds current bootstraps (tests build once)
	Console         io.Writer // one line per cold start; nil: none
	// Admit, when set, is asked once the profile is read and before anything starts;
	// its error stops Start. terret dev refuses the emulator there on a machine other
	// users log in to (their programs could read the Runtime API's ports).
	Admit func() error
}

// emulation is the emulated mode between the gateway's start and the functions'.
type emulation struct {
	o      Options
	root   string
	dir    string
	names  tables.Names
	fns    []emulator.Function // resolved before the gateway listens: names and timeouts
	prof   *defaultProfile
	logger *slog.Logger
	// webhookQueueURL is the local WebhookQueue's, set before start.
	webhookQueueURL string
}

// timeoutSlack lets the emulator's own timeout (the template's) fire before the
// gateway's, so that a timed-out invocation reports Lambda's Sandbox.Timedout.
const timeoutSlack = 2 * time.Second

// newEmulation builds the bootstraps (make build) and reads the functions' names and
// timeouts from the template.
func newEmulation(ctx context.Context, o Options, names tables.Names, prof *defaultProfile, logger *slog.Logger) (*emulation, error) {
	em := &emulation{o: o, root: o.Root, dir: o.LambdaEmulator.BuildDir, names: names, prof: prof, logger: logger}
	if em.root == "" {
		root, err := dynamolocal.RepoRoot()
		if err != nil {
			return nil, fmt.Errorf("devstack: lambda emulator: %w", err)
		}
		em.root = root
	}
	if em.dir == "" {
		em.dir = filepath.Join(em.root, emulator.DefaultBuildDir)
	}
	if !o.LambdaEmulator.SkipBuild {
		if err := emulator.Build(ctx, em.root, em.dir); err != nil {
			return nil, err
		}
	}
	fns, err := emulator.Functions(terretws.Template, em.local("http://127.0.0.1/pending"))
	if err != nil {
		return nil, err
	}
	em.fns = fns
	return em, nil
}

func (em *emulation) local(management string) emulator.Local {
	stackName := strings.TrimSuffix(em.o.TablePrefix, "-")
	if stackName == "" {
		stackName = "terret"
	}
	return emulator.Local{
		StackName:          stackName,
		Region:             dynamolocal.Region,
		AccountID:          localgw.DefaultAccountID,
		Tables:             em.names,
		ManagementEndpoint: management,
		// The webhook function's queue: the local WebhookQueue once it runs.
		Queues: map[string]string{"WebhookQueue": cmp.Or(em.webhookQueueURL, "http://127.0.0.1/pending")},
		Parameters: map[string]string{
			"ReplayLimit":          strconv.Itoa(orInt(em.o.ReplayLimit, config.DefaultReplayLimit)),
			"MaxConcurrentReplays": strconv.Itoa(orInt(em.o.MaxConcurrentReplays, config.DefaultMaxConcurrentReplays)),
			"OutboundQueue":        strconv.Itoa(orInt(em.o.OutboundQueue, config.DefaultOutboundQueue)),
			"MaxObservers":         strconv.Itoa(orInt(em.o.MaxObservers, config.DefaultMaxObservers)),
			"Approvals":            strconv.FormatBool(em.o.Approvals),
			"LogLevel":             logLevel(em.logger),
			// The default profile reaches the functions as on AWS: the template's
			// AgentProfile parameter is their AGENT_PROFILE ("": the demo profile).
			"AgentProfile": em.prof.agentProfile,
		},
	}
}

// logLevel is the lowest level logger writes: the functions log no finer.
func logLevel(l *slog.Logger) string {
	for _, lv := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn} {
		if l.Enabled(context.Background(), lv) {
			return strings.ToLower(lv.String())
		}
	}
	return "error"
}

// routeOf names the gateway route each route function serves.
var routeOf = map[string]string{"connect": localgw.RouteConnect, "message": localgw.RouteDefault, "disconnect": localgw.RouteDisconnect}

// route adds to the gateway's Invoke API every function under its template name
// (<stack>-deliver) besides its short one, and sets the template's timeouts.
func (em *emulation) route(functions map[string]lambda.Handler, timeouts map[string]time.Duration) {
	for _, fn := range em.fns {
		d := fn.Timeout + timeoutSlack
		if route, ok := routeOf[fn.Name]; ok {
			timeouts[route] = d
		}
		timeouts[fn.Name], timeouts[fn.FunctionName] = d, d
		if h, ok := functions[fn.Name]; ok {
			functions[fn.FunctionName] = h
		}
	}
}

// start resolves the functions against the running gateway, starts the emulator's
// pools and binds every handler to them, through its wrapper in wrap if it has one (the
// console's lines).
func (em *emulation) start(st *Stack, handlers map[string]*localgw.Deferred, wrap map[string]func(lambda.Handler) lambda.Handler) (*emulator.Emulator, error) {
	env, err := em.env(st)
	if err != nil {
		return nil, err
	}
	fns, err := emulator.Functions(terretws.Template, em.local(st.gw.ManagementEndpoint()))
	if err != nil {
		return nil, err
	}
	em.prof.pass(fns, em.logger)
	emu, err := emulator.Start(emulator.Options{
		Root:            em.root,
		BuildDir:        em.dir,
		MaxEnvironments: em.o.LambdaEmulator.MaxEnvironments,
		Console:         em.o.LambdaEmulator.Console,
		Logger:          em.logger,
		Env:             env,
	}, fns)
	if err != nil {
		return nil, err
	}
	for name, d := range handlers {
		h := emu.Handler(name)
		if h == nil {
			emu.Close()
			return nil, fmt.Errorf("devstack: lambda emulator: template.yaml has no %s function", name)
		}
		if w := wrap[name]; w != nil {
			h = w(h)
		}
		d.Bind(h)
	}
	return emu, nil
}

// Emulator is the running emulator in emulated mode, nil in-process.
func (s *Stack) Emulator() *emulator.Emulator { return s.emu }

// env is what every function gets besides the template's variables: the local
// endpoints and credentials, and, when a test holds the runtime (Options.Pause), the
// stack's pause server, started here, where the functions post their pause points.
func (em *emulation) env(st *Stack) (map[string]string, error) {
	env := map[string]string{
		"DYNAMODB_ENDPOINT":     st.DynamoDBEndpoint,
		"LAMBDA_ENDPOINT":       st.gw.LambdaEndpoint(),
		"AWS_REGION":            dynamolocal.Region,
		"AWS_DEFAULT_REGION":    dynamolocal.Region,
		"AWS_ACCESS_KEY_ID":     st.Credentials.AccessKey,
		"AWS_SECRET_ACCESS_KEY": st.Credentials.SecretKey,
	}
	if em.o.Pause != nil {
		var err error
		if st.pause, err = pausehook.Listen(em.o.Pause); err != nil {
			return nil, err
		}
		env[config.PauseEndpointVar] = st.pause.URL()
	}
	return env, nil
}
