// Package stack reads template.yaml for the offline checks of the deployment: the tests
// of this package lint the template, check every function's build, environment and
// grants, the routes, the CloudFront front door and the sample events, without an AWS
// account. It also renders the LocalStack init hook from the template's tables.
package stack

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/awslabs/goformation/v7/intrinsics"
)

// ErrTemplate reports a template this package cannot read.
var ErrTemplate = errors.New("stack: unreadable template")

// processMu serializes goformation's YAML processing, which registers its tag
// resolvers in a package-level map on every call.
var processMu sync.Mutex

// processYAML is intrinsics.ProcessYAML, safe for concurrent use.
func processYAML(data []byte, opts *intrinsics.ProcessorOptions) ([]byte, error) {
	processMu.Lock()
	defer processMu.Unlock()
	return intrinsics.ProcessYAML(data, opts)
}

// Stack is a parsed template as plain JSON values, intrinsic functions kept as text.
type Stack struct {
	Raw map[string]any
}

// Parse reads a SAM template with goformation's YAML and intrinsic-function processor,
// keeping intrinsic functions as text so that properties compare as strings: !Ref X
// becomes "${X}", !GetAtt X.Y becomes "${X.Y}", !Sub keeps its template (with the
// variables of its list form substituted) and !If takes its true branch, so the checks
// see the configuration with the condition on. Parameters are never resolved.
func Parse(data []byte) (*Stack, error) {
	js, err := processYAML(data, &intrinsics.ProcessorOptions{
		IntrinsicHandlerOverrides: map[string]intrinsics.IntrinsicHandler{
			"Ref":        symbolicRef,
			"Fn::GetAtt": symbolicGetAtt,
			"Fn::Sub":    symbolicSub,
			"Fn::If":     trueBranch,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTemplate, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTemplate, err)
	}
	return &Stack{Raw: raw}, nil
}

func symbolicRef(_ string, input, _ any) any {
	name, _ := input.(string)
	return "${" + name + "}"
}

func symbolicGetAtt(_ string, input, _ any) any {
	switch v := input.(type) {
	case string:
		return "${" + v + "}"
	case []any:
		parts := make([]string, 0, len(v))
		for _, p := range v {
			parts = append(parts, fmt.Sprint(p))
		}
		return "${" + strings.Join(parts, ".") + "}"
	}
	return nil
}

func symbolicSub(_ string, input, _ any) any {
	switch v := input.(type) {
	case string:
		return v
	case []any:
		if len(v) != 2 {
			return nil
		}
		s, _ := v[0].(string)
		vars, _ := v[1].(map[string]any)
		for k, val := range vars {
			s = strings.ReplaceAll(s, "${"+k+"}", fmt.Sprint(val))
		}
		return s
	}
	return nil
}

func trueBranch(_ string, input, _ any) any {
	if v, ok := input.([]any); ok && len(v) == 3 {
		return v[1]
	}
	return nil
}

// Get walks the plain JSON view of the template along keys; nil when a key is missing.
func (s *Stack) Get(keys ...string) any {
	var v any = s.Raw
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// String is Get for a string value; "" when missing or not a string.
func (s *Stack) String(keys ...string) string {
	v, _ := s.Get(keys...).(string)
	return v
}

// Resources returns the logical ids of the resources of type typ, sorted.
func (s *Stack) Resources(typ string) []string {
	res, _ := s.Get("Resources").(map[string]any)
	var ids []string
	for id, r := range res {
		if m, ok := r.(map[string]any); ok && m["Type"] == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Decode decodes the value at keys into v (lenient: unknown fields are ignored).
func (s *Stack) Decode(v any, keys ...string) error {
	b, err := json.Marshal(s.Get(keys...))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrTemplate, strings.Join(keys, "."), err)
	}
	return nil
}

// StringList is a JSON string or array of strings (IAM's Action and Resource).
type StringList []string

// UnmarshalJSON accepts "a" and ["a", "b"].
func (l *StringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = StringList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*l = many
	return nil
}

// Statement is one IAM policy statement. Condition maps an operator
// ("ForAllValues:StringLike") to its keys ("dynamodb:LeadingKeys") and values.
type Statement struct {
	Sid       string
	Effect    string
	Action    StringList
	Resource  StringList
	Condition map[string]map[string]StringList
}

// Destination is an OnFailure destination of an event source or of asynchronous
// invocations.
type Destination struct {
	OnFailure struct {
		Type        string
		Destination string
	}
}

// StreamEvent is a DynamoDB event source of a function.
type StreamEvent struct {
	Stream                         string
	StartingPosition               string
	BatchSize                      int
	MaximumBatchingWindowInSeconds *int
	FunctionResponseTypes          []string
	BisectBatchOnFunctionError     bool
	MaximumRetryAttempts           *int
	MaximumRecordAgeInSeconds      *int
	ParallelizationFactor          *int
	FilterCriteria                 *struct{ Filters []struct{ Pattern string } }
	DestinationConfig              *Destination
}

// Properties are the properties of an AWS::Serverless::Function these checks read.
type Properties struct {
	FunctionName  string
	CodeUri       string
	Handler       string
	Runtime       string
	Architectures []string
	MemorySize    int
	Timeout       int
	Tracing       string
	// RecursiveLoop is "Allow" or "Terminate" (Lambda's default when unset).
	RecursiveLoop                string
	ReservedConcurrentExecutions any
	Environment                  struct {
		Variables map[string]string
	}
	LoggingConfig struct {
		LogFormat string
		LogGroup  string
	}
	Policies []struct {
		Statement []Statement
	}
	Events map[string]struct {
		Type       string
		Properties json.RawMessage
	}
	EventInvokeConfig *struct {
		MaximumRetryAttempts     *int
		MaximumEventAgeInSeconds *int
		DestinationConfig        *Destination
	}
}

// Function is one AWS::Serverless::Function of the template.
type Function struct {
	LogicalID string     // e.g. "ConnectFunction"
	Name      string     // its directory under functions/ and its config name: "connect"
	Props     Properties // without Globals applied
	Metadata  map[string]any
}

var logicalIDPattern = regexp.MustCompile(`^([A-Z][A-Za-z0-9]*)Function$`)

// FunctionName maps a logical id to the function's directory under functions/ (and its
// name in internal/config): "RunnerFunction" → "runner". The Makefile's build-% target
// applies the same rule. It returns "" for a logical id that does not end in Function.
func FunctionName(logicalID string) string {
	m := logicalIDPattern.FindStringSubmatch(logicalID)
	if m == nil {
		return ""
	}
	return strings.ToLower(m[1])
}

// Functions returns the template's functions sorted by logical id. It returns an error
// for a logical id FunctionName cannot map or properties it cannot decode.
func (s *Stack) Functions() ([]Function, error) {
	var out []Function
	for _, id := range s.Resources("AWS::Serverless::Function") {
		name := FunctionName(id)
		if name == "" {
			return nil, fmt.Errorf("%w: function %s: logical id must be <Name>Function", ErrTemplate, id)
		}
		f := Function{LogicalID: id, Name: name}
		if err := s.Decode(&f.Props, "Resources", id, "Properties"); err != nil {
			return nil, err
		}
		f.Metadata, _ = s.Get("Resources", id, "Metadata").(map[string]any)
		out = append(out, f)
	}
	return out, nil
}

// Globals decodes Globals.Function.
func (s *Stack) Globals() (Properties, error) {
	var g Properties
	err := s.Decode(&g, "Globals", "Function")
	return g, err
}

// Environment is the environment f gets once SAM has applied Globals: the Globals
// variables overlaid by the function's own.
func (s *Stack) Environment(f Function) (map[string]string, error) {
	g, err := s.Globals()
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for k, v := range g.Environment.Variables {
		env[k] = v
	}
	for k, v := range f.Props.Environment.Variables {
		env[k] = v
	}
	return env, nil
}

// StreamEvents decodes f's DynamoDB event sources by event name.
func (f Function) StreamEvents() (map[string]StreamEvent, error) {
	out := map[string]StreamEvent{}
	for name, e := range f.Props.Events {
		if e.Type != "DynamoDB" {
			continue
		}
		var se StreamEvent
		if err := json.Unmarshal(e.Properties, &se); err != nil {
			return nil, fmt.Errorf("%w: %s event %s: %v", ErrTemplate, f.LogicalID, name, err)
		}
		out[name] = se
	}
	return out, nil
}

// MockRoutes returns the WebSocket routes the template serves with a MOCK integration
// (no function, no table), by route key, each with the text frame its route response
// sends back: the $default response template of the integration's $default integration
// response when the route is two-way (RouteResponseSelectionExpression and a route
// response), "" when it answers nothing. `terret dev`'s gateway serves exactly these, so
// the template is the one definition of the keepalive's answer.
func (s *Stack) MockRoutes() (map[string]string, error) {
	type props struct {
		RouteKey, Target, IntegrationType, RouteResponseSelectionExpression string
		RouteID                                                             string `json:"RouteId"`
		IntegrationID                                                       string `json:"IntegrationId"`
		RouteResponseKey, IntegrationResponseKey                            string
		ResponseTemplates                                                   map[string]string
	}
	read := func(typ string) (map[string]props, error) {
		out := map[string]props{}
		for _, id := range s.Resources(typ) {
			var p props
			if err := s.Decode(&p, "Resources", id, "Properties"); err != nil {
				return nil, err
			}
			out[id] = p
		}
		return out, nil
	}
	routes, err := read("AWS::ApiGatewayV2::Route")
	if err != nil {
		return nil, err
	}
	integrations, err := read("AWS::ApiGatewayV2::Integration")
	if err != nil {
		return nil, err
	}
	routeResponses, err := read("AWS::ApiGatewayV2::RouteResponse")
	if err != nil {
		return nil, err
	}
	integrationResponses, err := read("AWS::ApiGatewayV2::IntegrationResponse")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for routeID, r := range routes {
		integration := strings.TrimSuffix(strings.TrimPrefix(r.Target, "integrations/${"), "}")
		if in, ok := integrations[integration]; !ok || in.IntegrationType != "MOCK" {
			continue
		}
		reply := ""
		twoWay := false
		for _, rr := range routeResponses {
			twoWay = twoWay || rr.RouteID == "${"+routeID+"}" && rr.RouteResponseKey == "$default"
		}
		if twoWay && r.RouteResponseSelectionExpression == "$default" {
			for _, ir := range integrationResponses {
				if ir.IntegrationID == "${"+integration+"}" && ir.IntegrationResponseKey == "$default" {
					reply = ir.ResponseTemplates["$default"]
				}
			}
			if reply == "" {
				return nil, fmt.Errorf("%w: route %s is two-way but its MOCK integration %s has no $default response template", ErrTemplate, r.RouteKey, integration)
			}
		}
		out[r.RouteKey] = reply
	}
	return out, nil
}
