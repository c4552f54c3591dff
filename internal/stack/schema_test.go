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
		if err := json.Unmarshal(doc.Resources[id], r); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %v", id, head.Type, err))
		}
	}
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
