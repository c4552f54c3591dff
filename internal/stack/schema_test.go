package stack

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/awslabs/goformation/v7/cloudformation"
)

// CheckSchema lives with the tests: goformation's typed resources are some 250
// packages, which would otherwise be compiled into every binary that reads the
// template (terret among them) for a check only the tests make.

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
	"AWS::DynamoDB::Table": {"OnDemandThroughput", "WarmThroughput"},
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
