package emulator

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/terret/terret-ws/internal/stack"
)

// Function is one function of template.yaml as the emulator runs it: Globals applied
// and every reference resolved to the local stack.
type Function struct {
	Name         string            // directory under functions/ and config name: "runner"
	FunctionName string            // the template's FunctionName, resolved: "terret-runner"
	Env          map[string]string // the template's Environment (Globals, then the function's)
	Timeout      time.Duration     // Timeout (Globals unless the function sets its own)
	MemoryMB     int               // MemorySize, reported to the function as AWS_LAMBDA_FUNCTION_MEMORY_SIZE
	Async        AsyncConfig       // EventInvokeConfig, or Lambda's defaults
}

// AsyncConfig is a function's EventInvokeConfig: how often an asynchronous event that
// failed is retried, and how old it may grow before it is dropped.
type AsyncConfig struct {
	MaxRetryAttempts int
	MaxEventAge      time.Duration
}

// DefaultAsync is Lambda's asynchronous retry policy when a function sets none: two
// retries, events kept up to six hours
// (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html).
var DefaultAsync = AsyncConfig{MaxRetryAttempts: 2, MaxEventAge: 6 * time.Hour}

// Local is the local stack the template's references resolve to.
type Local struct {
	StackName          string            // AWS::StackName: function names are <StackName>-<name>
	Region             string            // AWS::Region
	AccountID          string            // AWS::AccountId
	Tables             map[string]string // table name by logical id (LogTable → terret-log)
	ManagementEndpoint string            // the local @connections API: replaces the WebSocket API's URL
	Parameters         map[string]string // values for template parameters; a parameter not here takes its Default
	Queues             map[string]string // queue URL by logical id (WebhookQueue → the local queue's URL)
}

// ref matches one ${Name} or ${Resource.Attribute} of a resolved Sub string.
var ref = regexp.MustCompile(`\$\{([^}]+)\}`)

// Functions reads template and resolves every function's configuration to local. Only
// endpoints change: the WebSocket API's URL becomes local.ManagementEndpoint; tables
// become local.Tables' names, pseudo parameters and parameters their local values. A
// reference it cannot resolve is an error naming the function, the variable and the
// reference, so that a template change that needs a new local resource fails loudly.
func Functions(template []byte, local Local) ([]Function, error) {
	s, err := stack.Parse(template)
	if err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	globals, err := s.Globals()
	if err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	fns, err := s.Functions()
	if err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	r := resolver{s: s, local: local}
	var out []Function
	for _, f := range fns {
		fn := Function{Name: f.Name, Async: DefaultAsync}
		if fn.FunctionName, err = r.resolve(f.Props.FunctionName); err != nil {
			return nil, fmt.Errorf("emulator: %s FunctionName: %w", f.LogicalID, err)
		}
		if fn.FunctionName == "" {
			fn.FunctionName = f.Name
		}
		env, err := s.Environment(f)
		if err != nil {
			return nil, fmt.Errorf("emulator: %w", err)
		}
		fn.Env = map[string]string{}
		for k, v := range env {
			if fn.Env[k], err = r.resolve(v); err != nil {
				return nil, fmt.Errorf("emulator: %s environment %s: %w", f.LogicalID, k, err)
			}
		}
		timeout := f.Props.Timeout
		if timeout == 0 {
			timeout = globals.Timeout
		}
		if timeout == 0 {
			timeout = 3 // Lambda's default
		}
		fn.Timeout = time.Duration(timeout) * time.Second
		fn.MemoryMB = f.Props.MemorySize
		if fn.MemoryMB == 0 {
			fn.MemoryMB = globals.MemorySize
		}
		if fn.MemoryMB == 0 {
			fn.MemoryMB = 128
		}
		if c := f.Props.EventInvokeConfig; c != nil {
			if c.MaximumRetryAttempts != nil {
				fn.Async.MaxRetryAttempts = *c.MaximumRetryAttempts
			}
			if c.MaximumEventAgeInSeconds != nil {
				fn.Async.MaxEventAge = time.Duration(*c.MaximumEventAgeInSeconds) * time.Second
			}
		}
		out = append(out, fn)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

type resolver struct {
	s     *stack.Stack
	local Local
}

// resolve replaces every reference of v (stack.Parse keeps !Ref, !GetAtt and !Sub as
// ${...} text).
func (r resolver) resolve(v string) (string, error) {
	// A value naming the WebSocket API is its URL: the management endpoint.
	for _, m := range ref.FindAllStringSubmatch(v, -1) {
		if r.resourceType(m[1]) == "AWS::ApiGatewayV2::Api" {
			if r.local.ManagementEndpoint == "" {
				return "", fmt.Errorf("%q names the WebSocket API but no local management endpoint is set", v)
			}
			return r.local.ManagementEndpoint, nil
		}
	}
	var bad error
	out := ref.ReplaceAllStringFunc(v, func(m string) string {
		name := m[2 : len(m)-1]
		val, err := r.value(name)
		if err != nil && bad == nil {
			bad = fmt.Errorf("%q: %w", v, err)
		}
		return val
	})
	return out, bad
}

func (r resolver) value(name string) (string, error) {
	switch name {
	case "AWS::StackName":
		return r.local.StackName, nil
	case "AWS::Region":
		return r.local.Region, nil
	case "AWS::AccountId":
		return r.local.AccountID, nil
	case "AWS::Partition":
		return "aws", nil
	case "AWS::URLSuffix":
		return "amazonaws.com", nil
	}
	if t, ok := r.local.Tables[name]; ok {
		return t, nil
	}
	if q, ok := r.local.Queues[name]; ok {
		return q, nil
	}
	switch r.resourceType(name) {
	case "AWS::Scheduler::ScheduleGroup", "AWS::IAM::Role":
		// Schedules locally are terret dev's engine's: no group, no role to pass.
		return "", nil
	}
	if p, ok := r.s.Get("Parameters", name).(map[string]any); ok {
		if v, ok := r.local.Parameters[name]; ok {
			return v, nil
		}
		switch d := p["Default"].(type) {
		case string:
			return d, nil
		case float64:
			return strconv.FormatFloat(d, 'f', -1, 64), nil
		case bool:
			return strconv.FormatBool(d), nil
		case nil:
			return "", fmt.Errorf("parameter %s has no Default and no local value", name)
		default:
			return "", fmt.Errorf("parameter %s: Default %v is not a scalar", name, d)
		}
	}
	return "", fmt.Errorf("${%s} has no local value", name)
}

func (r resolver) resourceType(name string) string {
	id, _, _ := strings.Cut(name, ".")
	t, _ := r.s.Get("Resources", id, "Type").(string)
	return t
}
