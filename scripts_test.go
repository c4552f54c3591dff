package terretws_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stubs are the expensive tools `make dev` runs, as shell scripts that log their
// arguments to $STUB_LOG and do the least their callers rely on: npm ci makes
// node_modules, go build writes a bin/terret that prints the ready line and its
// arguments. The scripts under test are the real ones.
var stubs = map[string]string{
	// terret: writes --ready-file's file, prints the ready line and its arguments, and
	// exits with $STUB_EXIT.
	"terret": `while [ $# -gt 0 ]; do case "$1" in --ready-file) echo '{}' >"$2" ;; esac; all="$all $1"; shift; done
echo "terret dev: listening on ws://127.0.0.1:3001/agents/{agent_id}/ws"
echo "args:$all"
exit "${STUB_EXIT:-0}"`,
	"npm":  `echo "npm $*" >>"$STUB_LOG"; mkdir -p node_modules`,
	"java": `echo "java $*" >>"$STUB_LOG"`,
	"go": `echo "go $*" >>"$STUB_LOG"
case "$1" in
  build)
    # With $STUB_SLOW_BUILD, a build that lasts until that file exists.
    if [ -n "$STUB_SLOW_BUILD" ]; then while [ ! -e "$STUB_SLOW_BUILD" ]; do sleep 0.1; done; fi
    cp "$(dirname "$0")/terret" "$3"
    chmod +x "$3" ;;
  list) echo v0.0.0-stub ;;
  install) mkdir -p "$GOBIN" && printf '#!/bin/sh\n' >"$GOBIN/aws-lambda-rie" && chmod +x "$GOBIN/aws-lambda-rie" ;;
esac`,
}

// checkout copies the Makefile and the scripts into a temporary tree with stubbed tools
// first on PATH, and returns the tree, the environment and the stub log's path.
func checkout(t *testing.T) (dir string, env []string, log string) {
	t.Helper()
	dir = t.TempDir()
	for _, f := range []string{"Makefile", "scripts/deps.sh", "scripts/dev.sh",
		"localstack/dynamodb-local/package.json", "localstack/dynamodb-local/package-lock.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stubDir := filepath.Join(t.TempDir(), "stubs")
	if err := os.MkdirAll(stubDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range stubs {
		if err := os.WriteFile(filepath.Join(stubDir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	log = filepath.Join(t.TempDir(), "stub.log")
	// A make that runs this test (make test) must not make these makes its sub-makes:
	// they would print "Entering directory" lines and take its flags.
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES":
		default:
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+stubDir+string(os.PathListSeparator)+os.Getenv("PATH"), "STUB_LOG="+log)
	return dir, env, log
}

// run runs name args in dir and returns its output lines (stdout and stderr together).
func run(t *testing.T, dir string, env []string, wantOK bool, name string, args ...string) []string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if (err == nil) != wantOK {
		t.Fatalf("%s %s: %v, want success %v:\n%s", name, strings.Join(args, " "), err, wantOK, out)
	}
	return strings.Split(strings.TrimRight(string(out), "\n"), "\n")
}

// inOrder checks that lines holds a line starting with each of want, in that order, and
// that no line starts with any of absent.
func inOrder(t *testing.T, what string, lines, want, absent []string) {
	t.Helper()
	i := 0
	for _, l := range lines {
		for _, a := range absent {
			if strings.HasPrefix(l, a) {
				t.Errorf("%s: line %q, which should not be there", what, l)
			}
		}
		if i < len(want) && strings.HasPrefix(l, want[i]) {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("%s: no line %q after the ones before it; output:\n%s", what, want[i], strings.Join(lines, "\n"))
	}
}

func stubLog(t *testing.T, log string) string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(log)
	return string(b)
}

// TestMakeDevSteps: `make dev` says what it is doing before each step, installs only
// what terret dev needs (no aws-lambda-rie), builds bin/terret with go build and runs
// it with --approvals and DEV_FLAGS; a second run skips the install but not the build
// (go build's cache makes that quick).
func TestMakeDevSteps(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	dir, env, log := checkout(t)

	lines := run(t, dir, env, true, "make", "dev", "DEV_FLAGS=--in-memory")
	inOrder(t, "first make dev", lines, []string{
		"deps: installing DynamoDB Local (npm ci",
		"deps: Go modules (go mod download",
		"dev: building bin/terret (go build ./cmd/terret: the first build takes a minute or two",
		"dev: starting bin/terret dev --approvals --in-memory",
		"terret dev: listening on ws://",
		"args: dev --approvals --in-memory",
	}, []string{"deps: building aws-lambda-rie"})
	if l := lines[len(lines)-1]; !strings.HasSuffix(l, " --in-memory") {
		t.Errorf("terret ran with %q, want DEV_FLAGS last", l)
	}
	calls := stubLog(t, log)
	for _, want := range []string{"npm ci ", "go mod download\n", "go build -o bin/terret ./cmd/terret\n"} {
		if !strings.Contains(calls, want) {
			t.Errorf("first make dev did not run %q; ran:\n%s", want, calls)
		}
	}
	if strings.Contains(calls, "go install") || strings.Contains(calls, "go run") {
		t.Errorf("make dev ran more than it needs:\n%s", calls)
	}

	lines = run(t, dir, env, true, "make", "dev")
	inOrder(t, "second make dev", lines, []string{
		"dev: building bin/terret",
		"dev: starting bin/terret dev --approvals",
		"args: dev --approvals",
	}, []string{"deps: installing DynamoDB Local"})
	if calls := stubLog(t, log); strings.Contains(calls, "npm") {
		t.Errorf("second make dev reinstalled DynamoDB Local:\n%s", calls)
	}

	// terret's exit status is make's; the caller's own --ready-file is terret's.
	run(t, dir, append(env, "STUB_EXIT=3"), false, "make", "dev")
	lines = run(t, dir, append(env, "STUB_EXIT=3"), false, "make", "dev", "DEV_FLAGS=--ready-file mine.json")
	inOrder(t, "make dev with --ready-file", lines, []string{"args: dev --approvals --ready-file mine.json"}, nil)
	if _, err := os.Stat(filepath.Join(dir, "mine.json")); err != nil {
		t.Errorf("the caller's --ready-file: %v", err)
	}
}

// TestMakeDevSlowBuild: while go build runs, `make dev` prints a line every
// DEV_PROGRESS_EVERY seconds (10 by default; 1 here), and none once it has ended. The
// build (a stub) lasts until the test has seen two such lines.
func TestMakeDevSlowBuild(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	dir, env, _ := checkout(t)
	release := filepath.Join(t.TempDir(), "release")
	cmd := exec.Command("make", "dev")
	cmd.Dir, cmd.Env = dir, append(env, "STUB_SLOW_BUILD="+release, "DEV_PROGRESS_EVERY=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Without the lines the build would never end: it is released after a minute then,
	// and the checks below fail.
	bound := time.AfterFunc(time.Minute, func() { _ = os.WriteFile(release, nil, 0o644) })
	defer bound.Stop()
	var lines []string
	still := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		l := sc.Text()
		lines = append(lines, l)
		if strings.HasPrefix(l, "dev: building bin/terret: still compiling (") {
			if still++; still == 2 {
				if err := os.WriteFile(release, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("make dev: %v:\n%s", err, strings.Join(lines, "\n"))
	}
	inOrder(t, "make dev with a slow build", lines, []string{
		"dev: building bin/terret (go build ./cmd/terret",
		"dev: building bin/terret: still compiling (1 s)",
		"dev: building bin/terret: still compiling (2 s)",
		"dev: starting bin/terret dev --approvals",
		"terret dev: listening on ws://",
	}, nil)
	inOrder(t, "make dev after its build", lines, []string{"dev: starting bin/terret dev"}, nil)
	started := false
	for _, l := range lines {
		started = started || strings.HasPrefix(l, "dev: starting bin/terret dev")
		if started && strings.Contains(l, "still compiling") {
			t.Errorf("a still-compiling line after the build ended: %q", l)
		}
	}
}

// TestDepsScopes: scripts/deps.sh with no argument also builds aws-lambda-rie (once,
// saying so), and refuses a scope it does not know.
func TestDepsScopes(t *testing.T) {
	dir, env, log := checkout(t)
	lines := run(t, dir, env, true, "./scripts/deps.sh")
	inOrder(t, "deps.sh", lines, []string{
		"deps: installing DynamoDB Local",
		"deps: Go modules",
		"deps: building aws-lambda-rie v0.0.0-stub into bin/",
	}, nil)
	if calls := stubLog(t, log); !strings.Contains(calls, "go install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-stub") {
		t.Errorf("deps.sh did not install aws-lambda-rie:\n%s", calls)
	}
	lines = run(t, dir, env, true, "./scripts/deps.sh")
	inOrder(t, "deps.sh again", lines, nil, []string{"deps: installing", "deps: building"})

	lines = run(t, dir, env, false, "./scripts/deps.sh", "devv")
	inOrder(t, "deps.sh devv", lines, []string{`deps: unknown scope "devv" (all or dev)`}, nil)
}
