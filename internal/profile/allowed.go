package profile

import (
	"fmt"
	"unicode/utf8"

	"github.com/terret/terret-ws/internal/model"
	"github.com/terret/terret-ws/internal/tools"
)

// Bounds of allowed_models: every set_model scans the list.
const (
	MaxAllowedModels = 64  // globs in one profile
	MaxAllowedChars  = 256 // characters in one glob
)

// AllowsModel reports whether a set_model may point a role of an agent whose (merged)
// profile is p at spec. With allowed_models given, spec must match one of its globs
// (tools.Fnmatch: `*` matches any run, "/" included). Without it, the allowed specs are
// the ones p names in models; a profile that configures no providers also allows
// fallback, the specs its roles run when it names none (the deployment's MAIN_MODEL and
// TITLER_MODEL, scripted by default: the demo profile). So "scripted" is allowed only
// where a profile or, for a profile without providers, the deployment names it.
// It costs no request.
func AllowsModel(p tools.Profile, spec string, fallback ...string) bool {
	if p.AllowedModels != nil {
		for _, g := range p.AllowedModels {
			if tools.Fnmatch(g, spec) {
				return true
			}
		}
		return false
	}
	named := []string{p.Models.Main, p.Models.Titler, p.Models.Compactor}
	if len(p.Providers) == 0 {
		named = append(named, fallback...)
	}
	for _, n := range named {
		if n != "" && n == spec {
			return true
		}
	}
	return false
}

// checkAllowed records the problems of p's allowed_models: too many, empty or too
// long globs, and model roles p names that its own list would refuse.
func checkAllowed(pe *tools.ProfileError, p tools.Profile) {
	if p.AllowedModels == nil {
		return
	}
	if n := len(p.AllowedModels); n > MaxAllowedModels {
		pe.Add("allowed_models", "%d globs, at most %d allowed", n, MaxAllowedModels)
	}
	for i, g := range p.AllowedModels {
		path := fmt.Sprintf("allowed_models[%d]", i)
		switch n := utf8.RuneCountInString(g); {
		case g == "":
			pe.Add(path, "empty glob: give a \"provider/model\" spec, a glob such as \"acme/*\", or %q", model.SpecScripted)
		case n > MaxAllowedChars:
			pe.Add(path, "%d characters, at most %d allowed", n, MaxAllowedChars)
		case !utf8.ValidString(g):
			pe.Add(path, "not valid UTF-8")
		}
	}
	for _, r := range []struct{ role, spec string }{{"main", p.Models.Main}, {"titler", p.Models.Titler}, {"compactor", p.Models.Compactor}} {
		if r.spec != "" && !AllowsModel(p, r.spec) {
			pe.Add("models."+r.role, "%q is not in allowed_models", r.spec)
		}
	}
}
