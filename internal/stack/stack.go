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

	"github.com/awslabs/goformation/v7/cloudformation"
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

// CheckSchema decodes every CloudFormation (non-SAM) resource of template into
// goformation's typed struct for its type, whose decoder refuses unknown properties, with
// parameters resolved to their defaults. It returns an error per resource that does not
// decode or whose type goformation does not know.
func CheckSchema(template []byte) []error {
	js, err := processYAML(template, nil)
	if err != nil {
		return []error{fmt.Errorf("%w: %v", ErrTemplate, err)}
	}
	var doc struct {
		Resources map[string]json.RawMessage
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		return []error{fmt.Errorf("%w: %v", ErrTemplate, err)}
	}
	all := cloudformation.AllResources()
	var errs []error
	for _, id := range sortedKeys(doc.Resources) {
		var head struct{ Type string }
		if err := json.Unmarshal(doc.Resources[id], &head); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", id, err))
			continue
		}
		if strings.HasPrefix(head.Type, "AWS::Serverless::") {
			continue // goformation's SAM types lag SAM; cfn-lint checks these through the transform
		}
		r, ok := all[head.Type]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: type %s unknown to goformation", id, head.Type))
			continue
		}
		raw, err := withoutLagging(doc.Resources[id], head.Type)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", id, err))
			continue
		}
		if err := json.Unmarshal(raw, r); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %v", id, head.Type, err))
		}
	}
	return errs
}

// goformationLags names the properties CloudFormation has and goformation's last
// release does not know, by resource type. CheckSchema leaves them out of its decode;
// cfn-lint, which carries the current specification, checks them (TestLint).
var goformationLags = map[string][]string{
	"AWS::DynamoDB::Table": {"OnDemandThroughput"},
}

// withoutLagging returns the resource r of type typ without its goformationLags.
func withoutLagging(r json.RawMessage, typ string) (json.RawMessage, error) {
	lags := goformationLags[typ]
	if len(lags) == 0 {
		return r, nil
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(r, &res); err != nil {
		return nil, err
	}
	var props map[string]json.RawMessage
	if p, ok := res["Properties"]; ok {
		if err := json.Unmarshal(p, &props); err != nil {
			return nil, err
		}
	}
	for _, k := range lags {
		delete(props, k)
	}
	p, err := json.Marshal(props)
	if err != nil {
		return nil, err
	}
	res["Properties"] = p
	return json.Marshal(res)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
