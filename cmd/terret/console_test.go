package main

import (
	"bytes"
	"log/slog"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

func TestConsoleLogger(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	log, err := consoleLogger(&b, "info", "text")
	if err != nil {
		t.Fatal(err)
	}
	log.With("connection_id", "c=1", "request_id", "r1").Info("frame", "type", "inject", "chars", 5)
	log.Debug("not shown")
	log.Error("turn failed", "agent_id", "a1", "reason", `model said "no"`)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	want := []string{
		`^\d\d:\d\d:\d\d\.\d{3} frame connection_id=c=1 type=inject chars=5$`,
		`^\d\d:\d\d:\d\d\.\d{3} ERROR turn failed agent_id=a1 reason="model said \\"no\\""$`,
	}
	if len(lines) != len(want) {
		t.Fatalf("lines:\n%s\nwant %d lines", b.String(), len(want))
	}
	for i, re := range want {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("line %d = %q, want %s", i, lines[i], re)
		}
	}
	for _, bad := range [][2]string{{"loud", "text"}, {"info", "xml"}} {
		if _, err := consoleLogger(&b, bad[0], bad[1]); err == nil {
			t.Errorf("consoleLogger(%q, %q) accepted", bad[0], bad[1])
		}
	}
	b.Reset()
	jl, _ := consoleLogger(&b, "warn", "json")
	jl.Info("hidden")
	jl.Warn("shown", slog.String("k", "v"))
	if !strings.Contains(b.String(), `"msg":"shown","k":"v"`) || strings.Contains(b.String(), "hidden") {
		t.Fatalf("json console: %s", b.String())
	}
}

func TestPrefixWriter(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	w := prefixWriter(&b, "terret dev: ")
	w.Write([]byte("added 2 pack"))
	w.Write([]byte("ages\n\nnext\n"))
	if got, want := b.String(), "terret dev: added 2 packages\nterret dev: next\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestVersionLine(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/terret/terret-ws", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-12-01T07:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := versionLine(bi), "terret github.com/terret/terret-ws v1.2.3 (commit abc123, 2026-12-01T07:00:00Z, modified) go1.26.0"; got != want {
		t.Fatalf("versionLine = %q, want %q", got, want)
	}
	bi.Settings, bi.Main.Version = nil, ""
	if got, want := versionLine(bi), "terret github.com/terret/terret-ws (devel) (commit unknown: built without VCS stamping) go1.26.0"; got != want {
		t.Fatalf("versionLine without VCS = %q, want %q", got, want)
	}
}
