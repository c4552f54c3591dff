package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is the line `terret --version` prints: the module version and the commit it
// was built from, as the Go toolchain stamped them into the binary.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "terret (no build information) " + runtime.Version()
	}
	return versionLine(bi)
}

// versionLine formats bi: module path and version, then the VCS commit, its time and
// whether the tree had changes, which `go build` and `go install` record inside a git
// checkout unless -buildvcs=false.
func versionLine(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	commit := "commit unknown: built without VCS stamping"
	if rev != "" {
		commit = "commit " + rev
		if at != "" {
			commit += ", " + at
		}
		commit += modified
	}
	return fmt.Sprintf("terret %s %s (%s) %s", bi.Main.Path, v, commit, bi.GoVersion)
}
