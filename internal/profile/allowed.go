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

// Deployment is what a deployment runs for a role its profile names no model for: its
// MAIN_MODEL and TITLER_MODEL (the compactor runs the main role's model).
type Deployment struct{ Main, Titler string }

// AllowsModel reports whether a set_model may point role ("main", "titler" or
// "compactor") of an agent whose (merged) profile is p at spec. With allowed_models
// given, spec must match one of its globs (tools.Fnmatch: `*` matches any run, "/"
// included), whatever the role. Without it:
//   - a provider/model spec is allowed if p names it in models, for any role; a profile
//     that configures no providers also allows the deployment's MAIN_MODEL and
//     TITLER_MODEL (deploy);
//   - "scripted" is allowed only for a role that runs it by default: the role's spec
//     in p's models, else (the compactor: else the main role's) and only for a profile
//     without providers, the deployment's. So a deployment whose TITLER_MODEL is
//     scripted (the template's default) never lets a token holder switch main to
//     scripted, which runs any tool with any arguments; the demo profile of terret
//     dev, whose roles all default to scripted, still allows it.
//
// It costs no request.
func AllowsModel(p tools.Profile, role, spec string, deploy Deployment) bool {
	if p.AllowedModels != nil {
		for _, g := range p.AllowedModels {
			if tools.Fnmatch(g, spec) {
				return true
			}
		}
		return false
	}
	if len(p.Providers) > 0 {
		deploy = Deployment{}
	}
	if spec == model.SpecScripted {
		return roleDefault(p, role, deploy) == spec
	}
	for _, n := range []string{p.Models.Main, p.Models.Titler, p.Models.Compactor, deploy.Main, deploy.Titler} {
		if n != "" && n == spec {
			return true
		}
	}
	return false
}

// roleDefault is the spec role runs when no set_model chose one: p's, else deploy's
// ("" for an unknown role).
func roleDefault(p tools.Profile, role string, deploy Deployment) string {
	switch role {
	case RoleMain:
		return firstOf(p.Models.Main, deploy.Main)
	case RoleTitler:
		return firstOf(p.Models.Titler, deploy.Titler)
	case RoleCompactor:
		return firstOf(p.Models.Compactor, p.Models.Main, deploy.Main)
	}
	return ""
}

// The model roles, as set_model and the profile's models name them.
const (
	RoleMain      = "main"
	RoleTitler    = "titler"
	RoleCompactor = "compactor"
)

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
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
	for _, r := range []struct{ role, spec string }{{RoleMain, p.Models.Main}, {RoleTitler, p.Models.Titler}, {RoleCompactor, p.Models.Compactor}} {
		if r.spec != "" && !AllowsModel(p, r.role, r.spec, Deployment{}) {
			pe.Add("models."+r.role, "%q is not in allowed_models", r.spec)
		}
	}
}
