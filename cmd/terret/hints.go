package main

import (
	"os"
	"path/filepath"
	"strings"
)

// invokedAs is how the user started this binary, for hints that name a command to
// type: the path as typed when it has one (bin/terret after make dev), else terret
// (found on PATH). A binary that `go run` built names itself as go run's command.
func invokedAs() string {
	a := os.Args[0]
	switch {
	case !strings.ContainsRune(a, filepath.Separator):
		return "terret"
	case strings.Contains(a, string(filepath.Separator)+"go-build"):
		return "go run ./cmd/terret"
	}
	return a
}
