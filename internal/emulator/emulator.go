// Package emulator runs the deployment artifacts locally: every function of
// template.yaml as the bootstrap `make build` produces, under the Lambda Runtime
// Interface Emulator (aws-lambda-rie, pinned by scripts/deps.sh), with the environment
// the template gives it. Each function is a pool of execution environments — one
// emulator process each, started on demand (a cold start) up to a limit, one
// invocation at a time each — behind a lambda.Handler, so that the local gateway and
// the stream pollers invoke the built binaries exactly where they would invoke the
// in-process handlers.
//
// What Lambda does and the pool copies: an environment is reused while it is healthy
// and replaced after a crash, an init failure or a timeout; the template's Timeout is
// the emulator's (AWS_LAMBDA_FUNCTION_TIMEOUT); an asynchronous event is retried at
// most MaximumRetryAttempts times and never once older than MaximumEventAgeInSeconds
// (EventInvokeConfig). What it does not: at the limit, an invocation waits for a free
// environment where Lambda would throttle it; idle environments are kept until Close.
package emulator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/terret/terret-ws/internal/invokesecret"
)

// Sentinel errors. Invocation errors also carry a *localgw.FunctionError naming the
// failure as Lambda does (Runtime.ExitError, Sandbox.Timedout).
var (
	ErrInit        = errors.New("emulator: function init failed")
	ErrEnvironment = errors.New("emulator: execution environment failed")
	ErrTimeout     = errors.New("emulator: function timed out")
	ErrDropped     = errors.New("emulator: asynchronous event dropped")
	ErrClosed      = errors.New("emulator: closed")
	ErrSetup       = errors.New("emulator: cannot run the functions")
)

// DefaultMaxEnvironments is the default limit of execution environments per function.
const DefaultMaxEnvironments = 10

// Options configure an Emulator.
type Options struct {
	// Root is the repository root (Makefile, functions/, bin/aws-lambda-rie).
	Root string
	// BuildDir holds <function>/bootstrap; Build writes there.
	BuildDir string
	// RIE is the emulator binary; default <Root>/bin/aws-lambda-rie.
	RIE string
	// MaxEnvironments bounds each function's environments (default 10).
	MaxEnvironments int
	// Env holds variables every function gets besides the template's and the ones
	// Lambda sets: the local endpoints (DYNAMODB_ENDPOINT, LAMBDA_ENDPOINT) and the
	// local credentials.
	Env map[string]string
	// Console receives one line per cold start; nil writes none.
	Console io.Writer
	// Logger receives the functions' JSON logs at their own level, and the emulator's.
	Logger *slog.Logger
}

// DefaultBuildDir is where `terret dev --lambda-emulator` builds, under the root.
const DefaultBuildDir = "build/emulator"

// Build runs `make build` in root for this machine's architecture into dir: the
// bootstraps sam build would package, for linux/GOARCH. With a warm Go build cache it
// takes seconds.
func Build(ctx context.Context, root, dir string) error {
	if _, err := exec.LookPath("make"); err != nil {
		return fmt.Errorf("%w: make is required to build the functions: %v", ErrSetup, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "make", "build", "LAMBDA_GOARCH="+runtime.GOARCH, "BUILD_DIR="+abs)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: make build in %s: %v\n%s", ErrSetup, root, err, out.String())
	}
	return nil
}

// Emulator is the running pools of every function. It is safe for concurrent use.
type Emulator struct {
	pools map[string]*pool // by Function.Name
	home  string
	log   *slog.Logger
}

// Start checks that the emulator and every function's bootstrap are in place and
// returns the pools, each still empty: the first invocation of a function is its
// first cold start.
func Start(o Options, fns []Function) (*Emulator, error) {
	if o.MaxEnvironments <= 0 {
		o.MaxEnvironments = DefaultMaxEnvironments
	}
	if o.RIE == "" {
		o.RIE = filepath.Join(o.Root, "bin", "aws-lambda-rie")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if _, err := os.Stat(o.RIE); err != nil {
		return nil, fmt.Errorf("%w: %s missing (scripts/deps.sh installs it): %v", ErrSetup, o.RIE, err)
	}
	home, err := os.MkdirTemp("", "terret-emulator-home-")
	if err != nil {
		return nil, err
	}
	em := &Emulator{pools: map[string]*pool{}, home: home, log: o.Logger.With("component", "emulator")}
	// rie's invoke ports are plain loopback ports anyone on this machine, or a web page,
	// can reach: each function refuses an invocation without this run's secret.
	secret := invokesecret.New()
	for _, fn := range fns {
		bootstrap, err := filepath.Abs(filepath.Join(o.BuildDir, fn.Name, "bootstrap"))
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(bootstrap); err != nil {
			os.RemoveAll(home)
			return nil, fmt.Errorf("%w: %s: bootstrap missing (make build): %v", ErrSetup, fn.Name, err)
		}
		em.pools[fn.Name] = newPool(fn, o, bootstrap, lambdaEnv(fn, o.Env, home, filepath.Dir(bootstrap), secret), invokesecret.ClientContext(secret), em.log)
	}
	return em, nil
}

// lambdaEnv is the whole environment of fn's processes: the template's variables, the
// local ones, those Lambda sets for a provided.al2023 function
// (https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime),
// and the run's invoke secret (invokesecret.EnvVar), which nothing overrides. Nothing of
// this process's environment leaks in.
func lambdaEnv(fn Function, local map[string]string, home, taskRoot, secret string) []string {
	env := map[string]string{
		"AWS_LAMBDA_FUNCTION_NAME":        fn.FunctionName,
		"AWS_LAMBDA_FUNCTION_TIMEOUT":     strconv.Itoa(int(fn.Timeout / time.Second)),
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(fn.MemoryMB),
		"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
		"AWS_LAMBDA_LOG_GROUP_NAME":       "/aws/lambda/" + fn.FunctionName,
		"AWS_EXECUTION_ENV":               "AWS_Lambda_provided.al2023",
		"LAMBDA_TASK_ROOT":                taskRoot,
		"_HANDLER":                        "bootstrap",
		"TZ":                              ":UTC",
		"AWS_EC2_METADATA_DISABLED":       "true",
		// An empty home: the SDK must not find this machine's ~/.aws profiles.
		"HOME": home,
	}
	for k, v := range local {
		env[k] = v
	}
	for k, v := range fn.Env {
		env[k] = v
	}
	env[invokesecret.EnvVar] = secret
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Handler returns the lambda.Handler of the function named name ("runner"), nil if the
// template has no such function.
func (em *Emulator) Handler(name string) lambda.Handler {
	p, ok := em.pools[name]
	if !ok {
		return nil
	}
	return p
}

// Kill ends one execution environment of function name that is running an invocation,
// as a crash of its host would: the invocation fails (an asynchronous one is retried)
// and the pool replaces the environment. It reports whether one was running. It is a
// fault drill for tests and for trying the stack's resilience by hand.
func (em *Emulator) Kill(name string) bool {
	p, ok := em.pools[name]
	if !ok {
		return false
	}
	return p.killBusy()
}

// Stats returns each function's counters and timings so far.
func (em *Emulator) Stats() map[string]Stats {
	out := map[string]Stats{}
	for name, p := range em.pools {
		out[name] = p.snapshot()
	}
	return out
}

// Close kills every environment.
func (em *Emulator) Close() error {
	for _, p := range em.pools {
		p.close()
	}
	return os.RemoveAll(em.home)
}

// Names lists the functions, sorted.
func (em *Emulator) Names() []string {
	var out []string
	for n := range em.pools {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// String describes the pools for a start-up line: "connect, deliver, … (≤10 environments each)".
func (em *Emulator) String() string {
	limit := 0
	for _, p := range em.pools {
		limit = p.max
	}
	return fmt.Sprintf("%s (up to %d environments each)", strings.Join(em.Names(), ", "), limit)
}
