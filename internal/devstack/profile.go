package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/terret/terret-ws/internal/config"
	"github.com/terret/terret-ws/internal/emulator"
	"github.com/terret/terret-ws/internal/profile"
	"github.com/terret/terret-ws/internal/rules"
	"github.com/terret/terret-ws/internal/service/agentservice"
	"github.com/terret/terret-ws/internal/service/turns"
)

// ErrProfile is a default profile (Options.Profile) that cannot be served: its file
// cannot be read, or it does not pass the checks of where it runs. Start returns it
// before it starts anything; a *tools.ProfileError in the chain lists the problems
// at their JSON paths.
var ErrProfile = errors.New("devstack: profile")

// ErrProfileEmulated is ErrProfile for a profile that passes in process but not as the
// emulated functions run it: as on AWS, they start no command MCP server, and they
// read keys from their environment only (no secrets: they hold DynamoDB Local's
// credentials, not yours).
var ErrProfileEmulated = fmt.Errorf("%w for the emulated functions", ErrProfile)

// defaultProfile is the stack's default profile, checked before anything starts.
type defaultProfile struct {
	src *profile.Source // the in-process runtime's; nil: the demo profile
	// agentProfile is the file's JSON, compacted: the emulated functions'
	// AGENT_PROFILE, as the template's AgentProfile parameter passes it on AWS.
	agentProfile string
	// keys are the variables the profile's api_key_env name, with their values, for
	// the emulated functions that run the agent. Secrets: never log them.
	keys map[string]string
	// hookKeys are the variables its webhooks' secret_env name, with their values, for
	// the emulated webhook function alone. Secrets: never log them.
	hookKeys map[string]string
}

// loadProfile reads and checks o.Profile where it will run: in process (keys from the
// environment or .env, secrets and Bedrock with the user's own AWS credentials), and,
// with the emulator, also as the functions run it, with exactly the keys it names
// passed through.
func loadProfile(ctx context.Context, o Options, userAWS aws.Config, logger *slog.Logger) (*defaultProfile, error) {
	if o.Profile == "" {
		return &defaultProfile{}, nil
	}
	raw, err := os.ReadFile(o.Profile)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrProfile, o.Profile, err)
	}
	src, err := profile.NewFileSource(ctx, o.Profile, agentservice.ProfileEnv(userAWS, agentservice.AgentOptions{Local: true, Rules: ruleEngine.Rules, Turns: turns.Kit()}), logger)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrProfile, o.Profile, err)
	}
	dp := &defaultProfile{src: src}
	if o.LambdaEmulator == nil {
		return dp, nil
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil { // the source decoded it: only an edit since
		return nil, fmt.Errorf("%w %s: %w", ErrProfile, o.Profile, err)
	}
	dp.agentProfile = compact.String()
	p := src.Default()
	dp.keys = map[string]string{}
	for _, name := range profile.KeyEnvs(p) {
		if v, ok := config.LookupKey(name, true); ok {
			dp.keys[name] = strings.TrimSpace(v)
		}
	}
	dp.hookKeys = map[string]string{}
	for _, name := range profile.WebhookEnvs(p) {
		if v, ok := config.LookupKey(name, true); ok {
			dp.hookKeys[name] = strings.TrimSpace(v)
		}
	}
	// The functions' own check, with what they will have: no .env, no secret store
	// reachable, no commands.
	fenv := agentservice.ProfileEnv(userAWS, agentservice.AgentOptions{Rules: ruleEngine.Rules})
	fenv.LookupEnv = func(name string) (string, bool) {
		if v, ok := dp.keys[name]; ok {
			return v, ok
		}
		v, ok := dp.hookKeys[name]
		return v, ok
	}
	fenv.Secrets = nil
	fenv.LocalWebhooks = true // a local stack's functions admit loopback receivers
	if err := profile.Check(ctx, p, fenv); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrProfileEmulated, o.Profile, err)
	}
	return dp, nil
}

// agentVar is the variable the functions that run the agent read the profile from.
const agentVar = "AGENT_PROFILE"

// lambdaEnvLimit is Lambda's cap on a function's environment variables, names and
// values together (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
const lambdaEnvLimit = 4 << 10

// pass adds the profile's keys to the functions that run the agent (those that read
// AGENT_PROFILE: message, runner and http) and to no other, its webhooks' secrets to the
// webhook function alone, and warns when a function's template variables (of those
// that read AGENT_PROFILE) would exceed what Lambda accepts.
func (dp *defaultProfile) pass(fns []emulator.Function, logger *slog.Logger) {
	for i, fn := range fns {
		if !slices.Contains(config.Vars(fn.Name), agentVar) {
			continue
		}
		size := 0
		for k, v := range fn.Env {
			size += len(k) + len(v)
		}
		if size > lambdaEnvLimit {
			logger.Warn("the function's variables exceed Lambda's 4 KB: AWS would refuse this profile as AgentProfile; keep the default profile small and give agents their own",
				"function", fn.Name, "bytes", size)
		}
		keys := dp.keys
		if fn.Name == "webhook" {
			keys = dp.hookKeys
		}
		if len(keys) == 0 {
			continue
		}
		env := make(map[string]string, len(fn.Env)+len(keys))
		for k, v := range fn.Env {
			env[k] = v
		}
		for k, v := range keys {
			if _, taken := fn.Env[k]; taken || strings.HasPrefix(k, "AWS_") {
				logger.Warn("api_key_env names a variable the function already has: not passed", "function", fn.Name, "variable", k)
				continue
			}
			env[k] = v
		}
		fns[i].Env = env
	}
}

// ruleEngine compiles the rules of the profiles terret dev checks and runs, each rule
// list once.
var ruleEngine = rules.New()
