// Package terretws carries the project's SAM template so that `terret dev` and the
// tests create their tables from the one definition in template.yaml.
package terretws

import _ "embed"

// Template is template.yaml as committed.
//
//go:embed template.yaml
var Template []byte
